"""Clean exits: scripts that create MainWindow and end, with and without close(),
idle and while a forward runs; each must exit 0, and close() must return within 2 s.

    python -m benchmarks.exits                  # 20 runs of each of the 4 cases -> table
    python -m benchmarks.exits --runs 5 --out exits.json

Each run is a fresh `python -c SCRIPT` with this checkout first on sys.path, offscreen.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import os, sys, time
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtWidgets import QApplication
app = QApplication([])
from attnviz.ui import MainWindow
w = MainWindow()
w.show()
loop = QEventLoop()
w.sigShown.connect(lambda *_: loop.quit())
QTimer.singleShot(30000, loop.quit)
loop.exec()
busy, close = sys.argv[1] == "busy", sys.argv[2] == "close"
if busy:  # size L: a ~1 s forward, still running when the script ends
    for name, value in (("d_model", 1024), ("heads", 16), ("seq_q", 2048)):
        w.panel.widgets[name].setValue(value)
    w.request()
    time.sleep(0.3)
t = time.perf_counter()
if close:
    w.close()
print(f"close_s={time.perf_counter() - t:.3f}")
"""

CASES = [("idle", "noclose"), ("idle", "close"), ("busy", "noclose"), ("busy", "close")]


def one(state: str, close: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", SCRIPT, state, close], env=env, capture_output=True,
                          text=True, timeout=180)
    wall = time.perf_counter() - t0
    close_s = next((float(x.split("=")[1]) for x in done.stdout.split() if x.startswith("close_s=")), None)
    return {"rc": done.returncode, "wall_s": round(wall, 2), "close_s": close_s,
            "stderr_tail": done.stderr.strip().splitlines()[-1:] if done.returncode else []}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.exits", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--out", help="also write the runs as JSON here")
    args = p.parse_args(argv)
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    results = {f"{s}/{c}": [] for s, c in CASES}
    for _ in range(args.runs):  # cases interleaved, so load changes hit all four alike
        for s, c in CASES:
            results[f"{s}/{c}"].append(one(s, c))
    print(f"load average before: {' '.join(load)}")
    print(f"{'case':16} {'runs':>4} {'exit 0':>6} {'other exits':22} {'max close()':>11} {'max wall':>8}")
    for case, runs in results.items():
        codes = [r["rc"] for r in runs]
        closes = [r["close_s"] for r in runs if r["close_s"] is not None and "/close" in case]
        other = sorted({c for c in codes if c != 0})
        print(f"{case:16} {len(runs):4} {codes.count(0):6} {str(other):22} "
              f"{(f'{max(closes):.2f} s' if closes else '-'):>11} {max(r['wall_s'] for r in runs):7.1f}s")
    if args.out:
        Path(args.out).write_text(json.dumps({"load_before": load, "runs": results}, indent=1))
    return 0 if all(r["rc"] == 0 for runs in results.values() for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
