"""Profiles of the slow parts at M and L: the engine (core.run), frames.render and the GUI swap.

    python -m benchmarks.profiling                 # sizes M,L -> benchmarks/out/profiles/
    python -m benchmarks.profiling --sizes S --calls 5

For each size it writes, under benchmarks/out/profiles/ (ignored by git):
  <size>_run.txt        cProfile of core.run(config) (sorted by own time, then cumulative)
  <size>_run_ops.txt    torch.profiler: time per aten op inside run()
  <size>_render.txt     cProfile of frames.render(result, options) with the window's tile size
  <size>_swap.txt       cProfile of HeadGrid.show_frames + TensorView.show_frames (the GUI-thread swap)
  <size>_paint.txt      cProfile of the forced repaint that follows (ImageItem.render, Qt drawing)
  <size>_relayout.txt   cProfile of a swap that changes the head count
  export_*.txt          cProfile + import times of `attnviz render` and of the matplotlib script
                        (whole processes, as benchmark 4 times them)
  summary.json          the top functions of each with own time, cumulative time and share
Everything runs on the calling thread (cProfile sees one thread), after one warm-up call.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import BENCH_DIR, OUT_DIR, code_state, machine_info, parse_sizes, rerun_in_snapshot  # noqa: E402

OUT = OUT_DIR / "profiles"


def _profile(fn, calls: int):
    prof = cProfile.Profile()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        prof.enable()
        out = fn()
        prof.disable()
        times.append(time.perf_counter() - t0)
        del out
    return prof, times


def _top(prof: cProfile.Profile, n: int = 15) -> list[dict]:
    st = pstats.Stats(prof)
    total = st.total_tt or 1e-12
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, _callers) in st.stats.items():
        where = func if file == "~" else f"{Path(file).name}:{line}({func})"
        if file != "~" and "site-packages" in file:
            where = file.split("site-packages/")[-1] + f":{line}({func})"
        elif file != "~" and "/attnviz/" in file:
            where = "attnviz/" + file.split("/attnviz/")[-1] + f":{line}({func})"
        rows.append({"function": where, "calls": nc, "own_s": tt, "cum_s": ct, "own_share": tt / total})
    rows.sort(key=lambda r: r["own_s"], reverse=True)
    return rows[:n]


def _write(prof: cProfile.Profile, path: Path, title: str, times: list[float]) -> None:
    buf = io.StringIO()
    buf.write(f"{title}\ncalls: {len(times)}, wall per call (s): {', '.join(f'{t:.4f}' for t in times)}\n\n")
    st = pstats.Stats(prof, stream=buf)
    st.sort_stats("tottime").print_stats(30)
    st.sort_stats("cumulative").print_stats(30)
    path.write_text(buf.getvalue())


def _torch_ops(config, path: Path) -> list[dict]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from attnviz.core import run

    run(config)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        r = run(config)
    del r
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    path.write_text(f"torch {torch.__version__}, {torch.get_num_threads()} threads\n{table}\n")
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1
    return [{"op": e.key, "calls": e.count, "self_ms": e.self_cpu_time_total / 1e3,
             "share": e.self_cpu_time_total / total} for e in events[:12]]


def profile_size(size, calls: int, out_dir: Path) -> dict:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from attnviz.core import run
    from attnviz.frames import render
    from benchmarks.gui import Harness

    config = size.config()
    summary: dict = {"size": size.describe()}

    # engine
    run(config)  # warm-up
    prof, times = _profile(lambda: run(config), calls)
    _write(prof, out_dir / f"{size.name}_run.txt", f"core.run at {size.name}", times)
    summary["run"] = {"wall_s": times, "top": _top(prof)}
    summary["run_ops"] = _torch_ops(config, out_dir / f"{size.name}_run_ops.txt")

    # the real window, for its tile size and its views
    h = Harness(size)
    try:
        w = h.window
        result, options = w.result, w.frames.options
        summary["render_options"] = {"max_px": list(options.max_px) if options.max_px else None,
                                     "mean": options.mean, "view": options.view}
        render(result, options)
        prof, times = _profile(lambda: render(result, options), calls)
        _write(prof, out_dir / f"{size.name}_render.txt", f"frames.render at {size.name}, {options}", times)
        summary["render"] = {"wall_s": times, "top": _top(prof)}

        frames_a = w.frames
        frames_b = render(result, options)  # a second set of identical images: each swap really swaps

        def swap(state={"n": 0}):  # noqa: B006 - a counter kept across calls
            state["n"] += 1
            f = frames_a if state["n"] % 2 else frames_b
            w.headGrid.show_frames(result, f)
            w.outputView.show_frames(result, f)

        swap()
        h.force_paint()
        prof = cProfile.Profile()
        swap_times, paint_times = [], []
        paint_prof = cProfile.Profile()
        for _ in range(calls):
            t0 = time.perf_counter()
            prof.enable()
            swap()
            prof.disable()
            swap_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            paint_prof.enable()
            h.force_paint()
            paint_prof.disable()
            paint_times.append(time.perf_counter() - t0)
        _write(prof, out_dir / f"{size.name}_swap.txt", f"HeadGrid+TensorView.show_frames at {size.name}", swap_times)
        _write(paint_prof, out_dir / f"{size.name}_paint.txt", f"forced repaint at {size.name}", paint_times)
        summary["swap"] = {"wall_s": swap_times, "top": _top(prof)}
        summary["paint"] = {"wall_s": paint_times, "top": _top(paint_prof)}

        # a head-count change rebuilds the tiles: profile that swap (GUI thread only; frames precomputed)
        half = size.config(heads=size.heads // 2)
        r_half = run(half)
        f_half = render(r_half, options)
        relayout_prof = cProfile.Profile()
        relayout_times = []
        for k in range(calls):
            res, fr = (r_half, f_half) if k % 2 == 0 else (result, frames_a)
            t0 = time.perf_counter()
            relayout_prof.enable()
            w.headGrid.show_frames(res, fr)
            w.outputView.show_frames(res, fr)
            h.force_paint()
            relayout_prof.disable()
            relayout_times.append(time.perf_counter() - t0)
        _write(relayout_prof, out_dir / f"{size.name}_relayout.txt",
               f"show_frames + paint alternating {size.heads} and {size.heads // 2} heads at {size.name}",
               relayout_times)
        summary["relayout"] = {"wall_s": relayout_times, "top": _top(relayout_prof)}
        del r_half, f_half
    finally:
        h.close()
    return summary


def _import_times(stderr: str, n: int = 8) -> dict:
    """Top-level imports from `python -X importtime` (cumulative seconds each), largest first."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cum, name = (part.strip() for part in line[len("import time:"):].split("|"))
        raw = line.split("|")[2]
        if not cum.isdigit() or raw[: len(raw) - len(raw.lstrip())].count(" ") > 1:
            continue  # header, or not top level
        rows.append((name, int(cum) / 1e6))
    rows.sort(key=lambda r: r[1], reverse=True)
    return {"total_top_level_s": sum(t for _, t in rows), "top": rows[:n]}


