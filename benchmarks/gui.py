"""2, 3 and 6: the real MainWindow, offscreen, driven through its widgets.

2. latency        parameter change (seed spin toggled, heads halved and restored) -> the window's
                  sigShown for that request -> a forced synchronous repaint of the head grid and the
                  tensor view unless the loop already painted them (so painting counts once): p50 per size.
3. responsiveness 300 seed changes over 3 s from a GUI-thread QTimer while a 5 ms QTimer records
                  the longest gap between its ticks (the stall); stale frames shown; final frame check.
6. view_only      colormap, shared/per-head scale and shown batch item (batch 2): change -> sigShown
                  (+ forced repaint), with a check that nothing was recomputed.

Timing is on the GUI thread with time.perf_counter; waiting is a QEventLoop quit from the
sigShown slot, so no polling interval is added to any number.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable

from .common import Size, failure, skipped, summary

LATENCY_TARGET_S = {"S": 0.030, "M": 0.200, "L": 1.0}
STALL_TARGET_S = 0.050
VIEW_TARGET_S = 0.050  # at L
LATENCY_SAMPLES = {"tiny": 5, "S": 15, "M": 9, "L": 7, "XL": 5}
HEADS_SAMPLES = {"tiny": 3, "S": 7, "M": 5, "L": 5, "XL": 0}  # XL: each toggle recomputes twice (minutes)
VIEW_SAMPLES = {"tiny": 4, "S": 9, "M": 7, "L": 7, "XL": 5}
WINDOW_SIZE = (1280, 820)  # MainWindow's own default size


def qapp():
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication(["attnviz-benchmarks"])


def _make_classes():
    """Qt classes are defined lazily so importing this module never imports Qt."""
    from PySide6.QtCore import QEventLoop, QObject, Qt, QTimer

    class CountingCompute:
        """core.run, counting the calls (view-only changes must make none)."""

        def __init__(self, on_first_call=None):
            from attnviz.core import run

            self._run = run
            self.calls = 0
            self._first = on_first_call  # runs once, on the worker thread (experiments)

        def __call__(self, config, cancel=None, **kwargs):  # kwargs: `record` for views of other stages
            if self._first is not None:
                self._first, first = None, self._first
                first()
            self.calls += 1
            return self._run(config, cancel=cancel, **kwargs)

    class StallMonitor(QObject):
        """A GUI-thread timer every `interval_ms`; a stall is a gap between ticks minus the interval."""

        def __init__(self, interval_ms: int = 5):
            super().__init__()
            self.interval = interval_ms / 1000
            self.timer = QTimer(self)
            self.timer.setTimerType(Qt.PreciseTimer)
            self.timer.setInterval(interval_ms)
            self.timer.timeout.connect(self._tick)
            self.gaps: list[float] = []
            self.last = time.perf_counter()

        def start(self) -> None:
            self.reset()
            self.timer.start()

        def stop(self) -> None:
            self.timer.stop()

        def reset(self) -> None:
            self.gaps = []
            self.last = time.perf_counter()

        def _tick(self) -> None:
            now = time.perf_counter()
            self.gaps.append(now - self.last)
            self.last = now

        def longest_stall(self, until: float | None = None) -> float:
            """Longest gap minus the interval; `until` also counts the open gap up to that moment."""
            gaps = list(self.gaps)
            if until is not None:
                gaps.append(until - self.last)
            return max((g - self.interval for g in gaps), default=0.0)

        def stats(self, until: float | None = None) -> dict:
            gaps = list(self.gaps) + ([until - self.last] if until is not None else [])
            stalls = sorted(max(g - self.interval, 0.0) for g in gaps)
            return {
                "ticks": len(self.gaps),
                "longest_stall_s": stalls[-1] if stalls else 0.0,
                "p99_stall_s": stalls[int(0.99 * (len(stalls) - 1))] if stalls else 0.0,
                "stalls_over_50ms": sum(s > STALL_TARGET_S for s in stalls),
            }

    class Recorder(QObject):
        """Watches the window: shown ids in order, worker outcomes (scalars only: no big arrays kept)."""

        def __init__(self, window):
            super().__init__()
            self.window = window
            self.shown: list[tuple[int, float]] = []
            self.outcomes: dict[int, dict] = {}
            self.failures: list[tuple[int, str]] = []
            self.loop: QEventLoop | None = None
            self.until: Callable[[], bool] | None = None
            self.hit_at: float | None = None
            window.sigShown.connect(self._shown)
            late = getattr(getattr(window, "delivery", None), "sigLateShown", None)  # absent before 2026-12
            if late is not None:  # a model's predictions follow its maps: the window settles then
                late.connect(self._late)
            window.sigFailed.connect(self._failed)
            window.worker.sigDone.connect(self._done)  # queued: runs on the GUI thread after the window's slot

        def _shown(self, rid: int) -> None:
            now = time.perf_counter()
            self.shown.append((rid, now))
            if self.loop is not None and self.until is not None and self.until():
                self.hit_at = now
                self.loop.quit()

        def _late(self, rid: int) -> None:
            if self.loop is not None and self.until is not None and self.until():
                self.hit_at = time.perf_counter()
                self.loop.quit()

        def _failed(self, rid: int, message: str) -> None:
            self.failures.append((rid, message))
            if self.loop is not None:
                self.loop.quit()

        def _done(self, outcome) -> None:
            r = outcome.result
            self.outcomes[outcome.request.id] = {
                "recomputed": outcome.recomputed,
                "worker_s": outcome.worker_time_s,
                "compute_s": r.compute_time_s if outcome.recomputed else 0.0,
                "run_total_s": r.total_time_s if outcome.recomputed else 0.0,
                "render_s": outcome.frames.render_time_s,
            }

        def wait(self, until: Callable[[], bool], timeout_s: float) -> float | None:
            """Run the event loop until `until()` holds at a sigShown (or a failure, or the timeout)."""
            if until():
                return time.perf_counter()
            self.loop, self.until, self.hit_at = QEventLoop(), until, None
            guard = QTimer()
            guard.setSingleShot(True)
            guard.timeout.connect(self.loop.quit)
            guard.start(int(timeout_s * 1000))
            self.loop.exec()
            guard.stop()
            self.loop, self.until = None, None
            return self.hit_at

    return CountingCompute, StallMonitor, Recorder


class Harness:
    """One offscreen MainWindow showing `size`, with a stall monitor and a recorder attached."""

    def __init__(self, size: Size, timeout_s: float = 900, window_cls=None, on_first_compute=None,
                 stall_timer: bool = True):
        from PySide6.QtCore import QCoreApplication, QEvent

        from attnviz.ui import MainWindow

        self._QEvent, self._QCoreApplication = QEvent, QCoreApplication
        CountingCompute, StallMonitor, Recorder = _make_classes()  # noqa: N806
        self.app = qapp()
        self.size = size
        self.timeout_s = timeout_s
        self.compute = CountingCompute(on_first_compute)
        self.window = (window_cls or MainWindow)(compute=self.compute)
        self.window.resize(*WINDOW_SIZE)
        self.window.show()
        self.recorder = Recorder(self.window)
        self.monitor = StallMonitor(5)
        if stall_timer:  # its ticks wake the GUI thread every 5 ms, which slows a forward (see benchmarks.fast)
            self.monitor.start()
        self.settle("the default configuration")
        self.window.panel.set_config(size.config())
        self.settle(f"size {size.name}")

    @property
    def panel(self):
        return self.window.panel

    def settled(self, after_id: int) -> bool:
        w = self.window
        return w.is_settled() and w.shown_id > after_id and w.last_error is None

    def settle(self, what: str) -> None:
        before = self.window.shown_id
        hit = self.recorder.wait(lambda: self.window.is_settled() and self.window.shown_id >= max(before, 1),
                                 self.timeout_s)
        if self.recorder.failures and self.recorder.failures[-1][0] >= self.window.latest_id:
            raise RuntimeError(f"{what}: the window reported {self.recorder.failures[-1][1]}")
        if hit is None and not self.window.is_settled():
            raise TimeoutError(f"{what}: not shown within {self.timeout_s:.0f} s")
        self.app.processEvents()

    def force_paint(self) -> float:
        """Apply pending layouts, then paint now the head grid and tensor view, each unless it painted the
        result shown already (the window shows a result one view per loop pass); returns the paint time."""
        t0 = time.perf_counter()
        self._QCoreApplication.sendPostedEvents(None, self._QEvent.Type.LayoutRequest)
        for view in (self.window.headGrid, self.window.outputView):
            if not getattr(view, "painted_shown", lambda: False)():  # code before 2026-12: always
                view.viewport().repaint()
        return time.perf_counter() - t0

    def tiles_show_frames(self) -> bool:
        """Every head tile holds this result's frame and has been converted to a QImage."""
        import numpy as np

        grid, frames = self.window.headGrid, self.window.frames
        if frames is None or not grid.tiles:
            return False
        mosaic = getattr(grid, "mosaic", None)  # None: attnviz before the mosaic (--code-from), a PlotItem a tile
        for tile, h in zip(grid.tiles, grid.tile_heads):
            heat = frames.mean if h == -1 else frames.heads[h]
            shown = tile.image.image if mosaic is None else tile.heat.image
            if shown is None or shown.shape != heat.image.shape or not np.array_equal(shown, heat.image):
                return False
        drawn = [tile.image.qimage for tile in grid.tiles] if mosaic is None else mosaic.pictures
        if len(drawn) != len(grid.tiles) or any(image is None for image in drawn):
            return False
        return len(grid.tiles) == len(grid._wanted_heads(self.window.result.config.heads))

    def change(self, action: Callable[[], None]) -> dict:
        """Do `action` (a widget edit), wait for its frame on screen, force a paint; one timed sample."""
        w = self.window
        before_id, before_calls = w.shown_id, self.compute.calls
        self.monitor.reset()
        t0 = time.perf_counter()
        action()
        hit = self.recorder.wait(lambda: self.settled(before_id), self.timeout_s)
        if hit is None:
            err = self.recorder.failures[-1][1] if self.recorder.failures else f"timeout after {self.timeout_s} s"
            raise RuntimeError(f"change not shown: {err}")
        paint = self.force_paint()
        t1 = time.perf_counter()
        stall = self.monitor.longest_stall(until=t1)
        self.app.processEvents()  # delivers the recorder's copy of the outcome
        info = self.recorder.outcomes.get(w.shown_id, {})
        return {
            "latency_s": t1 - t0,
            "to_sigshown_s": hit - t0,
            "paint_s": paint,
            "gui_other_s": (hit - t0) - info.get("worker_s", 0.0),
            **info,
            "computes": self.compute.calls - before_calls,
            "tiles_ok": self.tiles_show_frames(),
            "stall_s": stall,
        }

    def close(self) -> None:
        self.monitor.stop()
        self.window.close()
        self.window.deleteLater()
        self.app.processEvents()
        self.window = None
        gc.collect()


