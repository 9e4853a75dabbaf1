"""What the circuit panels share: one background computation at a time per panel (never the GUI thread, never
the map worker's), cached results, and the colouring of signed layer x head tables."""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable

import numpy as np
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QProgressBar, QPushButton

from attnviz import colormaps
from attnviz.core.runs.lru import LRU
from attnviz.explain import forward_config, prompt_config
from attnviz.session.memory import freeze_alive
from attnviz.system import lower_priority, model_threads, set_torch_threads
from attnviz.ui.panels.heat_table import HeatTable
from attnviz.ui.widgets.basic import named

Compute = Callable[[Callable[[], bool], Callable[[int, int], None]], object]  # (cancel, progress) -> value

# Every job and every job's thread still computing: the window cancels them all as it closes, and the app waits a
# moment for the threads before Python finalises (a thread still inside torch then aborts the process with
# "terminate called without an active exception"; see app.run_app).
_jobs: weakref.WeakSet = weakref.WeakSet()
_threads: set[threading.Thread] = set()
_threads_lock = threading.Lock()


def cancel_all_jobs() -> None:
    """Cancel whatever every panel's job computes (the window is closing: nobody will see it)."""
    for job in list(_jobs):
        job.cancel()


def wait_for_jobs(timeout: float) -> bool:
    """Wait up to `timeout` seconds in all for every job's thread to end; whether they all have."""
    deadline = time.monotonic() + timeout
    with _threads_lock:
        threads = list(_threads)
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(t.is_alive() for t in threads)


class Job(QObject):
    """Runs compute(cancel, progress) on a thread of its own; a newer start cancels the one running. The
    result comes back on the GUI thread as sigDone(key, value); a failure as sigFailed(key, one line)."""

    sigProgress = Signal(object, int, int)
    sigDone = Signal(object, object)
    sigFailed = Signal(object, str)

    def __init__(self, name: str, parent: QObject | None = None):
        super().__init__(parent)
        self.name = name
        self.key = None  # what is running (None: nothing)
        self.cache: LRU = LRU(8)
        self._cancel: threading.Event | None = None
        _jobs.add(self)

    def start(self, key, compute: Compute) -> bool:
        """Start computing `key` (False: it is cached, and sigDone has been emitted already)."""
        if (cached := self.cache.get(key)) is not None:
            self.cancel()
            self.sigDone.emit(key, cached)
            return False
        if key == self.key:
            return True
        self.cancel()
        freeze_alive()  # as head effects do: what is alive now stays out of the collector's passes
        self.key, flag = key, threading.Event()
        self._cancel = flag
        thread = threading.Thread(target=self._body, args=(key, compute, flag), name=f"attnviz-{self.name}",
                                  daemon=True)
        with _threads_lock:
            _threads.add(thread)
        thread.start()
        return True

    def cancel(self) -> None:
        if self._cancel is not None:
            self._cancel.set()
        self.key, self._cancel = None, None

    def _body(self, key, compute: Compute, flag: threading.Event) -> None:
        try:
            self._compute(key, compute, flag)
        finally:
            with _threads_lock:
                _threads.discard(threading.current_thread())

    def _compute(self, key, compute: Compute, flag: threading.Event) -> None:
        from attnviz.core.runs.result import Cancelled

        lower_priority()  # the GUI thread wins the CPU
        set_torch_threads(model_threads(os.cpu_count() or 1))
        try:
            value = compute(flag.is_set, lambda done, total: self.sigProgress.emit(key, done, total))
        except Cancelled:
            return
        except Exception as exc:  # never the app: the panel says it
            if not flag.is_set():
                self.sigFailed.emit(key, str(exc) or type(exc).__name__)
            return
        if not flag.is_set():
            self.cache.put(key, value)
            self.sigDone.emit(key, value)

    def finished(self, key) -> bool:
        """Called on sigDone/sigFailed: whether `key` is the one this job was computing (then it is idle)."""
        if key != self.key:
            return False
        self.key = None
        return True


def circuit_config(result):
    """The config circuits are computed for: the forward's, over the prompt, with nothing ablated."""
    return prompt_config(forward_config(result)).replace(ablate=())


def signed_cells(values: np.ndarray) -> np.ndarray:
    """uint8 colour indices of a signed array: 0 in the middle of the diverging colormap, NaN grey."""
    finite = np.isfinite(values)
    bound = float(np.abs(values[finite]).max()) if finite.any() else 0.0
    frac = 0.5 + 0.5 * np.nan_to_num(values) / (bound or 1.0)
    index = np.round(frac * (colormaps.DATA_LEVELS - 1)).astype(np.uint8)
    index[~finite] = colormaps.NAN_INDEX
    return index


def fill(table: HeatTable, values: np.ndarray, rows: list[str], cols: list[str], tip, texts=None) -> None:
    """Colour a HeatTable by a signed array (texts: the cells' numbers, default none)."""
    if texts is None:
        texts = [[""] * values.shape[1] for _ in range(values.shape[0])]
    table.heat.set_cells(texts, signed_cells(values), colormaps.lut(colormaps.DEFAULT_DIVERGING), rows, cols, tip)


def progress_row(prefix: str, button_text: str = "Compute") -> tuple[QProgressBar, QPushButton]:
    """A progress bar that keeps its place while hidden, and a Cancel / Compute button (objectName
    `prefix`Progress and `prefix``button_text`Button). Showing or hiding the bar, or the button's text changing,
    keeps the row's geometry: a relayout would move the table below and paint it again."""
    bar = named(QProgressBar(), f"{prefix}Progress")
    bar.setToolTip("Batched forwards done")
    bar.setMaximumWidth(160)
    policy = bar.sizePolicy()
    policy.setRetainSizeWhenHidden(True)
    bar.setSizePolicy(policy)
    bar.hide()
    button = named(QPushButton(button_text), f"{prefix}{button_text}Button")
    button.setToolTip("Compute (Cancel stops a computation that runs)")
    metrics = button.fontMetrics()
    widest = max(metrics.horizontalAdvance(t) for t in ("Cancel", "Compute"))
    button.setMinimumWidth(button.sizeHint().width() - metrics.horizontalAdvance(button_text) + widest + 12)
    return bar, button
