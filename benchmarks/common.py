"""Shared pieces: the benchmark sizes, machine info, interleaved timing and small statistics."""

from __future__ import annotations

import datetime as _dt
import gc
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository root (benchmarks/ lives in it)
BENCH_DIR = Path(__file__).resolve().parent
OUT_DIR = BENCH_DIR / "out"  # generated profiles and experiment dumps: ignored by git (machine paths inside)
MIB = 1 << 20


@dataclass(frozen=True)
class Size:
    """One benchmark size: batch 1 causal self-attention (seed 002) unless said otherwise."""

    name: str
    heads: int
    seq: int
    width: int
    batch: int = 1

    @property
    def weights_bytes(self) -> int:
        """B * H * Lq * Lkv * 4: one float32 attention map for every head."""
        return self.batch * self.heads * self.seq * self.seq * 4

    def config(self, **changes):
        from attnviz.core import RunConfig

        base = dict(d_model=self.width, heads=self.heads, seq_q=self.seq, batch=self.batch, seed=0,
                    dtype="float32", device="cpu")
        return RunConfig.for_variant("causal", **{**base, **changes})

    def describe(self) -> dict:
        return {**asdict(self), "weights_bytes": self.weights_bytes}


SIZES: dict[str, Size] = {
    s.name: s
    for s in [
        Size("tiny", heads=2, seq=16, width=32),  # for the smoke test only
        Size("S", heads=8, seq=128, width=512),
        Size("M", heads=12, seq=1024, width=768),
        Size("L", heads=16, seq=2048, width=1024),
        Size("XL", heads=32, seq=4096, width=2048),
    ]
}
HEAVY = ("XL",)  # run only when asked (--xl or naming it in --sizes)


def parse_sizes(text: str) -> list[Size]:
    out = []
    for part in text.split(","):
        name = part.strip()
        if not name:
            continue
        key = next((k for k in SIZES if k.lower() == name.lower()), None)
        if key is None:
            raise SystemExit(f"unknown size {name!r}; use some of {', '.join(SIZES)}")
        out.append(SIZES[key])
    return out


# --- machine ---------------------------------------------------------------------------------


def machine_info() -> dict:
    import numpy
    import torch

    from attnviz import system  # lazily: the snapshot's attnviz (see make_snapshot)

    info = {
        "cpu_model": system.cpu_model() or platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": system.usable_cores(),
        "memory_total_bytes": system.memory_bytes("MemTotal"),
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_cuda": torch.version.cuda,
        "numpy_version": numpy.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "load_average": load_average(),
        "date": _dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds"),
    }
    try:
        import pyqtgraph
        import PySide6

        info["pyside6_version"] = PySide6.__version__
        info["pyqtgraph_version"] = pyqtgraph.__version__
    except ImportError:
        pass
    try:
        import attnviz

        info["attnviz_version"] = attnviz.__version__
    except (ImportError, AttributeError):
        pass
    return info


# --- statistics ------------------------------------------------------------------------------


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def percentile(xs, q: float):
    """Nearest-rank-free linear percentile (q in 0..100)."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(xs) -> dict:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "p50": median(xs), "min": min(xs), "max": max(xs), "p90": percentile(xs, 90)}


# --- timing ----------------------------------------------------------------------------------


def interleaved(contenders: dict[str, Callable[[], object]], repeats: int, warmup: int = 1,
                between: Callable[[], None] | None = None) -> dict[str, list[float]]:
    """Time each contender once per round, rotating the order every round, for warmup + repeats rounds.

    Side by side in one process, so a slow patch of the machine hits every contender alike; the
    rotation keeps any first-in-round or last-in-round effect from favouring one of them. What a
    call returns is dropped (and garbage collected) outside the timed region.
    Returns the `repeats` timed seconds per contender, in round order.
    """
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            gc.collect()
            t0 = time.perf_counter()
            out = contenders[name]()
            dt = time.perf_counter() - t0
            del out
            if r >= warmup:
                times[name].append(dt)
            if between is not None:
                between()
    return times


def paired_ratios(a: list[float], b: list[float]) -> list[float]:
    """a[i] / b[i] for each round: ratios from the same round share the machine's state."""
    return [x / y for x, y in zip(a, b) if y > 0]


def failure(exc: BaseException) -> dict:
    return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=6)}


