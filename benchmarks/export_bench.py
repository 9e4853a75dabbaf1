"""4. Export: `attnviz render` of a head-grid PNG against the seed + matplotlib script, as whole processes.

Both commands start a fresh Python, import what they need, run the forward, draw and write a
PNG; the wall time of each process is what a user waits for. They alternate round by round.
A third process, `python -c "import torch"`, is timed in the same rotation: both routes pay that
import, so it is the floor under `attnviz render` and `floor_ratio` the best ratio reachable.
"""

from __future__ import annotations

import importlib.util
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import BENCH_DIR, ROOT, median, paired_ratios, skipped, summary

TARGET_RATIO = 0.5  # attnviz render at most half the matplotlib route's time


def png_size(path: Path) -> tuple[int, int] | None:
    try:
        head = path.read_bytes()[:24]
    except OSError:
        return None
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return struct.unpack(">II", head[16:24])


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    env["MPLBACKEND"] = "Agg"
    return env


def _timed(cmd: list[str], env: dict, timeout: float) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - t0, proc


def _portable(arg: str, tmp: str) -> str:
    """A command argument without this machine's temporary folders (results.json is committed)."""
    return arg.replace(tmp, "OUT").replace(str(BENCH_DIR), "benchmarks")


def bench_export(heads: int = 16, seq: int = 512, width: int = 1024, repeats: int = 5, warmup: int = 1,
                 timeout: float = 600, matplotlib: bool = True) -> dict:
    env = _env()
    have_mpl = matplotlib and importlib.util.find_spec("matplotlib") is not None
    common = ["--heads", str(heads), "--seq-q", str(seq), "--d-model", str(width)]
    with tempfile.TemporaryDirectory(prefix="attnviz-bench-") as tmp:
        out_a, out_b = Path(tmp) / "attnviz.png", Path(tmp) / "matplotlib.png"
        routes = {"attnviz_render": [sys.executable, "-m", "attnviz", "render", "-o", str(out_a), *common]}
        if have_mpl:
            routes["import_torch"] = [sys.executable, "-c", "import torch"]
            routes["matplotlib_script"] = [sys.executable, str(BENCH_DIR / "user_matplotlib_export.py"),
                                           "-o", str(out_b), *common]
        names = list(routes)
        times: dict[str, list[float]] = {n: [] for n in names}
        errors: dict[str, str] = {}
        for r in range(warmup + repeats):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                if name in errors:
                    continue
                dt, proc = _timed(routes[name], env, timeout)
                if proc.returncode != 0:
                    errors[name] = f"exit {proc.returncode}: {proc.stderr.strip()[-600:]}"
                elif r >= warmup:
                    times[name].append(dt)
        pixels = {"attnviz_render": png_size(out_a), "matplotlib_script": png_size(out_b) if have_mpl else None}
        file_bytes = {name: (p.stat().st_size if p.exists() else None)
                      for name, p in (("attnviz_render", out_a), ("matplotlib_script", out_b))}
    result: dict = {
        "status": "ok" if not errors and times["attnviz_render"] else "failed",
        "heads": heads, "seq": seq, "width": width, "repeats": repeats, "warmup": warmup,
        "commands": {n: " ".join(Path(c).name if i == 0 else _portable(c, tmp) for i, c in enumerate(cmd))
                     for n, cmd in routes.items()},
        "median_s": {n: median(ts) for n, ts in times.items()},
        "samples_s": times,
        "png_pixels": pixels,
        "png_bytes": file_bytes,
        "target": f"attnviz render <= {TARGET_RATIO} x the matplotlib route",
    }
    if errors:
        result["errors"] = errors
        result["reason"] = "; ".join(f"{k}: {v}" for k, v in errors.items())
    if have_mpl and times.get("matplotlib_script") and times["attnviz_render"]:
        ratios = paired_ratios(times["attnviz_render"], times["matplotlib_script"])
        result["ratio_attnviz_vs_matplotlib"] = median(ratios)
        result["ratio_summary"] = summary(ratios)
        result["pass"] = result["ratio_attnviz_vs_matplotlib"] <= TARGET_RATIO
        if times.get("import_torch"):
            result["floor_ratio"] = median(paired_ratios(times["import_torch"], times["matplotlib_script"]))
    elif not have_mpl:
        why = "not asked for" if not matplotlib else "matplotlib is not installed (pip install -e '.[bench]')"
        result["matplotlib_script"] = skipped(why)
    return result
