"""Pretrained-model benchmarks (issue 11), on random weights written here (never committed).

    python -m benchmarks.models            # table on stdout, benchmarks/results-models.json
    python -m benchmarks.models --quick    # fewer rounds

1. `edit`: a MiniLM-sized BERT (6 layers, 12 heads, width 384, vocab 30522) at 128 tokens in the
   offscreen MainWindow: the text box edited (one word changed) -> sigShown of that request, i.e. every
   head of the layer on screen, plus a forced repaint. Also the engine alone (run() of a new text) and a
   layer change (no forward). Target: edit p50 <= 150 ms.
2. `open`: that model's ~90 MB safetensors folder -> load_model (config, headers, memory-mapped weights,
   tokenizer), the cache cleared before each round. Target: <= 1 s.
3. `memory`: a 12-layer, width-768 BERT (bert-base-sized) at 512 tokens, in a fresh process: peak RSS
   over the interpreter with its imports, for load_model + run() + frames.render. Target:
   <= weights + 2.5 x the maps kept (every layer's scores and weights) + 400 MB.
Every number is recorded with the load average (/proc/loadavg) around it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .common import BENCH_DIR, MIB, ROOT, load_average, log, machine_info, summary

ALLOWANCE = 400 * 1000 * 1000
MAP_STAGES_KEPT = 2  # scores and weights per layer (dropped is weights in eval mode)


@dataclass(frozen=True)
class ModelSize:
    name: str
    layers: int
    heads: int
    width: int
    tokens: int
    vocab: int = 30522

    @property
    def parameters(self) -> int:
        d, ff = self.width, 4 * self.width
        per_layer = 4 * (d * d + d) + 2 * d * ff + ff + d + 4 * d
        return self.vocab * d + 512 * d + 2 * d + 2 * d + self.layers * per_layer

    @property
    def maps_bytes(self) -> int:
        return self.layers * MAP_STAGES_KEPT * self.heads * self.tokens ** 2 * 4


MINILM = ModelSize("minilm", layers=6, heads=12, width=384, tokens=128)
BASE = ModelSize("base-512", layers=12, heads=12, width=768, tokens=512)
TINY = ModelSize("tiny", layers=2, heads=2, width=32, tokens=16, vocab=200)


def text_of(size: ModelSize, variant: int = 0) -> str:
    """`tokens - 2` words (plus [CLS] and [SEP]); `variant` changes one word."""
    words = [f"w{(7 * i) % (size.vocab - 10)}" for i in range(size.tokens - 2)]
    words[len(words) // 2] = f"w{variant % (size.vocab - 10)}"
    return " ".join(words)


def write_model(size: ModelSize, folder: Path) -> Path:
    """A random BERT checkpoint (float32 safetensors), config.json and a WordLevel tokenizer.json."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    folder.mkdir(parents=True, exist_ok=True)
    d, ff = size.width, 4 * size.width
    g = torch.Generator().manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g) * 0.05

    state = {"embeddings.word_embeddings.weight": rnd(size.vocab, d),
             "embeddings.position_embeddings.weight": rnd(512, d),
             "embeddings.token_type_embeddings.weight": rnd(2, d),
             "embeddings.LayerNorm.weight": torch.ones(d), "embeddings.LayerNorm.bias": torch.zeros(d)}
    for i in range(size.layers):
        p = f"encoder.layer.{i}."
        for name, shape in (("attention.self.query", (d, d)), ("attention.self.key", (d, d)),
                            ("attention.self.value", (d, d)), ("attention.output.dense", (d, d)),
                            ("intermediate.dense", (ff, d)), ("output.dense", (d, ff))):
            state[f"{p}{name}.weight"], state[f"{p}{name}.bias"] = rnd(*shape) * 4, rnd(shape[0])
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            state[f"{p}{name}.weight"], state[f"{p}{name}.bias"] = torch.ones(d), torch.zeros(d)
    save_file(state, str(folder / "model.safetensors"))
    config = {"model_type": "bert", "hidden_size": d, "num_hidden_layers": size.layers,
              "num_attention_heads": size.heads, "intermediate_size": ff, "vocab_size": size.vocab,
              "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu"}
    (folder / "config.json").write_text(json.dumps(config))
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{f"w{i}": i + 4 for i in range(size.vocab - 4)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2),
                                                                                                 ("[SEP]", 3)])
    tok.save(str(folder / "tokenizer.json"))
    return folder


def bench_open(folder: Path, repeats: int) -> dict:
    from attnviz.models import clear_cache, load_model

    times = []
    load = [load_average()]
    for _ in range(repeats + 1):
        clear_cache()
        t0 = time.perf_counter()
        load_model(folder)
        times.append(time.perf_counter() - t0)
    load.append(load_average())
    size = sum(f.stat().st_size for f in folder.iterdir())
    return {"folder_bytes": size, "first_s": times[0], "seconds": summary(times[1:]), "loadavg": load,
            "target": "<= 1 s", "pass": summary(times[1:])["p50"] <= 1.0}