def _cum(st: pstats.Stats, needles: dict[str, str]) -> dict[str, float]:
    """Cumulative seconds of the first function whose file:function contains each needle."""
    out = {}
    for label, needle in needles.items():
        best = 0.0
        for (file, _line, func), (_cc, _nc, _tt, ct, _c) in st.stats.items():
            if needle in f"{file}:{func}":
                best = max(best, ct)
        out[label] = best
    return out


def profile_export(out_dir: Path, heads=16, seq=512, width=1024) -> dict:
    """Where the time of benchmark 4's two processes goes: imports, forward, drawing, PNG encoding."""
    import subprocess
    import tempfile

    from benchmarks.common import ROOT

    env = dict(os.environ, QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"), MPLBACKEND="Agg")
    env["PYTHONPATH"] = str(ROOT)
    common = ["--heads", str(heads), "--seq-q", str(seq), "--d-model", str(width)]
    routes = {
        "attnviz_render": (["-m", "attnviz", "render"], {
            "run()": "core/runs/runner.py:run", "export()": "attnviz/export/write.py:export",
            "layout()": "attnviz/export/figure.py:layout", "paint": "attnviz/export/png.py:paint",
            "png encode": "attnviz/export/qt.py:encode_png", "frames.render": "attnviz/frames.py:render",
            "QGuiApplication": "attnviz/export/qt.py:ensure_gui_app"}),
        "matplotlib_script": ([str(BENCH_DIR / "user_matplotlib_export.py")], {
            "seed forward": "torch/nn/modules/module.py:_call_impl", "subplots": "pyplot.py:subplots",
            "imshow": "axes/_axes.py:imshow", "colorbar": "figure.py:colorbar",
            "savefig": "figure.py:savefig"}),
    }
    summary = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (entry, needles) in routes.items():
            prof_path, png = Path(tmp) / f"{name}.prof", Path(tmp) / f"{name}.png"
            cmd = [sys.executable, "-X", "importtime", "-m", "cProfile", "-o", str(prof_path), *entry,
                   "-o", str(png), *common]
            subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)  # warm the disk cache
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0 or not prof_path.exists():
                summary[name] = {"status": "failed", "reason": proc.stderr[-500:]}
                continue
            buf = io.StringIO()
            st = pstats.Stats(str(prof_path), stream=buf)
            buf.write(f"{' '.join(cmd)}\nwall (profiled) {wall:.2f} s\n\n")
            st.sort_stats("cumulative").print_stats(40)
            imports = _import_times(proc.stderr)
            lines = "\n".join(f"  {t:7.3f}  {n}" for n, t in imports["top"])
            buf.write(f"\ntop-level imports (cumulative s):\n{lines}\n")
            (out_dir / f"export_{name}.txt").write_text(buf.getvalue())
            summary[name] = {"wall_profiled_s": wall, "imports": imports, "cumulative_s": _cum(st, needles)}
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profiling", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="M,L")
    p.add_argument("--calls", type=int, default=3)
    p.add_argument("--no-export", action="store_true", help="skip profiling the two export processes")
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--no-snapshot", action="store_true", help="import the live attnviz/ (default: a frozen copy)")
    p.add_argument("--code-from", metavar="REV", help="profile attnviz as of a git revision")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    if not args.no_snapshot:
        return rerun_in_snapshot("benchmarks.profiling", argv, args.code_from, {"--out": str(Path(args.out).resolve())})
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {"machine": machine_info(), "code": code_state(), "sizes": {}}
    for size in parse_sizes(args.sizes):
        print(f"[{size.name}] profiling ...", file=sys.stderr, flush=True)
        doc["sizes"][size.name] = profile_size(size, args.calls, out_dir)
        (out_dir / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
    if not args.no_export:
        print("[export] profiling both processes ...", file=sys.stderr, flush=True)
        doc["export"] = profile_export(out_dir)
        (out_dir / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
        for name, e in doc["export"].items():
            if "cumulative_s" not in e:
                print(f"== export {name}: {e.get('reason')}")
                continue
            print(f"== export {name}: {e['wall_profiled_s']:.2f} s under cProfile; imports "
                  f"{e['imports']['total_top_level_s']:.2f} s ("
                  + ", ".join(f"{n} {t:.2f}" for n, t in e["imports"]["top"][:4]) + ")")
            print("    " + ", ".join(f"{k} {v:.2f} s" for k, v in e["cumulative_s"].items()))
    for name, s in doc["sizes"].items():
        print(f"== {name}")
        for part in ("run", "render", "swap", "paint", "relayout"):
            med = sorted(s[part]["wall_s"])[len(s[part]["wall_s"]) // 2]
            print(f"  {part}: median {med * 1e3:.1f} ms")
            for r in s[part]["top"][:6]:
                print(f"    {r['own_s'] / len(s[part]['wall_s']) * 1e3:8.1f} ms/call {r['own_share']:6.1%}  "
                      f"{r['function']}")
        print("  run() ops:")
        for r in s["run_ops"][:6]:
            print(f"    {r['self_ms']:8.1f} ms {r['share']:6.1%}  {r['op']}")
    print(f"wrote {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
