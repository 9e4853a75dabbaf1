"""The one background worker: computes runs and display-ready frames off the GUI thread.

Latest request wins: `submit` replaces any request still pending, so a burst of changes costs
one run per finished computation, never a queue. Every finished request is reported with its id;
the window drops ids older than what it already shows. A request whose config equals the last
computed one only re-renders (view-only changes never recompute).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import math
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import torch
from PySide6.QtCore import QObject, Signal

from attnviz.core import ConfigError, RunConfig, RunResult, run
from attnviz.core.kernel import buffers
from attnviz.core.kernel.stages import ALL_STAGES, DEFAULT_RECORD
from attnviz.core.runs.backed import backed_stages
from attnviz.core.runs.runner import (
    SLOW_CPU_DTYPES,
    Cancelled,
    MemoryBudgetError,
    NonFiniteResult,
    estimate_flops,
    require_kept,
    require_stage,
    run_stages,
)
from attnviz.explain import LATE_EXTRAS, head_score_frames, late_extras, render_extras
from attnviz.frames import Frames, PoolCache, ViewOptions, render, view_stage
from attnviz.system import lower_priority, model_threads, set_torch_threads, thread_policy
from attnviz.ui.maps.layer_feed import LayerFeed
from attnviz.ui.maps.zoom import ZoomAsk, Zoomer, ZoomFrames
from attnviz.ui.window.cpushare import CpuShare
from attnviz.ui.window.lanes import Lane


def needed_stages(config: RunConfig, options: ViewOptions) -> frozenset[str]:
    """The stages a request's views read: the map view's stage, and every stage this configuration
    has while the pipeline view is shown (only then: a full trace costs memory)."""
    stage = view_stage(options.view)
    if options.pipeline_head is None:
        return frozenset({stage})
    return frozenset({stage}) | (ALL_STAGES & frozenset(run_stages(config)))


def window_record(config: RunConfig, needed: frozenset[str]) -> frozenset[str]:
    """What the window's run keeps: the default record and the needed stages, less the pre-softmax scores
    unless a view draws them. Hover recomputes one cell's score from q and k (cells.cell_path), and an NPZ
    export runs again for the whole default record (complete_stages), so the window's run writes one full
    map fewer (at 1,024 tokens and 12 heads, 48 MB; a 30-layer model at 512 tokens, 283 MB). A generation
    keeps them: its export would have to write the tokens again."""
    record = DEFAULT_RECORD | needed
    return record if "scores" in needed or generating(config) else record - {"scores"}


def complete_stages(result: RunResult, also: frozenset[str] = frozenset()) -> RunResult:
    """`result` with every stage of the default record (and `also`) its configuration has: run again (a
    seed variant with the same seed, a model on the same text: the same numbers) when the window's run left
    some out (window_record). A pooled run's, a generation's or a file's stays as it is. On a worker thread only."""
    wanted = (DEFAULT_RECORD | also | result.stages.keys()) & frozenset(run_stages(result.config))
    if result.source is not None:
        wanted &= frozenset(backed_stages(result.source.info))
    if result.pool_factor is not None or generating(result.config) or result.opened or wanted <= result.stages.keys():
        return result  # (maps opened from a file: nothing to run, the file's stages are all there is)
    config = result.config if result.source is None else result.source.key.replace(layer=result.config.layer)
    return run(config, record=wanted)


def producible(needed: frozenset[str], source) -> frozenset[str]:
    """The needed stages a result can have: a model's forward (`source`) records what its family exposes."""
    return needed if source is None else needed & frozenset(backed_stages(source.info))


def late_names(result: RunResult, options: ViewOptions) -> frozenset[str]:
    """The extras of a new result that follow its maps (Outcome.late): the logits of a model with an output head
    (explain.LATE_EXTRAS), and a model's head types while the statistics panel, which prints them beside its
    numbers, is closed: the model view's badges. The head-type probe over every layer's maps held the maps back
    from the screen (benchmarks/README.md, Behind the code)."""
    late = late_extras(options) if result.outputs is not None else frozenset()
    if options.head_scores and not options.stats and result.source is not None:
        late |= {"head_scores"}
    return late