def skipped(reason: str) -> dict:
    return {"status": "skipped", "reason": reason}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages: other work on the machine skews absolute times (not ratios)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


# --- the code under test -----------------------------------------------------------------------

CODE_ENV = "ATTNVIZ_BENCH_CODE"  # set by the snapshot launcher: which code the snapshot holds


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def tree_hash(package_dir: Path) -> str:
    """sha256 over the package's .py and .json files (paths and contents): names the exact code measured."""
    h = hashlib.sha256()
    for path in sorted(package_dir.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(package_dir)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def code_state() -> dict:
    """Which attnviz the numbers belong to: the snapshot's record, or the live tree's git state."""
    if os.environ.get(CODE_ENV):
        state = json.loads(os.environ[CODE_ENV])
    else:
        state = {"source": "live working tree (no snapshot)",  # no checkout path: the results are committed
                 "git_head": _git(ROOT, "rev-parse", "--short", "HEAD"),
                 "git_dirty": (_git(ROOT, "status", "--porcelain", "--", "attnviz") or "").splitlines()}
    try:
        import attnviz

        pkg = Path(attnviz.__file__).resolve().parent
        # where the code came from, without this machine's paths (results.json is committed)
        state["imported_from"] = str(pkg.relative_to(ROOT)) if pkg.is_relative_to(ROOT) else f"snapshot/{pkg.name}"
        state["attnviz_tree_sha256"] = tree_hash(pkg)
    except ImportError:
        pass
    return state


def make_snapshot(rev: str | None = None) -> tuple[Path, dict]:
    """A frozen copy of attnviz (its resources inside) and of benchmarks/ in a temporary folder.

    Others edit attnviz/ while a benchmark runs; the benchmark, its child processes and
    `attnviz render` all import this copy instead, so every number belongs to one code state.
    rev: take attnviz and resources from that git revision (git archive) instead of the working tree.
    """
    snap = Path(tempfile.mkdtemp(prefix="attnviz-bench-snap-"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    # not the temporary folder's name: it is gone after the run, and the results are committed
    state: dict = {"git_head": _git(ROOT, "rev-parse", "--short", "HEAD")}
    if rev:
        old_layout = _git(ROOT, "ls-tree", "--name-only", rev, "resources")  # before resources moved into attnviz/
        paths = ["attnviz", "resources"] if old_layout else ["attnviz"]
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, *paths], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(snap)], input=archive.stdout, check=True)
        state.update(source=f"git archive {rev}",
                     rev=_git(ROOT, "rev-parse", "--short", rev),
                     rev_subject=_git(ROOT, "log", "-1", "--format=%s", rev))
    else:
        shutil.copytree(ROOT / "attnviz", snap / "attnviz", ignore=ignore)
        dirty = _git(ROOT, "status", "--porcelain", "--", "attnviz") or ""
        state.update(source="snapshot of the working tree",
                     taken=_dt.datetime.now(_dt.timezone.utc).astimezone().isoformat(timespec="seconds"),
                     git_dirty=dirty.splitlines())
    if (snap / "resources").exists():  # an older revision kept attnviz.resources in a top-level resources/
        shutil.move(str(snap / "resources"), str(snap / "attnviz" / "resources"))
    shutil.copytree(BENCH_DIR, snap / "benchmarks", ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", "results*.json", "profiles", "out"))
    return snap, state


def rerun_in_snapshot(module: str, argv: list[str], rev: str | None, fixed: dict[str, str]) -> int:
    """Run `python -m module argv --no-snapshot` inside a fresh snapshot (see make_snapshot).

    `fixed` options (e.g. the absolute --out) replace the same options in argv; --code-from is dropped.
    """
    snap, state = make_snapshot(rev)
    drop = {"--code-from", *fixed}
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in drop:
            skip = True
            continue
        if a.split("=", 1)[0] in drop:
            continue
        rest.append(a)
    for k, v in fixed.items():
        rest += [k, v]
    env = dict(os.environ)
    env[CODE_ENV] = json.dumps(state)
    env["ATTNVIZ_BENCH_COMMAND"] = " ".join([f"python -m {module}", *argv])
    env.pop("PYTHONPATH", None)
    log(f"running on a frozen copy of attnviz ({state['source']}) in {snap}")
    try:
        return subprocess.call([sys.executable, "-m", module, *rest, "--no-snapshot"], cwd=snap, env=env)
    finally:
        shutil.rmtree(snap, ignore_errors=True)
