"""Long inputs: a SmolLM2-135M-shaped model at 4,096 and 8,192 tokens, its maps pooled in the kernel.

    python -m benchmarks.long                   # 4,096 and 8,192 tokens -> benchmarks/results-long.json
    python -m benchmarks.long --tokens 2048     # one length

A SmolLM2-135M-shaped llama (30 layers, 9 heads, 3 KV heads, width 576, vocab 49152, random float32 weights
written with transformers; max_position_embeddings 8,192) per length, in one process:

- `window`: the offscreen MainWindow (1400 x 950, the model view open) on a short text, then the text box
  set to the long text -> that request on screen (every layer in the model view, the layer's heads in the
  grid; `maps_s`), then the predictions strip (`seconds`: it follows the maps); a QTimer on the GUI thread
  ticks every 5 ms throughout (the longest stall);
- `transformers`: AutoModel with its default attention (SDPA: no weights returned) on the same ids, at the
  torch thread count the worker's forward used, in inference mode;
- `memory`: in a fresh process, load_model + run() (pooled: auto) + frames.render: peak RSS over the
  interpreter with its imports (benchmarks.models' memory child).

Then `seed`: in a fresh process, the causal seed variant at 16,384 tokens (16 heads, width 1,024; pooled: auto)
+ frames.render: whole-process peak RSS (`--seed-tokens 0` skips it).

Targets: window / transformers <= 2.0; peak RSS <= weights + 1.5 GB; longest stall <= 50 ms; the
seed case completes pooled with peak RSS <= 3 GB.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, load_average, log, machine_info
from .models import SMOLLM2, Window, text_of, weights_bytes, write_hf_model
from .streaming import Ticker

RATIO = 2.0
RSS_ALLOWANCE = 1.5e9
STALL_S = 0.050
SEED_RSS = 3e9
RESULTS = Path(__file__).with_name("results-long.json")


def transformers_forward(folder: Path, ids: list[int], threads: int) -> float:
    """Seconds for transformers' own forward (default attention) of `ids` at `threads` torch threads."""
    import torch
    from transformers import AutoModel

    from attnviz.system import torch_threads

    model = AutoModel.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True).eval()
    with torch_threads(threads), torch.inference_mode():
        t0 = time.perf_counter()
        model(torch.tensor([ids]))
        return time.perf_counter() - t0


def window_run(folder: Path, shape) -> dict:
    """The long text into a window already showing the model: seconds to screen, stall, pooling."""
    short = dataclasses.replace(shape, tokens=32)
    win = Window(folder, text_of(short))
    try:
        win.w.modelDock.show()  # every layer drawn: the model view open, in front
        win.w.modelDock.raise_()
        ticker = Ticker()
        ticker.start()
        seconds = win.edit(text_of(shape), blocking=True)
        stall = ticker.stop()
        result = win.w.result
        # maps_s: every layer's maps on screen (sigShown); seconds: the predictions strip too (it follows them)
        return {"seconds": seconds, "maps_s": win.maps_s[-1], "forward_s": result.compute_time_s,
                "threads": win.w.worker.threads_used,
                "tokens": len(result.token_ids), "pool_factor": list(result.pool_factor or ()),
                "notes": list(result.notes), "status": win.w.statusBar().currentMessage(),
                "ids": [int(i) for i in result.token_ids], **stall}
    finally:
        win.close()


