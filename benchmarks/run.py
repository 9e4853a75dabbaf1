"""The benchmark command: runs the six measurements, prints a table, writes JSON.

    python -m benchmarks                       # sizes S, M, L; writes benchmarks/results.json
    python -m benchmarks --xl                  # ... and XL (heavy: minutes, ~16 GiB at its peak)
    python -m benchmarks --sizes S,M --quick   # fewer repeats, for a quick look
    python -m benchmarks --only engine,memory --sizes L --merge   # update part of an existing file
    python benchmarks/run.py ...               # the same

Measurements (float32 on the CPU, batch 1 causal self-attention, see common.SIZES):
  engine          traced forward and core.run() vs seed 002's plain forward (interleaved medians)
  latency         real offscreen MainWindow: parameter change -> sigShown + forced repaint (p50)
  responsiveness  300 changes in 3 s; longest GUI-thread stall; stale frames; final frame check
  export          `attnviz render` 16-head PNG at L=512 vs seed + matplotlib script (whole processes)
  memory          peak RSS of a fresh process running run() + frames.render vs the weights tensor
  view_only       colormap / per-head scale / batch item: change -> sigShown without recompute

Sizes named in HEAVY (XL) run in a child process, so running out of memory there is recorded
in the JSON instead of ending the benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # `python benchmarks/run.py`: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import (  # noqa: E402
    BENCH_DIR,
    HEAVY,
    MIB,
    ROOT,
    SIZES,
    Size,
    code_state,
    failure,
    load_average,
    log,
    machine_info,
    parse_sizes,
    rerun_in_snapshot,
    skipped,
)

SCHEMA = "attnviz-benchmarks/1"
MEASUREMENTS = ("engine", "latency", "responsiveness", "export", "memory", "view_only")
GUI_MEASUREMENTS = ("latency", "responsiveness", "view_only")
PER_SIZE = ("engine", "latency", "responsiveness", "memory", "view_only")
ENGINE_REPEATS = {"tiny": 3, "S": 11, "M": 7, "L": 5, "XL": 5}
MIN_REPEATS = 5
DEFAULT_OUT = BENCH_DIR / "results.json"
EXPORT_DEFAULT = {"heads": 16, "seq": 512, "width": 1024}


# --- running ---------------------------------------------------------------------------------


def _engine_repeats(size: Size, quick: bool, repeats: int | None) -> int:
    if repeats is not None:
        return repeats
    return 3 if quick else ENGINE_REPEATS.get(size.name, MIN_REPEATS)


def run_size(size: Size, measurements, *, quick=False, repeats=None, warmup=1, gui_samples=None,
             storm=(300, 3.0), checkpoint=None) -> dict[str, dict]:
    """The per-size measurements in this process (memory still spawns its own child)."""
    out: dict[str, dict] = {}

    def save():
        if checkpoint is not None:
            checkpoint(out)

    if "engine" in measurements:
        log(f"[{size.name}] engine ...")
        from benchmarks.engine import bench_engine

        la = load_average()
        try:
            out["engine"] = bench_engine(size, _engine_repeats(size, quick, repeats), warmup)
        except Exception as exc:  # noqa: BLE001 - recorded, the benchmark goes on
            out["engine"] = failure(exc)
        out["engine"]["load_average"] = {"before": la, "after": load_average()}
        save()
    if "memory" in measurements:
        log(f"[{size.name}] memory (fresh process) ...")
        from benchmarks.memory import bench_memory

        la = load_average()
        out["memory"] = bench_memory(size)
        out["memory"]["load_average"] = {"before": la, "after": load_average()}
        save()
    gui = [m for m in GUI_MEASUREMENTS if m in measurements]
    if gui:
        log(f"[{size.name}] window: {', '.join(gui)} ...")
        from benchmarks.gui import bench_gui

        la = load_average()
        out.update(bench_gui(size, gui, quick=quick, samples=gui_samples, storm=storm))
        for m in gui:
            out[m]["load_average"] = {"before (window)": la, "after (window)": load_average()}
        save()
    return out


def run_size_isolated(size: Size, measurements, *, quick=False, repeats=None, warmup=1, gui_samples=None,
                      storm=(300, 3.0), timeout=3600) -> dict[str, dict]:
    """run_size in a child process; a crash (e.g. killed for memory) is recorded per measurement."""
    wanted = [m for m in PER_SIZE if m in measurements]
    out: dict[str, dict] = {}
    if "memory" in wanted:  # already a fresh process of its own
        from benchmarks.memory import bench_memory

        log(f"[{size.name}] memory (fresh process) ...")
        out["memory"] = bench_memory(size)
        wanted.remove("memory")
    if not wanted:
        return out
    with tempfile.TemporaryDirectory(prefix="attnviz-bench-") as tmp:
        part = Path(tmp) / "part.json"
        cmd = [sys.executable, "-m", "benchmarks", "--child", "--sizes", size.name, "--only", ",".join(wanted),
               "--out", str(part), "--warmup", str(warmup), "--storm", f"{storm[0]},{storm[1]}"]
        if quick:
            cmd.append("--quick")
        if repeats is not None:
            cmd += ["--repeats", str(repeats)]
        if gui_samples is not None:
            cmd += ["--gui-samples", str(gui_samples)]
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        from attnviz.system import memory_bytes

        free = memory_bytes()
        log(f"[{size.name}] {', '.join(wanted)} in a child process (free memory {free / MIB:.0f} MiB) ...")
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, timeout=timeout, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
            code, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:
            code, err = None, f"timed out after {exc.timeout:.0f} s"
        if err:
            sys.stderr.write(err[-4000:])
        done = json.loads(part.read_text()) if part.exists() else {}
        out.update(done)
        if code != 0:
            why = (f"child process ended with {'timeout' if code is None else code}"
                   + (" (killed by a signal: probably out of memory)" if code is not None and code < 0 else "")
                   + f"; free memory at start {free / MIB:.0f} MiB; last stderr: {err.strip()[-500:]}")
            for m in wanted:
                if m not in out:
                    out[m] = {"status": "failed", "reason": why}
    return out


def run_benchmarks(sizes: list[Size], measurements=MEASUREMENTS, *, quick=False, repeats=None, warmup=1,
                   gui_samples=None, storm=(300, 3.0), isolate="auto", export=None, export_repeats=None,
                   out: Path | None = DEFAULT_OUT, merge=False, print_table=True, command=None) -> dict:
    """Run everything asked for and return (and write) the results document."""
    t0 = time.perf_counter()
    measurements = [m for m in MEASUREMENTS if m in measurements]
    previous = {}
    if merge and out is not None and Path(out).exists():
        previous = json.loads(Path(out).read_text())
    doc = {
        "schema": SCHEMA,
        "machine": machine_info(),
        "code": code_state(),
        "settings": {
            "sizes": [s.name for s in sizes], "measurements": measurements, "quick": quick,
            "engine_repeats": {s.name: _engine_repeats(s, quick, repeats) for s in sizes}, "warmup": warmup,
            "min_repeats": MIN_REPEATS, "dtype": "float32", "device": "cpu", "isolate": isolate,
            "storm": {"changes": storm[0], "duration_s": storm[1]},
            "command": command,
        },
        "sizes": {s.name: s.describe() for s in sizes},
    }
    for m in PER_SIZE:
        if m in measurements:
            doc[m] = {}
    for size in sizes:
        iso = isolate == "all" or (isolate == "auto" and size.name in HEAVY)
        runner = run_size_isolated if iso else run_size
        part = runner(size, measurements, quick=quick, repeats=repeats, warmup=warmup, gui_samples=gui_samples,
                      storm=storm)
        for m, entry in part.items():
            doc[m][size.name] = entry
    if "export" in measurements:
        spec = {**EXPORT_DEFAULT, **(export or {})}
        n = export_repeats if export_repeats is not None else (3 if quick else MIN_REPEATS)
        log(f"export: attnviz render vs matplotlib script, {spec}, {n} rounds ...")
        from benchmarks.export_bench import bench_export

        la = load_average()
        try:
            doc["export"] = bench_export(spec["heads"], spec["seq"], spec["width"], repeats=n,
                                         warmup=min(warmup, 1), matplotlib=spec.get("matplotlib", True))
        except Exception as exc:  # noqa: BLE001
            doc["export"] = failure(exc)
        doc["export"]["load_average"] = {"before": la, "after": load_average()}
    doc["wall_s"] = time.perf_counter() - t0
    doc["machine"]["load_average_end"] = load_average()
    end = code_state()
    if end.get("attnviz_tree_sha256") != doc["code"].get("attnviz_tree_sha256"):
        doc["code"]["changed_during_run"] = end  # live tree edited mid-run: numbers mix code states
    if previous:
        doc = _merge(previous, doc)
    doc["checks"] = checks(doc)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(doc, indent=1, default=_jsonable) + "\n")
    if print_table:
        print(table(doc))
        if out is not None:
            print(f"\nwrote {out}")
    return doc


def _jsonable(x):
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, (set, tuple)):
        return list(x)
    return str(x)


def _merge(old: dict, new: dict) -> dict:
    merged = dict(old)
    for key, value in new.items():
        if key in PER_SIZE and isinstance(old.get(key), dict):
            merged[key] = {**old[key], **value}
        elif key == "sizes":
            merged[key] = {**old.get(key, {}), **value}
        elif key == "settings":
            history = old.get("settings_history") or [old.get("settings", {})]
            merged["settings_history"] = [*history, value]  # every run that wrote into this file
            merged[key] = {**value, "merged_into_earlier_run": old.get("machine", {}).get("date")}
        else:
            merged[key] = value
    return merged


# --- targets and table -------------------------------------------------------------------------


def checks(doc: dict) -> list[dict]:
    """One row per target that was measured: value, target, pass."""
    rows = []

    def add(measure, size, value, target, ok):
        rows.append({"measurement": measure, "size": size, "value": value, "target": target, "pass": ok})

    for m in PER_SIZE:
        for size, e in doc.get(m, {}).items():
            if e.get("status") != "ok":
                add(m, size, None, e.get("reason", e.get("status")), None)
                continue
            if "pass" not in e:
                continue
            value = {
                "engine": e.get("ratio_traced_vs_seed"),
                "latency": e.get("p50_s"),
                "responsiveness": e.get("longest_stall_s"),
                "memory": e.get("peak_rss_bytes"),
                "view_only": e.get("worst_p50_to_sigshown_s"),
            }[m]
            add(m, size, value, e.get("target"), bool(e["pass"]))
    e = doc.get("export")
    if isinstance(e, dict) and "pass" in e:
        add("export", f"{e['heads']}x{e['seq']}", e.get("ratio_attnviz_vs_matplotlib"), e.get("target"),
            bool(e["pass"]))
    return rows


def _ms(x):
    return "-" if x is None else f"{x * 1e3:.0f}" if x >= 0.0995 else f"{x * 1e3:.1f}"


def _cell(doc, m, size, fn):
    e = doc.get(m, {}).get(size)
    if e is None:
        return ""
    if e.get("status") != "ok":
        return e.get("status", "?")
    try:
        return fn(e)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return "?"


def _mark(e):
    return "" if "pass" not in e else (" ok" if e["pass"] else " MISS")


def table(doc: dict) -> str:
    sizes = list(doc.get("sizes", {}))
    mach = doc.get("machine", {})
    lines = [f"attnviz benchmarks · {mach.get('cpu_model')} · {mach.get('cpus_usable')} cores · "
             f"torch {mach.get('torch_version')} ({mach.get('torch_threads')} threads) · {mach.get('date')}"]
    lines.append("sizes: " + "; ".join(f"{n} = H{s['heads']} L{s['seq']} d{s['width']}"
                                       for n, s in doc.get("sizes", {}).items()))
    rows: list[tuple[str, str, callable]] = [
        ("1 engine  traced / seed forward (x)", "engine",
         lambda e: f"{e['ratio_traced_vs_seed']:.2f}{_mark(e)}"),
        ("  seed forward ms", "engine", lambda e: _ms(e["median_s"]["seed_forward"])),
        ("  GQA+RoPE traced / plain (x)", "engine",
         lambda e: f"{e['ratio_variant_traced_vs_plain']:.2f}" if "ratio_variant_traced_vs_plain" in e else "-"),
        ("  traced forward ms", "engine", lambda e: _ms(e["median_s"]["traced_forward"])),
        ("  core.run() ms", "engine", lambda e: _ms(e["median_s"]["run"])),
        ("  seed script (build+fwd) ms", "engine", lambda e: _ms(e["median_s"]["seed_script"])),
        ("  run() / seed script (x)", "engine", lambda e: f"{e['ratio_run_vs_seed_script']:.2f}"),
        ("2 latency p50 seed change ms", "latency",
         lambda e: _ms(e["p50_s"]) + _mark(e)),
        ("  worker (run+render) ms", "latency", lambda e: _ms(e["seed_toggle"]["worker_s"]["p50"])),
        ("  forced paint ms", "latency", lambda e: _ms(e["seed_toggle"]["paint_s"]["p50"])),
        ("  heads change p50 ms", "latency",
         lambda e: _ms(e["heads_toggle"]["to_full"]["latency_s"]["p50"]) if "to_full" in e["heads_toggle"]
         else "skip"),
        ("  longest stall ms", "latency", lambda e: _ms(e["seed_toggle"]["longest_stall_s"])),
        ("3 storm longest stall ms", "responsiveness",
         lambda e: _ms(e["longest_stall_s"]) + _mark(e)),
        ("  stale frames / final ok", "responsiveness",
         lambda e: f"{e['stale_frames_shown']} / {'yes' if e['final_matches_parameters'] else 'NO'}"),
        ("  frames shown / computes", "responsiveness", lambda e: f"{e['frames_shown']} / {e['computes']}"),
        ("5 memory peak RSS MiB", "memory", lambda e: f"{e['peak_rss_bytes'] / MIB:.0f}{_mark(e)}"),
        ("  peak without mean tile MiB", "memory", lambda e: f"{e['peak_after_render_no_mean_bytes'] / MIB:.0f}"),
        ("  budget MiB (2.5xW+400MB)", "memory", lambda e: f"{e['budget_bytes'] / MIB:.0f}"),
        ("  peak / weights (x)", "memory", lambda e: f"{e['peak_over_weights']:.1f}"),
        ("6 view-only worst p50 ms", "view_only",
         lambda e: _ms(e["worst_p50_to_sigshown_s"]) + _mark(e)),
        ("  colormap / per-head / batch", "view_only",
         lambda e: "/".join(_ms(e[k]["to_sigshown_s"]["p50"]) if e.get(k, {}).get("to_sigshown_s") else "-"
                            for k in ("colormap", "per_head_scale", "batch_item"))),
        ("  + paint, worst p50 ms", "view_only", lambda e: _ms(e["worst_p50_with_paint_s"])),
        ("  recomputes", "view_only", lambda e: str(e["recomputes"])),
    ]
    width = max(len(r[0]) for r in rows) + 2
    colw = 16
    lines.append("".ljust(width) + "".join(s.rjust(colw) for s in sizes))
    for label, m, fn in rows:
        if m not in doc:
            continue
        lines.append(label.ljust(width) + "".join(_cell(doc, m, s, fn).rjust(colw) for s in sizes))
    e = doc.get("export")
    if isinstance(e, dict):
        if e.get("status") == "ok" or e.get("median_s"):
            med = e.get("median_s", {})
            a, b = med.get("attnviz_render"), med.get("matplotlib_script")
            ratio = e.get("ratio_attnviz_vs_matplotlib")
            lines.append(f"4 export {e['heads']} heads L={e['seq']} d={e['width']}: attnviz render "
                         f"{a if a is None else f'{a:.2f}'} s vs matplotlib script {b if b is None else f'{b:.2f}'} s"
                         + (f" -> {ratio:.2f}x{_mark(e)}" if ratio is not None else "")
                         + (f"; `import torch` alone {med['import_torch']:.2f} s = {e['floor_ratio']:.2f}x"
                            if e.get("floor_ratio") is not None else "")
                         + (f"  [{e['reason']}]" if e.get("reason") else ""))
        else:
            lines.append(f"4 export: {e.get('status')}: {e.get('reason')}")
    failures = [(m, s, e.get("reason")) for m in PER_SIZE for s, e in doc.get(m, {}).items()
                if e.get("status") != "ok"]
    for m, s, why in failures:
        lines.append(f"! {m} at {s}: {why}")
    miss = [c for c in doc.get("checks", []) if c["pass"] is False]
    lines.append(f"targets: {sum(c['pass'] is True for c in doc.get('checks', []))} met, {len(miss)} missed"
                 + (": " + ", ".join(f"{c['measurement']}@{c['size']}" for c in miss) if miss else ""))
    return "\n".join(lines)


# --- command line ------------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--sizes", default=None, help=f"comma-separated, of {', '.join(SIZES)} (default: S,M,L)")
    p.add_argument("--xl", action="store_true", help="also run XL (heavy)")
    p.add_argument("--quick", action="store_true", help="3 repeats, fewer GUI samples (below the 5-run minimum)")
    p.add_argument("--only", default=",".join(MEASUREMENTS), help="comma-separated subset of measurements")
    p.add_argument("--repeats", type=int, help="engine rounds per size (default by size, at least 5)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--gui-samples", type=int, help="samples per GUI latency measurement (default by size)")
    p.add_argument("--storm", default="300,3.0", help="responsiveness: CHANGES,SECONDS (default 300,3.0)")
    p.add_argument("--export-repeats", type=int)
    p.add_argument("--isolate", choices=("auto", "all", "none"), default="auto",
                   help="run a size in a child process: auto = XL only")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="results JSON (default benchmarks/results.json)")
    p.add_argument("--merge", action="store_true", help="update an existing results file instead of replacing it")
    p.add_argument("--no-snapshot", action="store_true",
                   help="import the live attnviz/ (default: a frozen copy, since others edit it while this runs)")
    p.add_argument("--code-from", metavar="REV",
                   help="benchmark attnviz as of a git revision (e.g. before an optimisation)")
    p.add_argument("--show", metavar="RESULTS.json", help="print the table of an existing results file and exit")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    if args.show:
        print(table(json.loads(Path(args.show).read_text())))
        return 0
    if not args.child and not args.no_snapshot:
        return _in_snapshot(argv, args)

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    names = args.sizes or "S,M,L"
    sizes = parse_sizes(names)
    if args.xl and SIZES["XL"] not in sizes:
        sizes.append(SIZES["XL"])
    only = [m.strip() for m in args.only.split(",") if m.strip()]
    bad = [m for m in only if m not in MEASUREMENTS]
    if bad:
        p.error(f"unknown measurement(s) {', '.join(bad)}; use some of {', '.join(MEASUREMENTS)}")
    changes, seconds = args.storm.split(",")
    storm = (int(changes), float(seconds))

    if args.child:  # one size, in this process, partial results saved after each measurement
        out = Path(args.out)

        def checkpoint(part):
            out.write_text(json.dumps(part, default=_jsonable))

        run_size(sizes[0], only, quick=args.quick, repeats=args.repeats, warmup=args.warmup,
                 gui_samples=args.gui_samples, storm=storm, checkpoint=checkpoint)
        return 0

    run_benchmarks(sizes, only, quick=args.quick, repeats=args.repeats, warmup=args.warmup,
                   gui_samples=args.gui_samples, storm=storm, isolate=args.isolate,
                   export_repeats=args.export_repeats, out=Path(args.out), merge=args.merge,
                   command=os.environ.get("ATTNVIZ_BENCH_COMMAND") or " ".join(["python -m benchmarks", *argv]))
    return 0


def _in_snapshot(argv: list[str], args) -> int:
    """Re-run this command inside a frozen copy of attnviz + benchmarks; results go to the real --out."""
    return rerun_in_snapshot("benchmarks", argv, args.code_from, {"--out": str(Path(args.out).resolve())})


__all__ = ["MEASUREMENTS", "checks", "main", "run_benchmarks", "skipped", "table"]

if __name__ == "__main__":
    sys.exit(main())