def early_extras(late: frozenset[str]):
    """frames.render's extras for a result whose `late` extras follow it (render_extras: all of them)."""
    if not late:
        return render_extras

    def extras(result: RunResult, options: ViewOptions, cache: PoolCache) -> dict:
        if "head_scores" in late:
            options = dataclasses.replace(options, head_scores=False)
        return render_extras(result, options, cache, part="early" if late & LATE_EXTRAS else "all")
    return extras


def late_frames(result: RunResult, options: ViewOptions, cache: PoolCache, late: frozenset[str]) -> dict:
    """The `late` extras (late_names) that follow the maps of `result`: the head types first, then the logits."""
    extras = {}
    if "head_scores" in late:
        with torch.inference_mode():
            extras["head_scores"] = head_score_frames(result)
    return extras | (render_extras(result, options, cache, part="late") if late & LATE_EXTRAS else {})


@dataclass(frozen=True)
class Request:
    id: int
    config: RunConfig
    options: ViewOptions
    force: bool = False  # compute again even if the last result shows this config (Generate pressed again)
    zoom: ZoomAsk | None = None  # also the exact block of a region of the shown maps (zoom.py)
    layers: bool = False  # a long pooled forward hands its finished layers on (sigLayers) for the model view


@dataclass
class Outcome:
    request: Request
    result: RunResult
    frames: Frames
    recomputed: bool
    worker_time_s: float
    partial: bool = False  # a generation still running: what it wrote so far (the final Outcome follows)
    generated: tuple[int, int] | None = None  # a generation: (tokens written, tokens asked for)
    stopped: bool = False  # a generation the Stop button ended: what it wrote till then
    zoom: ZoomFrames | None = None  # the request's zoom: every head of the block, exact
    late: frozenset[str] = frozenset()  # explain.LATE_EXTRAS left out of frames: sigExtras brings them after


def generating(config: RunConfig) -> bool:
    """Whether `config`'s run writes tokens after its text (a model-backed or toy variant with generate > 0)."""
    return config.generate > 0 and config.applies("generate")


def supersedes(new: RunConfig | None, running: RunConfig) -> bool:
    """Whether a request for `new` (None: an invalid edit) makes a running generation of `running` pointless:
    any change but the layer shown (a view of the same forward) and view options (not in the config)."""
    return new is None or new.replace(layer=running.layer) != running


def written(result: RunResult) -> int:
    """The generated tokens a result's maps hold (0 for a run that generated nothing)."""
    return 0 if result.prompt_length is None else len(result.tokens) - result.prompt_length


# A generation's partial results: at most one per this interval (each costs a build and a render on the
# worker and a swap and paint on the GUI thread); the final result always follows.
PARTIAL_INTERVAL_S = 0.05
# After a partial result the generation waits for the window to paint it, at most this long: its swap takes
# two event-loop passes and with a large model's views (tensor, every layer's tiles) outlasted YIELD_MAX_S.
PARTIAL_YIELD_MAX_S = 0.2


@dataclass
class Failure:
    request: Request
    message: str
    field: str | None = None
    suggestions: tuple = ()


# The thread and priority policy (issue 9; numbers in benchmarks/README.md, "Contention") is
# attnviz.system's ThreadPolicy. Before each request the worker measures the cores other programs used
# since the last one (cpushare). All cores free: the forward runs with one torch thread per core on the
# `quiet` lane, quiet_nice nicer than the GUI. Some cores busy: it runs with the cores left on the `busy`
# lane, busy_nice nicer (niceness cannot be lowered again without privileges, hence two threads).
# After delivering a result the worker yields to the window while it swaps the result in and paints
# it: the next request waits at its start and at each stage boundary (at most this long per result).
# With a forward or render running on the other core the GUI thread's swap and paint took 2-3x their
# CPU time alone, and every Python callback of the paint (pyqtgraph items) queued for the GIL behind
# the worker's Python between torch ops (benchmarks/README.md, Behind the code).
YIELD_MAX_S = 0.05
# A result whose late extras follow (Outcome.late) waits for the window's paint at most this long before the
# worker computes them: a long input's maps take the window a while to swap in (every token's label;
# benchmarks/README.md, Behind the code), and the logits' Python, started after YIELD_MAX_S, took the GIL from it
# between its Qt calls (a 4,096-token run's longest stall).
LATE_YIELD_MAX_S = 0.5