def bench_engine(folder: Path, size: ModelSize, repeats: int) -> dict:
    from attnviz.core import RunConfig, run

    base = RunConfig(variant="pretrained", model=str(folder), text=text_of(size))
    run(base)  # load and warm up
    load = [load_average()]
    forward = []
    for k in range(repeats):
        t0 = time.perf_counter()
        r = run(base.replace(text=text_of(size, k + 1)))
        forward.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for layer in range(size.layers):
        r.source.result(layer)
    per_layer = (time.perf_counter() - t0) / size.layers
    load.append(load_average())
    return {"run_new_text_s": summary(forward), "layer_from_forward_s": per_layer, "loadavg": load}


def bench_edit(folder: Path, size: ModelSize, repeats: int, lowered: bool = True) -> dict:
    """Offscreen window: a text edit (and a layer change) -> the new maps on screen.
    lowered=False: the experiment with the worker thread left at the GUI's priority (not what ships)."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    import attnviz.ui.worker as worker_module
    from attnviz.ui import MainWindow

    if not lowered:
        worker_module.lower_priority = lambda *_: None  # any step: stay at the GUI's priority

    app = QApplication.instance() or QApplication([])
    w = MainWindow()
    w.resize(1400, 950)
    w.show()

    parts = {"worker_s": [], "compute_s": []}

    def shown_after(change) -> float:
        before = w.latest_id
        t0 = time.perf_counter()
        change()
        while not (w.latest_id > before and w.is_settled()):
            app.processEvents()
            time.sleep(0.0005)
        w.headGrid.viewport().repaint()
        return time.perf_counter() - t0

    def edit(k: int) -> float:
        dt = shown_after(lambda: text.setText(text_of(size, k + 1)))
        parts["worker_s"].append(w.last_outcome_worker_s)
        parts["compute_s"].append(w.result.compute_time_s)
        return dt

    w.sigShown.connect(lambda _: None)
    original = w._on_done

    def on_done(outcome):  # what the worker thread spent on the request (run + frames)
        w.last_outcome_worker_s = outcome.worker_time_s
        original(outcome)
    w.worker.sigDone.disconnect(w._on_done)
    w.worker.sigDone.connect(on_done)

    panel = w.panel
    shown_after(lambda: panel.widgets["variant"].setCurrentIndex(panel.widgets["variant"].findData("pretrained")))
    shown_after(lambda: panel.widgets["model"].set_folder(str(folder)))
    text = panel.widgets["text"]
    shown_after(lambda: text.setText(text_of(size)))
    assert w.last_error is None, w.last_error
    load = [load_average()]
    edits = [edit(k) for k in range(repeats)]
    layers = [shown_after(lambda k=k: panel.widgets["layer"].setValue((k + 1) % size.layers)) for k in range(repeats)]
    load.append(load_average())
    heads, tokens = w.result.weights.shape[1], w.result.weights.shape[-1]
    w.close()
    return {"edit_s": summary(edits), "layer_change_s": summary(layers), "heads": heads, "tokens": tokens,
            "worker_s": summary(parts["worker_s"]), "forward_s": summary(parts["compute_s"]),
            "worker_lowered": lowered, "loadavg": load, "target": "edit p50 <= 150 ms",
            "pass": summary(edits)["p50"] <= 0.150}


def _memory_child(spec: dict) -> dict:
    import resource

    def peak() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    from attnviz.core import RunConfig, run
    from attnviz.frames import ViewOptions, render
    from attnviz.models import load_model

    after_imports = peak()
    t0 = time.perf_counter()
    load_model(spec["folder"])
    after_load = peak()
    result = run(RunConfig(variant="pretrained", model=spec["folder"], text=spec["text"]))
    after_run = peak()
    render(result, ViewOptions(max_px=(512, 512)))
    return {"after_imports_bytes": after_imports, "after_load_bytes": after_load, "after_run_bytes": after_run,
            "peak_bytes": peak(), "seconds": time.perf_counter() - t0, "tokens": int(result.weights.shape[-1])}


def bench_memory(folder: Path, size: ModelSize) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    spec = {"folder": str(folder), "text": text_of(size)}
    # through /bin/sh: a forked parent's peak RSS would otherwise carry into the child's ru_maxrss
    cmd = ["/bin/sh", "-c", '"$0" "$@"; exit $?', sys.executable, "-m", "benchmarks.models", "--child",
           json.dumps(spec)]
    load = [load_average()]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    load.append(load_average())
    if proc.returncode:
        return {"status": "failed", "reason": proc.stderr.strip()[-800:]}
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    weights = size.parameters * 4
    budget = weights + 2.5 * size.maps_bytes + ALLOWANCE
    used = data["peak_bytes"] - data["after_imports_bytes"]
    return {**data, "weights_bytes": weights, "maps_kept_bytes": size.maps_bytes, "increment_bytes": used,
            "budget_bytes": int(budget), "pass": used <= budget, "loadavg": load,
            "target": "peak RSS over the imports <= weights + 2.5 x maps kept + 400 MB"}


def run_all(sizes: tuple[ModelSize, ModelSize], repeats: int, root: Path) -> dict:
    small, large = sizes
    log(f"writing random checkpoints under {root}")
    small_dir, large_dir = write_model(small, root / small.name), write_model(large, root / large.name)
    results = {"machine": machine_info(), "sizes": [asdict(small), asdict(large)]}
    for key, fn in (("open", lambda: bench_open(small_dir, repeats)),
                    ("engine", lambda: bench_engine(small_dir, small, repeats)),
                    ("edit", lambda: bench_edit(small_dir, small, repeats)),
                    ("edit_worker_not_lowered", lambda: bench_edit(small_dir, small, repeats, lowered=False)),
                    ("memory", lambda: bench_memory(large_dir, large))):
        log(f"{key} ...")
        try:
            results[key] = fn()
        except Exception as exc:  # noqa: BLE001 - record and go on
            results[key] = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    return results


def table(r: dict) -> str:
    ms = 1e3
    lines = ["| measurement | value | target | pass | load avg |", "|---|---|---|---|---|"]
    if "seconds" in r.get("open", {}):
        o = r["open"]
        lines.append(f"| open {o['folder_bytes'] / MIB:.0f} MiB folder (p50; first {o['first_s'] * ms:.0f} ms) | "
                     f"{o['seconds']['p50'] * ms:.0f} ms | <= 1000 ms | {o['pass']} | {o['loadavg']} |")
    if "run_new_text_s" in r.get("engine", {}):
        e = r["engine"]
        lines.append(f"| run() of a new text, every layer (p50) | {e['run_new_text_s']['p50'] * ms:.1f} ms | - | - | "
                     f"{e['loadavg']} |")
        lines.append(f"| another layer from the kept forward | {e['layer_from_forward_s'] * ms:.3f} ms | - | - | |")
    if "edit_s" in r.get("edit", {}):
        e = r["edit"]
        lines.append(f"| text edit -> {e['heads']} heads on screen, {e['tokens']} tokens (p50 / p90) | "
                     f"{e['edit_s']['p50'] * ms:.0f} / {e['edit_s']['p90'] * ms:.0f} ms | <= 150 ms | {e['pass']} | "
                     f"{e['loadavg']} |")
        lines.append(f"| of which worker thread (run + frames) / forward (p50) | {e['worker_s']['p50'] * ms:.0f} / "
                     f"{e['forward_s']['p50'] * ms:.0f} ms | - | - | |")
        lines.append(f"| layer change -> on screen (p50 / p90) | {e['layer_change_s']['p50'] * ms:.0f} / "
                     f"{e['layer_change_s']['p90'] * ms:.0f} ms | - | - | |")
    if "edit_s" in r.get("edit_worker_not_lowered", {}):
        e = r["edit_worker_not_lowered"]
        lines.append(f"| experiment: the same edit, worker thread not niced (p50 / p90; worker, forward p50) | "
                     f"{e['edit_s']['p50'] * ms:.0f} / {e['edit_s']['p90'] * ms:.0f} ms "
                     f"({e['worker_s']['p50'] * ms:.0f}, {e['forward_s']['p50'] * ms:.0f} ms)"
                     f" | - | - | {e['loadavg']} |")
    if "increment_bytes" in r.get("memory", {}):
        m = r["memory"]
        lines.append(f"| 12 x 768 at {m['tokens']} tokens: peak RSS over imports | "
                     f"{m['increment_bytes'] / MIB:.0f} MiB "
                     f"| <= {m['budget_bytes'] / MIB:.0f} MiB (weights {m['weights_bytes'] / MIB:.0f} + 2.5 x maps "
                     f"{m['maps_kept_bytes'] / MIB:.0f} + 381) | {m['pass']} | {m['loadavg']} |")
    for key in ("open", "engine", "edit", "memory"):
        if r.get(key, {}).get("status") == "failed":
            lines.append(f"| {key} | failed: {r[key]['reason'][:200]} | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.models", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="5 rounds instead of 20")
    p.add_argument("--tiny", action="store_true", help="tiny sizes (the smoke test)")
    p.add_argument("--output", default=str(BENCH_DIR / "results-models.json"))
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_memory_child(json.loads(args.child))))
        return 0
    sizes = (TINY, TINY) if args.tiny else (MINILM, BASE)
    with tempfile.TemporaryDirectory(prefix="attnviz-models-") as tmp:
        results = run_all(sizes, 5 if args.quick or args.tiny else 20, Path(tmp))
    Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