def memory_run(folder: Path, shape) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    spec = {"folder": str(folder), "text": text_of(shape)}
    cmd = ["/bin/sh", "-c", '"$0" "$@"; exit $?', sys.executable, "-m", "benchmarks.models", "--child",
           json.dumps(spec)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    if proc.returncode:
        return {"status": "failed", "reason": proc.stderr.strip().splitlines()[-1]}  # the error, not its paths
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    weights = weights_bytes(folder)
    used = data["peak_bytes"] - data["after_imports_bytes"]
    return {**data, "weights_bytes": weights, "increment_bytes": used, "budget_bytes": int(weights + RSS_ALLOWANCE),
            "pass": used <= weights + RSS_ALLOWANCE}


def _seed_child(tokens: int) -> dict:
    import resource

    from attnviz.core import RunConfig, run
    from attnviz.frames import ViewOptions, render

    t0 = time.perf_counter()
    result = run(RunConfig.for_variant("causal", seq_q=tokens, heads=16, d_model=1024))
    render(result, ViewOptions(max_px=(512, 512)))
    return {"tokens": tokens, "seconds": time.perf_counter() - t0, "pool_factor": list(result.pool_factor or ()),
            "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def seed_run(tokens: int) -> dict:
    """The seed causal variant at `tokens` in a fresh process (through /bin/sh: a forked parent's peak RSS
    would carry into the child's ru_maxrss)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = ["/bin/sh", "-c", '"$0" "$@"; exit $?', sys.executable, "-m", "benchmarks.long", "--seed-child",
           str(tokens)]
    load = [load_average()]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3000)
    load.append(load_average())
    if proc.returncode:
        return {"status": "failed", "reason": proc.stderr.strip().splitlines()[-1], "loadavg": load}
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**data, "loadavg": load, "budget_bytes": int(SEED_RSS), "pass": data["peak_bytes"] <= SEED_RSS}


def bench_length(tokens: int, root: Path) -> dict:
    shape = dataclasses.replace(SMOLLM2, tokens=tokens, max_positions=max(8192, tokens),
                                name=f"smollm2-135m-{tokens}")
    folder = write_hf_model(shape, root / shape.name)
    load = [load_average()]
    window = window_run(folder, shape)
    ids = window.pop("ids")
    eager = transformers_forward(folder, ids, max(1, window["threads"]))
    memory = memory_run(folder, shape)
    load.append(load_average())
    ratio = window["maps_s"] / eager
    return {"tokens": tokens, "window": window, "transformers_s": eager, "ratio": ratio,
            "ratio_with_predictions": window["seconds"] / eager, "memory": memory,
            "loadavg": load, "pass": {"ratio": ratio <= RATIO, "memory": memory.get("pass", False),
                                      "stall": (window["longest_stall_s"] or 0) <= STALL_S}}


def table(results: dict) -> str:
    lines = [f"{'tokens':>8} {'maps s':>7} {'+strip s':>9} {'transformers s':>15} {'ratio':>6} "
             f"{'peak over imports':>18} {'budget':>8} {'stall ms':>9}"]
    for r in results["lengths"]:
        m, stall = r["memory"], (r["window"]["longest_stall_s"] or 0) * 1e3
        lines.append(f"{r['tokens']:>8} {r['window'].get('maps_s', float('nan')):>7.1f} "
                     f"{r['window']['seconds']:>9.1f} {r['transformers_s']:>15.1f} "
                     f"{r['ratio']:>6.2f} {m.get('increment_bytes', 0) / 2**30:>15.2f} GiB "
                     f"{m.get('budget_bytes', 0) / 2**30:>4.2f} GiB {stall:>9.1f}")
    lines.append(f"targets: ratio <= {RATIO}, peak <= weights + {RSS_ALLOWANCE / 1e9:.1f} GB, stall <= "
                 f"{STALL_S * 1e3:.0f} ms")
    seed = results.get("seed")
    if seed:
        peak = f"{seed['peak_bytes'] / 2**30:.2f} GiB in {seed['seconds']:.0f} s" if "peak_bytes" in seed else seed
        lines.append(f"seed causal variant, {seed.get('tokens', '')} tokens: peak RSS {peak} (target <= "
                     f"{SEED_RSS / 1e9:.0f} GB)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.long", description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", default="4096,8192", help="comma-separated lengths")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--seed-tokens", type=int, default=16384, help="the seed variant's length (0: skip it)")
    parser.add_argument("--seed-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seed_child:
        print(json.dumps(_seed_child(args.seed_child)))
        return 0
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    results: dict = {"benchmark": "long", "machine": machine_info(), "lengths": []}
    with tempfile.TemporaryDirectory(prefix="attnviz-long-") as tmp:
        for tokens in (int(t) for t in args.tokens.split(",")):
            log(f"[{tokens} tokens] ...")
            results["lengths"].append(bench_length(tokens, Path(tmp)))
    if args.seed_tokens:
        log(f"[seed causal variant, {args.seed_tokens} tokens] ...")
        results["seed"] = seed_run(args.seed_tokens)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