# A model forward's busy bar ("layer 12 / 30"): its first layer at once (Stop applies from then), then at most
# this often. One signal per layer slowed a 30-layer forward (benchmarks/README.md, Behind the code): each a queued
# call, a slot and a repaint of the bar on the GUI thread, whose Python took the GIL from the forward's between its ops.
PROGRESS_INTERVAL_S = 0.2


# Under "adaptive", a forward of fewer operations than this runs on one torch thread, on the busy
# lane. Right after an edit the GUI thread repaints the edited control on one of the cores; a small
# forward is over before that is done, and with a thread on each core every op waited for the
# thread sharing the GUI's core (S in the window was faster on one thread). Two threads were even at 0.48 GFLOP and won
# every pair from 0.67 GFLOP up (benchmarks/README.md, "Threads for small forwards"); S is 0.30. Half precision on the
# CPU runs far slower than its count says, so it never counts as small.
SMALL_FORWARD_FLOPS = 400_000_000


def small_forward(config: RunConfig) -> bool:
    """Whether `config`'s forward is short enough to leave the GUI thread its core (see above)."""
    if config.spec.backed or config.dtype in SLOW_CPU_DTYPES:  # models: see model_threads
        return False
    return estimate_flops(config) < SMALL_FORWARD_FLOPS


def thread_count(share: CpuShare, config: RunConfig) -> int:
    """Torch threads for the next forward of `config` under the thread policy (a model's: see model_threads)."""
    policy = thread_policy().threads
    if policy == "all":
        n = share.cores
    elif policy == "adaptive":
        n = share.threads()  # sampled on every request: each window it measures is one request long
        n = 1 if small_forward(config) else n
    else:
        n = int(policy)
    return model_threads(n) if config.spec.backed else n


def _libc(name: str):
    """A glibc function, or None (not Linux, or not glibc: musl, ...)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD_BYTES = 32 << 20  # the most glibc's own dynamic threshold reaches on 64-bit
TRIM_THRESHOLD_BYTES = 16 << 20


@functools.cache
def tune_malloc() -> bool:
    """Fix glibc's thresholds once per process: blocks up to 32 MiB come from the heap, as glibc's
    dynamic rule settles on anyway, but a heap's free top past 16 MiB goes back to the system.

    The dynamic rule also raises the trim threshold to 64 MiB, and malloc_trim never trims the top of
    a thread's arena, so free memory stayed resident in the worker threads' arenas; these thresholds left
    less, at the same S/M/L latencies (benchmarks/README.md, Memory after a fuzz pass: glibc's malloc thresholds)."""
    mallopt = _libc("mallopt")
    if mallopt is None or any(k.startswith("MALLOC_") or k == "GLIBC_TUNABLES" for k in os.environ):
        return False  # not glibc, or the user tunes malloc: theirs wins
    mmap_set = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    return bool(mmap_set) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))


def _malloc_trim():
    """glibc's malloc_trim, or None. After a free glibc keeps medium blocks in the heap (random edits grew RSS by memory
    that was free inside the process: benchmarks/README.md, Behind the code); trimming once a burst of edits is over and
    its last replaced result is freed hands those pages back."""
    return _libc("malloc_trim")


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.freed = False


PAUSE_KEEP_BYTES = 256 << 20  # free map buffers kept once the edits have paused for a while (core/kernel/buffers.py)


class Reaper:
    """Lets go of replaced results on a background thread, a moment after the GUI is done with them.

    Freeing GiB of maps costs the kernel time (benchmarks/README.md, Behind the code). On the GUI thread that is a
    visible stall; on another thread right after a new result arrived it still stalled the GUI thread. So the newest
    replaced result is held for HOLD_S, and freed early when a newer one replaces it or when flush() asks for its
    memory: at most one extra result is alive, and during fast updates each goes as the next comes.

    The memory itself (free map buffers past PAUSE_KEEP_BYTES, the heap's free pages) goes back to the
    system only once no result has come for IDLE_S more, or on flush(): the next edit writes into it
    again. Given back after every pause of a second, a 30-layer model's next forward at 512 tokens
    mapped its maps and the heap's pages anew, ~80,000 page faults (benchmarks/README.md, Behind the code).
    """

    HOLD_S = 1.0
    IDLE_S = 10.0

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._loop, name="attnviz-reaper", daemon=True).start()

    def drop(self, *objects) -> None:
        self._queue.put(objects)

    def flush(self, timeout: float = 10.0) -> bool:
        """Free what is held now, give the memory back, and wait for it; True if a result was freed."""
        request = _Flush()
        self._queue.put(request)
        request.done.wait(timeout)
        return request.freed

    def _loop(self) -> None:
        lower_priority()
        trim = _malloc_trim()

        def give_back(keep_bytes: int) -> None:
            buffers.release(keep_bytes)
            if trim is not None:  # malloc_trim walks the whole heap under the allocator's locks: not mid-drag
                trim(0)

        held, given_back = None, True
        while True:
            wait = self.HOLD_S if held is not None else None if given_back else self.IDLE_S
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                item = None
            if item is None and held is None:  # no result for IDLE_S after the last one was freed
                give_back(PAUSE_KEEP_BYTES)
                given_back = True
                continue
            freeing = held is not None
            held = item if isinstance(item, tuple) else None  # the previous `held` is freed here
            given_back = given_back and not freeing
            if isinstance(item, _Flush):
                give_back(0)  # a flush wants all the memory back
                given_back = True
                item.freed = freeing
                item.done.set()