# --- 2. latency --------------------------------------------------------------------------------


def _latency(h: Harness, samples: int, heads_samples: int) -> dict:
    size = h.size
    seed_spin, heads_spin = h.panel.widgets["seed"], h.panel.widgets["heads"]

    def toggle_seed():
        seed_spin.setValue(1 - seed_spin.value())

    h.change(toggle_seed)  # warm-up
    seed_runs = [h.change(toggle_seed) for _ in range(samples)]
    out: dict = {"status": "ok", "window_px": list(WINDOW_SIZE), "seed_toggle": _latency_summary(seed_runs)}

    if heads_samples > 0 and size.heads >= 2 and size.width % (size.heads // 2) == 0:
        half, full = size.heads // 2, size.heads
        to_full, to_half = [], []
        for _ in range(heads_samples):
            to_half.append(h.change(lambda: heads_spin.setValue(half)))
            to_full.append(h.change(lambda: heads_spin.setValue(full)))
        out["heads_toggle"] = {"to_full": _latency_summary(to_full), "to_half": _latency_summary(to_half),
                               "heads": [full, half]}
    else:
        out["heads_toggle"] = skipped("not run at this size (each toggle recomputes; minutes at XL)")
    out["p50_s"] = out["seed_toggle"]["latency_s"]["p50"]
    target = LATENCY_TARGET_S.get(size.name)
    if target is not None:
        out["target"] = f"p50 <= {target * 1e3:.0f} ms"
        out["pass"] = out["p50_s"] <= target
    elif size.name == "XL":
        out["target"] = f"completes; longest GUI stall <= {STALL_TARGET_S * 1e3:.0f} ms"
        out["pass"] = out["seed_toggle"]["longest_stall_s"] <= STALL_TARGET_S
    return out


def _latency_summary(runs: list[dict]) -> dict:
    keys = ("latency_s", "to_sigshown_s", "paint_s", "worker_s", "compute_s", "run_total_s", "render_s",
            "gui_other_s")
    res = {k: summary([r.get(k) for r in runs]) for k in keys}
    res["samples_latency_s"] = [r["latency_s"] for r in runs]
    res["samples_stall_s"] = [r["stall_s"] for r in runs]
    res["all_tiles_ok"] = all(r["tiles_ok"] for r in runs)
    res["all_recomputed"] = all(r.get("recomputed", False) for r in runs)
    res["longest_stall_s"] = max(r["stall_s"] for r in runs)
    return res


# --- 6. view-only --------------------------------------------------------------------------------


def _view_only(h: Harness, samples: int, batch_item: bool = True) -> dict:
    w = h.window
    combo, per_head = w.colormapCombo, w.perHeadCheck
    if combo.count() < 2:
        return skipped("fewer than two colormaps")

    def next_colormap():
        combo.setCurrentIndex((combo.currentIndex() + 1) % combo.count())

    out: dict = {"status": "ok"}
    h.change(next_colormap)  # warm-up
    runs = {"colormap": [h.change(next_colormap) for _ in range(samples)],
            "per_head_scale": [h.change(per_head.toggle) for _ in range(samples + (samples % 2))]}
    if per_head.isChecked():
        h.change(per_head.toggle)
    if batch_item:
        h.change(lambda: h.panel.widgets["batch"].setValue(2))  # recomputes once, not timed as view-only
        spin = h.panel.batchIndexSpin
        h.change(lambda: spin.setValue(1 - spin.value()))  # warm-up
        runs["batch_item"] = [h.change(lambda: spin.setValue(1 - spin.value())) for _ in range(samples)]
        h.change(lambda: h.panel.widgets["batch"].setValue(1))
    else:
        out["batch_item"] = skipped("batch 2 at this size needs about twice the memory of a run; not run")
    for name, rs in runs.items():
        s = _latency_summary(rs)
        s["recomputes"] = sum(r["computes"] for r in rs)
        s["to_sigshown_p50_s"] = s["to_sigshown_s"]["p50"]
        out[name] = s
    p50s = [out[n]["to_sigshown_s"]["p50"] for n in runs]
    out["worst_p50_to_sigshown_s"] = max(p50s)
    out["worst_p50_with_paint_s"] = max(out[n]["latency_s"]["p50"] for n in runs)
    out["recomputes"] = sum(out[n]["recomputes"] for n in runs)
    out["target"] = f"p50 change -> sigShown <= {VIEW_TARGET_S * 1e3:.0f} ms, no recompute (at L)"
    if h.size.name == "L":
        out["pass"] = out["worst_p50_to_sigshown_s"] <= VIEW_TARGET_S and out["recomputes"] == 0
    return out


# --- 3. responsiveness -----------------------------------------------------------------------------


def _storm(h: Harness, changes: int = 300, duration_s: float = 3.0, verify: bool = True) -> dict:
    from PySide6.QtCore import QEventLoop, Qt, QTimer

    w, spin = h.window, h.panel.widgets["seed"]
    base = spin.value() + 10
    first_shown = len(h.recorder.shown)
    calls0 = h.compute.calls
    done = {"k": 0, "t_last": None, "ticks": 0}
    period = duration_s / changes
    loop = QEventLoop()
    driver = QTimer()
    driver.setTimerType(Qt.PreciseTimer)
    driver.setInterval(max(int(duration_s * 1000 / changes), 1))

    def step():
        # Catch up when the GUI thread was busy: every change due by now is made (each its own
        # setValue), so the 300 changes land within the 3 s as a user's input events would.
        due = min(changes, int((time.perf_counter() - t0) / period) + 1)
        while done["k"] < due:
            done["k"] += 1
            spin.setValue(base + done["k"])
        done["ticks"] += 1
        if done["k"] >= changes:
            driver.stop()
            done["t_last"] = time.perf_counter()
            loop.quit()

    driver.timeout.connect(step)
    h.monitor.reset()
    t0 = time.perf_counter()
    driver.start()
    loop.exec()
    storm_stats = h.monitor.stats()
    final_seed = base + changes
    last_id_sent = None
    hit = h.recorder.wait(lambda: w.is_settled() and w.result is not None and w.result.config.seed == final_seed,
                          h.timeout_s)
    paint = h.force_paint()
    t_end = time.perf_counter()
    all_stats = h.monitor.stats(until=t_end)
    h.app.processEvents()
    last_id_sent = w.latest_id
    shown_ids = [rid for rid, _ in h.recorder.shown[first_shown:]]
    stale, newest = 0, 0
    for rid in shown_ids:
        if rid < newest:
            stale += 1
        newest = max(newest, rid)
    config_now = h.panel.config()
    final_ok = (hit is not None and w.shown_id == last_id_sent and w.result.config == config_now
                and config_now.seed == final_seed and h.tiles_show_frames())
    exact = None
    if verify and final_ok:
        import numpy as np

        from attnviz.core import run

        exact = bool(np.array_equal(w.result.weights, run(config_now).weights, equal_nan=True))
        final_ok = final_ok and exact
    res = {
        "status": "ok",
        "changes": changes,
        "driver_interval_ms": driver.interval(),
        "driver_ticks": done["ticks"],
        "storm_s": (done["t_last"] or t_end) - t0,
        "settle_after_last_change_s": (hit - done["t_last"]) if hit and done["t_last"] else None,
        "final_paint_s": paint,
        "monitor_interval_ms": h.monitor.interval * 1e3,
        "during_storm": storm_stats,
        "storm_and_settle": all_stats,
        "longest_stall_s": all_stats["longest_stall_s"],
        "frames_shown": len(shown_ids),
        "stale_frames_shown": stale,
        "computes": h.compute.calls - calls0,
        "final_matches_parameters": bool(final_ok),
        "final_weights_exact": exact,
        "target": f"longest stall <= {STALL_TARGET_S * 1e3:.0f} ms, 0 stale frames, final frame = final parameters",
    }
    res["pass"] = res["longest_stall_s"] <= STALL_TARGET_S and stale == 0 and bool(final_ok)
    return res


# --- entry -------------------------------------------------------------------------------------


def bench_gui(size: Size, which=("latency", "responsiveness", "view_only"), quick: bool = False,
              samples: int | None = None, storm: tuple[int, float] = (300, 3.0)) -> dict[str, dict]:
    """Run the GUI measurements at one size in one window; each measurement fails on its own."""
    out: dict[str, dict] = {}
    try:
        h = Harness(size)
    except Exception as exc:  # noqa: BLE001 - recorded, not raised
        return {name: failure(exc) for name in which}
    try:
        n_lat = samples or (max(3, LATENCY_SAMPLES[size.name] // 2) if quick else LATENCY_SAMPLES.get(size.name, 5))
        n_heads = samples or (min(3, HEADS_SAMPLES[size.name]) if quick else HEADS_SAMPLES.get(size.name, 3))
        n_view = samples or (3 if quick else VIEW_SAMPLES.get(size.name, 5))
        for name in which:
            try:
                if name == "latency":
                    out[name] = _latency(h, n_lat, n_heads if size.name != "XL" else 0)
                elif name == "responsiveness":
                    out[name] = _storm(h, *storm, verify=size.name != "XL")
                elif name == "view_only":
                    out[name] = _view_only(h, n_view, batch_item=size.name != "XL")
            except Exception as exc:  # noqa: BLE001
                out[name] = failure(exc)
            out[name]["samples"] = {"latency": n_lat, "view_only": n_view}.get(name)
    finally:
        h.close()
    return out

