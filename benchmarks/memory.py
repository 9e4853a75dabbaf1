"""5. Memory: peak resident memory of a fresh process that runs core.run(config) then frames.render.

frames.render runs twice: as the window draws by default (no mean tile), then with the mean tile
(ViewOptions' default); the peak after each is recorded, the overall peak is what is judged.

Each size gets its own process (`python -m benchmarks.memory --child ...`), so the peak
(getrusage ru_maxrss) belongs to that size alone. The budget is 2.5 x the weights tensor
(B * H * Lq * Lkv * 4 bytes) + 400 MB for the interpreter, torch and Qt-free imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from .common import MIB, ROOT, Size, failure

FACTOR, ALLOWANCE = 2.5, 400 * 1000 * 1000  # "at most 2.5x that + 400 MB"


def budget_bytes(size: Size) -> int:
    return int(FACTOR * size.weights_bytes + ALLOWANCE)


def _child(spec: dict) -> dict:
    import resource

    def peak() -> int:  # Linux reports KiB
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


    import_peak_before = peak()  # the interpreter alone: small unless the parent's peak leaked in
    from attnviz import system
    from attnviz.core import RunConfig, run
    from attnviz.frames import ViewOptions, render

    config = RunConfig.from_dict(spec["config"])
    after_import = peak()
    t0 = time.perf_counter()
    result = run(config)
    t1 = time.perf_counter()
    after_run = peak()
    rss_holding_result = system.resident_bytes()
    max_px = tuple(spec["max_px"]) if spec.get("max_px") else None
    # First as the window draws by default (no mean tile), then with ViewOptions' default mean tile.
    render(result, ViewOptions(max_px=max_px, mean=False))
    t_plain = time.perf_counter()
    after_render_plain = peak()
    frames = render(result, ViewOptions(max_px=max_px, mean=True))
    t2 = time.perf_counter()
    after_render = peak()
    return {
        "peak_rss_bytes": after_render,
        "peak_after_render_no_mean_bytes": after_render_plain,
        "render_no_mean_s": t_plain - t1,
        "render_with_mean_s": t2 - t_plain,
        "peak_after_imports_bytes": after_import,
        "peak_before_imports_bytes": import_peak_before,
        "peak_after_run_bytes": after_run,
        "rss_holding_result_bytes": rss_holding_result,
        "run_s": t1 - t0,
        "tiles": len(frames.heads),
        "vm_hwm_bytes": system.proc_value("/proc/self/status", "VmHWM"),  # the same peak, as a cross-check
    }


def bench_memory(size: Size, max_px=(512, 512), timeout: float = 1800) -> dict:
    """Spawn the child for `size` and compare its peak with the budget."""
    from attnviz import system

    spec = {"config": size.config().to_dict(), "max_px": list(max_px) if max_px else None}
    need = budget_bytes(size)
    free = system.memory_bytes()
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # Linux carries the peak RSS of a forked parent into its child's ru_maxrss (the copied or
    # vfork-shared address space sets the high-water mark, and exec keeps it). A small shell in
    # between forks the child from its own small address space, so ru_maxrss is the child's alone.
    cmd = ["/bin/sh", "-c", '"$0" "$@"; exit $?', sys.executable, "-m", "benchmarks.memory", "--child",
           json.dumps(spec)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        return failure(exc)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        killed = proc.returncode < 0 or proc.returncode == 137
        reason = (f"child exited with {proc.returncode}"
                  + (" (killed: probably out of memory)" if killed else "")
                  + f"; free memory before start {free / MIB:.0f} MiB; stderr: {proc.stderr.strip()[-600:]}")
        return {"status": "failed", "reason": reason}
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    peak = data["peak_rss_bytes"]
    return {
        "status": "ok",
        **data,
        "weights_bytes": size.weights_bytes,
        "peak_over_weights": peak / size.weights_bytes,
        "increment_over_imports_bytes": peak - data["peak_after_imports_bytes"],
        "budget_bytes": need,
        "pass": peak <= need,
        "max_px": list(max_px) if max_px else None,
        "wall_s": wall,
        "target": f"peak RSS <= {FACTOR} x weights + 400 MB",
    }


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(_child(json.loads(sys.argv[2]))))
    else:
        print("usage: python -m benchmarks.memory --child SPEC_JSON (used by the benchmark)", file=sys.stderr)
        sys.exit(2)