class Worker(QObject):
    """Owns a daemon thread. Signals are delivered to GUI-thread slots as queued calls."""

    sigDone = Signal(object)  # Outcome (a generation's partial results too: Outcome.partial)
    sigFailed = Signal(object)  # Failure
    sigBusy = Signal(bool)
    sigCancelled = Signal(int)  # a request id that ended with nothing to show (stopped before its first token)
    sigProgress = Signal(int, int, int)  # request id, attention calls (layers) done, of how many
    sigOpening = Signal(int, str, int, int)  # request id, a model's opening step ("tensors"), done, of how many
    sigExtras = Signal(int, object)  # request id, {name: frames} of its Outcome.late (empty: not computed)
    sigLayers = Signal(int, object, int)  # request id, the finished layers (layer_feed.Layer), of how many

    def __init__(self, compute=run, parent: QObject | None = None):
        super().__init__(parent)
        self._compute = compute
        self._cond = threading.Condition()
        self._pending: Request | None = None
        self._stopping = False
        tune_malloc()  # freed maps go back to the system (the reaper's trim alone misses threads' arenas)
        self.reaper = Reaper()  # frees replaced results (see release)
        self._last: RunResult | None = None  # touched only by the worker thread
        self._last_request: RunConfig | None = None  # the config _last was computed for (files may change it)
        self._pools = PoolCache()  # pooled maps of _last: view-only changes only requantise
        self._zoomer = Zoomer()  # the exact blocks of the last zoom (zoom.py)
        self._running = False  # a thread is serving requests (changed under _cond only)
        self._share = CpuShare()  # cores other programs leave free: sets torch's threads per run
        self.threads_used = 0  # torch threads of the last run (benchmarks report it)
        self._frozen_for: set[tuple[str, str]] = set()  # models whose load was followed by gc.freeze (_freeze_loaded)
        self._window_done = threading.Event()  # clear while the window swaps in and paints a result
        self._window_done.set()
        self._yield_until = 0.0  # monotonic deadline of the current yield
        self._yield_for = 0  # the request id of the result the window is given
        self._cancel_id = 0  # generations of requests up to this id stop (the Stop button)
        # called here, on the worker thread, with each new result before it goes to the window: what the views
        # would otherwise work out on the GUI thread in the swap (the window sets it: views.prepare_labels)
        self.prepare: Callable[[RunResult], None] | None = None
        self._start_thread()

    def _start_thread(self) -> None:
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="attnviz-worker", daemon=True)
        self._thread.start()

    def submit(self, request: Request) -> None:
        """Queue `request` (replacing any pending one). After stop() this starts serving again:
        QApplication.quit() closes the windows, and a script may go on using them."""
        with self._cond:
            self._pending = request  # replaces an older pending request
            self._stopping = False
            if not self._running:  # the old thread has decided to end (under this lock): a new one
                self._start_thread()
            self._cond.notify()

    def release(self, *objects) -> None:
        """Hand over the last references to a replaced result; freed off the calling thread."""
        self.reaper.drop(*objects)

    def stop(self, timeout: float | None = 1.5) -> bool:
        """Ask the thread to finish; True if it ended within `timeout` seconds (None: wait for it).

        A forward in flight is cancelled at its next stage boundary; one torch op cannot be cut short.
        """
        with self._cond:
            self._stopping = True
            self._pending = None
            self._window_done.set()  # a yielding run stops at once
            self._cond.notify()
            thread = self._thread
        if thread is not threading.current_thread():
            thread.join(timeout)
        return not thread.is_alive()

    def cancel(self, request_id: int) -> None:
        """Stop the generation of `request_id` (and older ones) after its current token; what it wrote so far
        comes as its result (Outcome.stopped). A request that has written nothing yet, or a forward (stopped
        within its current layer), ends with sigCancelled."""
        self._cancel_id = max(self._cancel_id, request_id)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _has_newer(self) -> bool:
        with self._cond:
            return self._pending is not None or self._stopping

    def resume(self, request_id: int) -> None:
        """The window has painted (or dropped) the result of `request_id`: when that is the newest
        result delivered, the worker computes again without waiting."""
        if request_id >= self._yield_for:
            self._window_done.set()

    def yielding(self) -> bool:
        """Whether the next stage boundary waits for the window (resume() or YIELD_MAX_S)."""
        return not self._window_done.is_set() and time.monotonic() < self._yield_until

    def _checkpoint(self) -> bool:
        """Between stages: let the window paint first; True when the run should stop (closing)."""
        wait = self._yield_until - time.monotonic()
        if wait > 0 and not self._stopping:
            self._window_done.wait(wait)
        return self._stopping

    def _loop(self) -> None:
        policy = thread_policy()
        lanes = {"quiet": Lane("attnviz-compute", policy.quiet_nice),
                 "busy": Lane("attnviz-compute-shared", policy.busy_nice)}
        self.lanes = lanes
        try:
            self._serve(lanes)
        finally:
            for lane in lanes.values():
                lane.close()

    def _next_request(self) -> Request | None:
        """The newest request, once the window has painted the last result (see YIELD_MAX_S): edits
        made meanwhile replace the pending request. None when stopping."""
        while True:
            with self._cond:
                while self._pending is None and not self._stopping:
                    self._cond.wait()
            self._checkpoint()  # outside the lock: submit() goes on replacing the pending request
            with self._cond:
                if self._stopping:
                    self._running = False  # submit() starts a new thread from now on
                    return None
                if self._pending is not None:
                    request, self._pending = self._pending, None
                    return request

    def _serve(self, lanes: dict[str, Lane]) -> None:
        while True:
            request = self._next_request()
            if request is None:
                return
            self.sigBusy.emit(True)
            try:
                n = self.threads_used = thread_count(self._share, request.config)
                lane = lanes["quiet" if n >= self._share.cores else "busy"]
                lane.call(functools.partial(self._handle, request, n))
            except Cancelled:
                if not self._stopping:  # stopped or superseded: the window learns the request is over
                    self.sigCancelled.emit(request.id)
            except ConfigError as exc:
                self.sigFailed.emit(Failure(request, str(exc), exc.field, exc.suggestions))
            except MemoryError:
                self.sigFailed.emit(Failure(request, "out of memory: the run does not fit; lower the lengths, "
                                                     "heads or batch", "seq_q"))
            except NonFiniteResult as exc:  # said in one line, the last good view kept
                self.sigFailed.emit(Failure(request, str(exc)))
            except Exception as exc:  # the app must survive anything the engine raises
                kind = "out of memory" if "out of memory" in str(exc).lower() else type(exc).__name__
                traceback.print_exc()
                self.sigFailed.emit(Failure(request, f"{kind}: {exc}"))
            finally:
                if not self._has_newer():
                    self.sigBusy.emit(False)

    def _run(self, config: RunConfig, needed: frozenset[str], cancel=None, **stream) -> RunResult:
        # the stages the window's views read (window_record); the pipeline view asks for every stage;
        # a generation streams (on_step)
        extra = {"record": window_record(config, needed)} | stream
        cancel = cancel or self._checkpoint
        try:
            return self._compute(config, cancel=cancel, **extra)
        except MemoryBudgetError:
            # the window hands the result it replaced to the reaper once it has shown the new one
            self._window_done.wait(YIELD_MAX_S)
            if not self.reaper.flush():
                raise
            # a replaced result the reaper was holding made the budget look smaller than it is
            return self._compute(config, cancel=cancel, **extra)

    def _forward_cancel(self, request: Request):
        """Polled between stages and between a long forward's blocks: stop for closing or for Cancel (cancel())."""
        def cancel() -> bool:
            return self._checkpoint() or self._cancel_id >= request.id
        return cancel

    def _progress_of(self, request: Request):
        """progress(done, total) for run(): the layers finished, as sigProgress of this request (the first at
        once, then at most every PROGRESS_INTERVAL_S); with request.layers, a pooled forward's finished layers
        every so often too (sigLayers, layer_feed.py)."""
        feed = LayerFeed() if request.layers else None
        sent_at = -math.inf

        def progress(done: int, total: int, pooled=()) -> None:
            nonlocal sent_at
            now = time.monotonic()
            if now - sent_at >= PROGRESS_INTERVAL_S:
                sent_at = now
                self.sigProgress.emit(request.id, done, total)
            layers = None if feed is None else feed.finished(done, total, pooled)
            if layers is not None:
                self.sigLayers.emit(request.id, layers, total)
        return progress

    def _opening_of(self, request: Request):
        """stages(step, done, total) for run(): a model's opening steps (a GGUF's tensors, its tokenizer) as
        sigOpening of this request, at most every PROGRESS_INTERVAL_S (and each step's last)."""
        sent_at = -math.inf

        def stages(step: str, done: int, total: int) -> None:
            nonlocal sent_at
            now = time.monotonic()
            if now - sent_at >= PROGRESS_INTERVAL_S or done >= total:
                sent_at = now
                self.sigOpening.emit(request.id, step, done, total)
        return stages

    def _zoomed(self, request: Request, needed: frozenset[str]) -> ZoomFrames | None:
        """The request's zoom, from the shown maps or a run that keeps the region exact (progress, Cancel)."""
        if request.zoom is None:
            return None
        plain = Request(request.id, request.config, request.options)  # no layers for the model view: shown
        return self._zoomer.frames(self._last, request.zoom, request.options, lambda region: self._run(
            request.config, needed, cancel=self._forward_cancel(request), progress=self._progress_of(plain),
            region=region))

    # --- generation: streamed partial results, Stop, cancel within one token ---------------------

    def _superseded(self, request: Request) -> bool:
        """A newer request waits that needs another run (not merely another view of this one)."""
        with self._cond:
            pending = self._pending
        return pending is not None and (pending.force or supersedes(pending.config, request.config))

    def _generation_cancel(self, request: Request):
        """Polled between tokens: after the window's paint (the yield), stop for closing, Stop, or a newer run."""
        def cancel() -> bool:
            return self._checkpoint() or self._cancel_id >= request.id or self._superseded(request)
        return cancel

    def _streamer(self, request: Request, latest: dict):
        """on_step for run(): keeps the newest build; at most every PARTIAL_INTERVAL_S builds it, renders it
        and hands it to the window (here, on the worker: the GUI thread never builds or renders)."""
        count = request.config.generate

        def on_step(n: int, build) -> None:
            latest["build"] = build
            if n >= count or time.monotonic() - latest.get("at", -math.inf) < PARTIAL_INTERVAL_S:
                return  # the last token's result is the final one, which follows at once
            partial = build()
            frames = render(partial, request.options, PoolCache(), render_extras)  # its own cache: a new result
            self._deliver(Outcome(request, partial, frames, True, 0.0, partial=True,
                                  generated=(written(partial), count)), PARTIAL_YIELD_MAX_S)
            # The window swaps it in and paints now: the next token waits for that. Computed meanwhile, the
            # model's Python held the GIL against every Python call of the paint (benchmarks/README.md, Behind the
            # code).
            self._checkpoint()
            latest["at"] = time.monotonic()  # the interval runs from this delivery
        return on_step

    def _generate(self, request: Request, needed: frozenset[str]) -> tuple[RunResult, bool]:
        """Run a generation, streaming partial results; (result, stopped). Stop keeps what was written."""
        latest: dict = {}
        try:
            result = self._run(request.config, needed, cancel=self._generation_cancel(request),
                               on_step=self._streamer(request, latest))
            return result, False
        except Cancelled:
            if self._stopping or self._cancel_id < request.id or self._superseded(request) or "build" not in latest:
                raise
            return latest["build"](), True

    def _deliver(self, outcome: Outcome, hold_s: float | None = None) -> None:
        """Hand a result to the window; the next stage boundary (or token) yields till it is painted (at most
        hold_s, default YIELD_MAX_S)."""
        hold_s = YIELD_MAX_S if hold_s is None else hold_s
        self._yield_for, self._yield_until = outcome.request.id, time.monotonic() + hold_s
        self._window_done.clear()  # the window swaps this in and paints: the next run yields to it
        self.sigDone.emit(outcome)

    def _stale(self, request: Request, needed: frozenset[str]) -> bool:
        """Whether the last result cannot show the request's config (a model-backed result is kept by its
        forward's config, since its own config holds the shapes the model gave it)."""
        last, config = self._last, request.config
        if last is None or request.force or not producible(needed, last.source) <= last.stages.keys():
            return True
        if last.source is not None:
            return not (last.source.serves(config) and last.config.layer == config.layer)
        if any(record.changed() for record in last.files):  # a weights or inputs file saved again
            return True
        # the files set batch, lengths and bias flags: the config as sent, or as the panel shows it after
        return config not in (last.config, self._last_request)

    def _from_source(self, config: RunConfig, needed: frozenset[str]) -> RunResult | None:
        """Another layer of the last model forward (changing the layer never runs the model again)."""
        source = self._last.source if self._last is not None else None
        if source is None or not source.serves(config) or not producible(needed, source) <= source.stages.keys():
            return None
        if not producible(needed, source) <= source.kept(config.layer):  # a long pooled forward keeps its per-token
            return None  # stages for the layer it ran for only: a view that reads them there runs it again
        return source.result(config.layer)

    def _handle(self, request: Request, threads: int) -> None:
        """On a lane: compute (with `threads` torch threads) if the config changed, then render."""
        set_torch_threads(threads)
        t0 = time.perf_counter()
        stage = view_stage(request.options.view)
        require_stage(request.config, stage)
        needed = needed_stages(request.config, request.options)
        recomputed, stopped = self._stale(request, needed), False
        if recomputed:
            reused = None if request.force else self._from_source(request.config, needed)  # a model's other layer
            self._last = None  # free the old maps before allocating new ones
            self._pools.clear()
            if reused is None and generating(request.config) and request.force:
                reused, stopped = self._generate(request, needed)
            # a generation's view that its result cannot serve (a panel reading more): the plain forward
            plain = request.config if request.force else request.config.replace(generate=0)
            self._last = reused or self._run(plain, needed, cancel=self._forward_cancel(request),
                                             progress=self._progress_of(request), stages=self._opening_of(request))
            self._last_request = request.config
            self._freeze_loaded(request.config)
            self._zoomer.keep_for(self._last)
        require_kept(self._last, stage)  # a model records what its family exposes (weights only for some)
        zoom = self._zoomed(request, needed)
        if self._checkpoint():
            return
        late = late_names(self._last, request.options) if recomputed else frozenset()
        frames = render(self._last, request.options, self._pools, early_extras(late))
        if self._stopping:
            return
        if recomputed and self.prepare is not None:
            self.prepare(self._last)
        asked = request.config.generate if generating(request.config) and self._last.prompt_length is not None else 0
        self._deliver(Outcome(request, self._last, frames, recomputed, time.perf_counter() - t0,
                              generated=(written(self._last), asked) if asked else None, stopped=stopped, zoom=zoom,
                              late=late), LATE_YIELD_MAX_S if late else None)
        if late:
            self._send_late(request, late)

    def _freeze_loaded(self, config: RunConfig) -> None:
        """After a model's first forward (it loads then): what is alive leaves the garbage collector's full
        passes, as the window's start-up does. A full pass over a loaded model and transformers' modules held the
        GIL long enough to be the window's longest stalls (benchmarks/README.md, Behind the code, ui/head_effects)."""
        loaded = (config.variant, config.model)
        if config.spec.backed and loaded not in self._frozen_for:
            self._frozen_for.add(loaded)
            gc.freeze()

    def _send_late(self, request: Request, late: frozenset[str]) -> None:
        """The late extras of the result just delivered, once the window has painted its maps (or the yield ran
        out); empty when a newer request makes them pointless (its own run brings its own)."""
        if self._checkpoint():
            return
        extras = {} if self._has_newer() else late_frames(self._last, request.options, self._pools, late)
        if not self._stopping:
            self.sigExtras.emit(request.id, extras)
