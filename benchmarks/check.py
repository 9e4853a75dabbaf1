"""Check against transformers on the real GGUF files: max |diff| per layer of attnviz's maps (float32 weights and
compact blocks) against transformers' own GGUF load dequantised to float32, and what the check costs.

    python -m benchmarks.check                 # both real files, float32 and compact weights
    python -m benchmarks.check --tokens 128

Each (file, storage) runs in a fresh process: the model opens (load_model, under a memory budget just above
the blocks' size for "blocks"), one run over a text of about --tokens tokens, then
models.check.check_against_transformers on that result. The clock runs over the check alone (transformers'
process started, its load and forward, the comparison); peak RSS is the child's ru_maxrss, "before" its RSS
once attnviz's run was done, "transformers" the peak of transformers' own process (models/reference.py).
The load average is recorded around each check (the machine may be shared).
Output: a table on stdout and benchmarks/out/results-check.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import BENCH_DIR, ROOT, load_average, log, machine_info
from .gguf import real_files

TEXT = ("Attention maps show where each token looks. The quick brown fox jumps over the lazy dog, and the dog "
        "chases the fox around the garden until both of them are tired and fall asleep in the sun. ")
CHILD = r"""
import json, os, resource, sys, time
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
from attnviz.core import RunConfig, run
from attnviz.models import load_model
from attnviz.models.check import check_against_transformers
from attnviz.models.compact import storage_sizes
from attnviz.models.gguf_files import gguf_header
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
path, storage, tokens, text = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
from pathlib import Path
budget = storage_sizes(gguf_header(Path(path)))["blocks"] + (1 << 20) if storage == "blocks" else None
model = load_model(path, memory_budget=budget)
text = text * max(1, round(tokens / len(model.encode(text).ids)))
result = run(RunConfig(variant="pretrained", model=path, text=text, pool="never"))
notes = [n for n in result.notes if "compact" in n]
before = rss()
t0 = time.perf_counter()
report = check_against_transformers(result)
seconds = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # transformers' process
print(json.dumps({"seconds": seconds, "peak_rss": peak, "child_peak_rss": child, "rss_before": before,
                  "tokens": report.tokens,
                  "per_layer": report.per_layer.tolist(), "logits": report.logits, "line": report.line(),
                  "compact": notes}))
"""


def one_check(path: Path, storage: str, tokens: int) -> dict:
    before = load_average()
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), storage, str(tokens), TEXT], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode:
        raise RuntimeError(out.stderr.strip()[-2000:])
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {**result, "load_before": before, "load_after": load_average()}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    doc = {"machine": machine_info(), "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in real_files(Path(tmp)).items():
            for storage in ("float32", "blocks"):
                log(f"{name}: {storage}")
                doc["runs"][f"{name} {storage}"] = one_check(path, storage, args.tokens)
    out = BENCH_DIR / "out" / "results-check.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"{'model, weights':34} {'tokens':>6} {'max |diff|':>10} {'logits':>8} {'check s':>8} {'GiB before':>10} "
          f"{'GiB peak':>9} {'transformers GiB':>17} {'load':>10}")
    for name, r in doc["runs"].items():
        load = f"{r['load_before'][0]:.1f}-{r['load_after'][0]:.1f}" if r["load_before"] else "?"
        print(f"{name:34} {r['tokens']:6d} {max(r['per_layer']):10.2g} {r['logits'] or 0:8.2g} {r['seconds']:8.1f} "
              f"{r['rss_before'] / 2**30:10.2f} {r['peak_rss'] / 2**30:9.2f} {r['child_peak_rss'] / 2**30:17.2f} "
              f"{load:>10}")
        print("    per layer: " + " ".join(f"{v:.1g}" for v in r["per_layer"]))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.check", description="Check against transformers "
                                     "on the real GGUF files")
    parser.add_argument("--tokens", type=int, default=128, help="about this many tokens of text")
    return parser


if __name__ == "__main__":
    sys.exit(main())
