"""The session: requests in, outcomes out. It computes runs and display-ready frames off the GUI thread.

Latest request wins: `submit` replaces any request still pending, so a burst of changes costs one run per
finished computation, never a queue. Every finished request is reported with its id (Events.done); the window
drops ids older than what it already shows. A request whose config equals the last computed one only re-renders
(view-only changes never recompute). Its clock, its lanes (the executor) and its events are handed to it; with
sync=True (or inside force_sync()) submit() handles the request before it returns, on its lanes, the caller
waiting: how a script or a test drives it.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from attnviz.core import ConfigError, RunConfig, RunResult, run
from attnviz.core.runs.runner import Cancelled, MemoryBudgetError, NonFiniteResult, require_kept, require_stage
from attnviz.frames import PoolCache, view_stage
from attnviz.session.cpushare import CpuShare
from attnviz.session.lanes import Lane, policy_lanes
from attnviz.session.latest import LatestWins
from attnviz.session.memory import FreezeOnLoad, Reaper, tune_malloc
from attnviz.session.pacing import PaintWait
from attnviz.session.present import late_frames, late_names, present
from attnviz.session.request import (
    Failure,
    Outcome,
    Request,
    generating,
    needed_stages,
    producible,
    supersedes,
    window_record,
)
from attnviz.session.threads import lane_name, thread_count
from attnviz.system import set_torch_threads

# After delivering a result the session yields to the window while it swaps the result in and paints it
# (pacing.py): the next request waits at its start and at each stage boundary, at most this long per result.
YIELD_MAX_S = 0.05
# A result whose late extras follow (Outcome.late) waits for the window's paint at most this long before the
# session computes them: a long input's maps take the window a while to swap in (every token's label;
# benchmarks/README.md, Behind the code), and the logits' Python, started after YIELD_MAX_S, took the GIL from it
# between its Qt calls (a 4,096-token run's longest stall).
LATE_YIELD_MAX_S = 0.5
# A generation's partial results: at most one per this interval (each costs a build and a render on the
# session's thread and a swap and paint on the GUI thread); the final result always follows.
PARTIAL_INTERVAL_S = 0.05
# After a partial result the generation waits for the window to paint it, at most this long: its swap takes
# two event-loop passes and with a large model's views (tensor, every layer's tiles) outlasted YIELD_MAX_S.
PARTIAL_YIELD_MAX_S = 0.2
# A model forward's busy bar ("layer 12 / 30"): its first layer at once (Stop applies from then), then at most
# this often. One signal per layer slowed a 30-layer forward (benchmarks/README.md, Behind the code): each a queued
# call, a slot and a repaint of the bar on the GUI thread, whose Python took the GIL from the forward's between its ops.
PROGRESS_INTERVAL_S = 0.2


def _ignore(*_args) -> None:
    pass


def _print_traceback(exc: BaseException) -> None:
    traceback.print_exception(exc)


@dataclass
class Events:
    """What the session reports, each called on the session's side (a lane or its thread); the window's adapter
    (ui/window/worker.py) emits a Qt signal for each."""

    done: Callable[[Outcome], None] = _ignore  # an outcome (a generation's partial ones too: Outcome.partial)
    failed: Callable[[Failure], None] = _ignore
    busy: Callable[[bool], None] = _ignore  # computing; False once nothing newer waits
    cancelled: Callable[[int], None] = _ignore  # a request that ended with nothing to show (Stop before any token)
    progress: Callable[[int, int, int], None] = _ignore  # request id, attention calls (layers) done, of how many
    opening: Callable[[int, str, int, int], None] = _ignore  # request id, a model's opening step, done, of how many
    extras: Callable[[int, dict], None] = _ignore  # request id, {name: frames} of its Outcome.late ({}: not made)
    layers: Callable[[int, object, int], None] = _ignore  # request id, a pooled forward's finished layers, of how many
    # an exception no rule of failure_of names, before its Failure: its traceback, for a bug report (the CLI prints
    # none: one line)
    unexpected: Callable[[BaseException], None] = _print_traceback


def failure_of(request: Request, exc: Exception, unexpected: Callable[[BaseException], None] = _ignore) -> Failure:
    """The one-line failure a request's exception becomes (the last good view stays); `unexpected` hears an
    exception no rule here names."""
    if isinstance(exc, ConfigError):
        return Failure(request, str(exc), exc.field, exc.suggestions, exc)
    if isinstance(exc, MemoryError):
        return Failure(request, "out of memory: the run does not fit; lower the lengths, heads or batch", "seq_q",
                       error=exc)
    if isinstance(exc, NonFiniteResult):
        return Failure(request, str(exc), error=exc)
    kind = "out of memory" if "out of memory" in str(exc).lower() else type(exc).__name__
    unexpected(exc)  # anything else the engine raises: said, and the app survives it
    return Failure(request, f"{kind}: {exc}", error=exc)


class Session:
    """The request path: a latest-wins queue served by one thread (or the caller, sync), each request's forward
    on a lane of the thread policy, its outcome presented and reported through `events`.

    compute: run(config, **kwargs) (the engine, or a test's stand-in); share: the cores other programs leave
    (cpushare); lanes: makes the executor ({"quiet": Lane, "busy": Lane}); clock: monotonic seconds; zoomer and
    feed: the window's zoom (frames(result, ask, options, run), keep_for(result)) and its model view's feed of
    finished layers (feed() -> finished(done, total)), none for a session without a window; threads: the torch
    threads of a request's forward, threads(share, config) (threads.py: the thread policy, or as_is)."""

    def __init__(self, compute=run, events: Events | None = None, *, share=None,
                 lanes: Callable[[], dict[str, Lane]] = policy_lanes, clock: Callable[[], float] = time.monotonic,
                 zoomer=None, feed=None, sync: bool = False, threads=thread_count) -> None:
        self._compute, self.events = compute, events or Events()
        self._clock, self._make_lanes, self._sync, self._threads = clock, lanes, sync, threads
        self._queue, self._paint = LatestWins(), PaintWait(clock)
        tune_malloc()  # freed maps go back to the system (the reaper's trim alone misses threads' arenas)
        self.reaper = Reaper(clock)  # frees replaced results (see release)
        self.share = share or CpuShare()
        self.threads_used = 0  # torch threads of the last run (benchmarks report it)
        self.lanes: dict[str, Lane] | None = None  # the lanes the serving thread (or sync mode) runs forwards on
        self._last: RunResult | None = None  # touched only while handling a request
        self._last_request: RunConfig | None = None  # the config _last was computed for (files may change it)
        self._pools = PoolCache()  # pooled maps of _last: view-only changes only requantise
        self._zoomer, self._feed = zoomer, feed
        self._freezer = FreezeOnLoad()
        self._cancel_id = 0  # generations of requests up to this id stop (the Stop button)
        self._sync_lock = threading.Lock()
        self._sync_lanes: dict[str, Lane] | None = None  # sync mode's own lanes (made at its first request)
        self._thread: threading.Thread | None = None
        # called with each new result before it goes to the window: what the views would otherwise work out on
        # the GUI thread in the swap (the window sets it: views.prepare_labels)
        self.prepare: Callable[[RunResult], None] | None = None
        if not sync:
            self._queue.serve()
            self._start_thread()

    # --- the public seams ------------------------------------------------------------------------

    def submit(self, request: Request) -> None:
        """Queue `request` (replacing any pending one); in sync mode handle it now. After stop() this starts
        serving again: QApplication.quit() closes the windows, and a script may go on using them."""
        if self._sync:  # past the queue: a serving thread (force_sync) must not take it
            with self._sync_lock:
                self._queue.reopen()
                self.lanes = self._sync_lanes = self._sync_lanes or self._make_lanes()
                self._serve(request, self._sync_lanes)
            return
        if self._queue.put(request):  # the old thread has decided to end: a new one
            self._start_thread()

    @contextlib.contextmanager
    def force_sync(self):
        """Inside, submit() handles each request before it returns (napari's slicer.force_sync), on lanes of the
        sync mode's own; the queue is drained first."""
        self.wait_idle()
        was, self._sync = self._sync, True
        try:
            yield self
        finally:
            self._sync = was

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """Wait until every request submitted so far is handled (its outcome or failure reported); False if
        `timeout` passed first."""
        return self._queue.wait_idle(timeout)

    def release(self, *objects) -> None:
        """Hand over the last references to a replaced result; freed off the calling thread."""
        self.reaper.drop(*objects)

    def cancel(self, request_id: int) -> None:
        """Stop the generation of `request_id` (and older ones) after its current token; what it wrote so far
        comes as its result (Outcome.stopped). A request that has written nothing yet, or a forward (stopped
        within its current layer), ends with Events.cancelled."""
        self._cancel_id = max(self._cancel_id, request_id)

    def resume(self, request_id: int) -> None:
        """The window has painted (or dropped) the result of `request_id`: when that is the newest
        result delivered, the session computes again without waiting."""
        self._paint.resume(request_id)

    def yielding(self) -> bool:
        """Whether the next stage boundary waits for the window (resume() or YIELD_MAX_S)."""
        return self._paint.waiting()

    @property
    def stopping(self) -> bool:
        """stop() was called and no request came since."""
        return self._queue.stopping

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float | None = 1.5) -> bool:
        """Ask the serving thread to finish; True if it ended within `timeout` seconds (None: wait for it).
        A forward in flight is cancelled at its next stage boundary; one torch op cannot be cut short."""
        self._queue.stop()
        self._paint.release()  # a yielding run stops at once
        lanes, self._sync_lanes = self._sync_lanes or {}, None  # each ends after the job it runs now
        for lane in lanes.values():
            lane.close()
        thread = self._thread
        if thread is None:
            return True
        if thread is not threading.current_thread():
            thread.join(timeout)
        return not thread.is_alive()

    # --- serving ----------------------------------------------------------------------------------

    def _start_thread(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="attnviz-worker", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        lanes = self.lanes = self._make_lanes()
        try:
            while (request := self._next_request()) is not None:
                self._serve(request, lanes)
        finally:
            for lane in lanes.values():
                lane.close()

    def _next_request(self) -> Request | None:
        """The newest request, once the window has painted the last result (see YIELD_MAX_S): edits
        made meanwhile replace the pending request. None when stopping."""
        self._queue.wait()
        self._checkpoint()  # outside the queue's lock: submit() goes on replacing the pending request
        return self._queue.take()

    def _serve(self, request: Request, lanes: dict[str, Lane]) -> None:
        self.events.busy(True)
        try:
            n = self.threads_used = self._threads(self.share, request.config)
            lanes[lane_name(n, self.share.cores)].call(functools.partial(self._handle, request, n))
        except Cancelled:
            if not self._queue.stopping:  # stopped or superseded: the window learns the request is over
                self.events.cancelled(request.id)
        except Exception as exc:  # MemoryError included: the app must survive anything the engine raises
            self.events.failed(failure_of(request, exc, self.events.unexpected))
        finally:
            if not self._queue.has_newer():
                self.events.busy(False)
            self._queue.finished()

    def _checkpoint(self) -> bool:
        """Between stages: let the window paint first; True when the run should stop (closing)."""
        if not self._queue.stopping:
            self._paint.wait()
        return self._queue.stopping

    def _deliver(self, outcome: Outcome, hold_s: float | None = None) -> None:
        """Hand a result to the window; the next stage boundary (or token) yields till it is painted (at most
        hold_s, default YIELD_MAX_S). A sync session never waits for a paint."""
        if not self._sync:
            self._paint.hold(outcome.request.id, YIELD_MAX_S if hold_s is None else hold_s)
        self.events.done(outcome)

    # --- one request ------------------------------------------------------------------------------

    def _handle(self, request: Request, threads: int) -> None:
        """On a lane: compute (with `threads` torch threads) if the config changed, then present (a request without
        options: the result alone, its caller checks and draws it)."""
        set_torch_threads(threads)
        t0 = time.perf_counter()
        options = request.options
        stage = None if options is None else view_stage(options.view)
        if stage is not None:
            require_stage(request.config, stage)
        needed = needed_stages(request.config, options)
        recomputed = self._stale(request, needed)
        stopped = recomputed and self._recompute(request, needed)
        if stage is not None:
            require_kept(self._last, stage)  # a model records what its family exposes (weights only for some)
        zoom = self._zoomed(request, needed)
        if self._checkpoint():
            return
        late = late_names(self._last, options) if recomputed and options is not None else frozenset()
        frames = None if options is None else present(self._last, options, self._pools, late)
        if self._queue.stopping:
            return
        if recomputed and self.prepare is not None:
            self.prepare(self._last)
        asked = request.config.generate if generating(request.config) and self._last.prompt_length is not None else 0
        self._deliver(Outcome(request, self._last, frames, recomputed, time.perf_counter() - t0,
                              generated=(self._last.generated_count, asked) if asked else None, stopped=stopped,
                              zoom=zoom, late=late), LATE_YIELD_MAX_S if late else None)
        if late:
            self._send_late(request, late)

    def _recompute(self, request: Request, needed: frozenset[str]) -> bool:
        """Make the result `request` shows (another layer of the last model forward, a generation, or a run);
        True when it is a generation that Stop ended."""
        reused = None if request.force else self._from_source(request.config, needed)  # a model's other layer
        self._last = None  # free the old maps before allocating new ones
        self._pools.clear()
        stopped = False
        if reused is None and generating(request.config) and request.force:
            reused, stopped = self._generate(request, needed)
        # a generation's view that its result cannot serve (a panel reading more): the plain forward
        plain = request.config if request.force else request.config.replace(generate=0)
        self._last = reused or self._run(plain, needed, cancel=self._forward_cancel(request), record=request.record,
                                         region=request.region, progress=self._progress_of(request),
                                         stages=self._opening_of(request))
        self._last_request = request.config
        self._freezer.after(request.config)
        if self._zoomer is not None:
            self._zoomer.keep_for(self._last)
        return stopped

    def _run(self, config: RunConfig, needed: frozenset[str], cancel=None, record=None, **stream) -> RunResult:
        # the request's record, or the stages the window's views read (window_record; the pipeline view asks for
        # every stage); a generation streams (on_step)
        extra = {"record": window_record(config, needed) if record is None else record} | stream
        cancel = cancel or self._checkpoint
        try:
            return self._compute(config, cancel=cancel, **extra)
        except MemoryBudgetError:
            # the window hands the result it replaced to the reaper once it has shown the new one
            self._paint.wait(YIELD_MAX_S)
            if not self.reaper.flush():
                raise
            # a replaced result the reaper was holding made the budget look smaller than it is
            return self._compute(config, cancel=cancel, **extra)

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

    def _send_late(self, request: Request, late: frozenset[str]) -> None:
        """The late extras of the result just delivered, once the window has painted its maps (or the yield ran
        out); empty when a newer request makes them pointless (its own run brings its own)."""
        if self._checkpoint():
            return
        extras = {} if self._queue.has_newer() else late_frames(self._last, request.options, self._pools, late)
        if not self._queue.stopping:
            self.events.extras(request.id, extras)

    def _zoomed(self, request: Request, needed: frozenset[str]):
        """The request's zoom, from the shown maps or a run that keeps the region exact (progress, Cancel)."""
        if request.zoom is None or self._zoomer is None:
            return None
        plain = Request(request.id, request.config, request.options)  # no layers for the model view: shown
        return self._zoomer.frames(self._last, request.zoom, request.options, lambda region: self._run(
            request.config, needed, cancel=self._forward_cancel(request), progress=self._progress_of(plain),
            region=region))

    # --- what a run reports as it goes --------------------------------------------------------------

    def _forward_cancel(self, request: Request):
        """Polled between stages and between a long forward's blocks: stop for closing or for Cancel (cancel())."""
        def cancel() -> bool:
            return self._checkpoint() or self._cancel_id >= request.id
        return cancel

    def _progress_of(self, request: Request):
        """progress(done, total, pooled) for run(): the layers finished, as Events.progress of this request (the
        first at once, then at most every PROGRESS_INTERVAL_S); with request.layers, a pooled forward's finished
        layers every so often too (Events.layers, from the feed)."""
        feed = self._feed() if request.layers and self._feed is not None else None
        sent_at = -math.inf

        def progress(done: int, total: int, pooled=()) -> None:
            nonlocal sent_at
            now = self._clock()
            if now - sent_at >= PROGRESS_INTERVAL_S:
                sent_at = now
                self.events.progress(request.id, done, total)
            layers = None if feed is None else feed.finished(done, total, pooled)
            if layers is not None:
                self.events.layers(request.id, layers, total)
        return progress

    def _opening_of(self, request: Request):
        """stages(step, done, total) for run(): a model's opening steps (a GGUF's tensors, its tokenizer) as
        Events.opening of this request, at most every PROGRESS_INTERVAL_S (and each step's last)."""
        sent_at = -math.inf

        def stages(step: str, done: int, total: int) -> None:
            nonlocal sent_at
            now = self._clock()
            if now - sent_at >= PROGRESS_INTERVAL_S or done >= total:
                sent_at = now
                self.events.opening(request.id, step, done, total)
        return stages

    # --- generation: streamed partial results, Stop, cancel within one token ---------------------

    def _superseded(self, request: Request) -> bool:
        """A newer request waits that needs another run (not merely another view of this one)."""
        pending = self._queue.peek()
        return pending is not None and (pending.force or supersedes(pending.config, request.config))

    def _generation_cancel(self, request: Request):
        """Polled between tokens: after the window's paint (the yield), stop for closing, Stop, or a newer run."""
        def cancel() -> bool:
            return self._checkpoint() or self._cancel_id >= request.id or self._superseded(request)
        return cancel

    def _streamer(self, request: Request, latest: dict):
        """on_step for run(): keeps the newest build; at most every PARTIAL_INTERVAL_S builds it, presents it
        and hands it to the window (here, off the GUI thread: the GUI thread never builds or renders)."""
        count = request.config.generate

        def on_step(n: int, build) -> None:
            latest["build"] = build
            if (request.options is None or n >= count
                    or self._clock() - latest.get("at", -math.inf) < PARTIAL_INTERVAL_S):
                return  # no view to show it in; the last token's result is the final one, which follows at once
            partial = build()
            frames = present(partial, request.options)  # its own cache: a new result
            self._deliver(Outcome(request, partial, frames, True, 0.0, partial=True,
                                  generated=(partial.generated_count, count)), PARTIAL_YIELD_MAX_S)
            # The window swaps it in and paints now: the next token waits for that. Computed meanwhile, the
            # model's Python held the GIL against every Python call of the paint (benchmarks/README.md, Behind the
            # code).
            self._checkpoint()
            latest["at"] = self._clock()  # the interval runs from this delivery
        return on_step

    def _generate(self, request: Request, needed: frozenset[str]) -> tuple[RunResult, bool]:
        """Run a generation, streaming partial results; (result, stopped). Stop keeps what was written."""
        latest: dict = {}
        try:
            result = self._run(request.config, needed, cancel=self._generation_cancel(request), record=request.record,
                               region=request.region, on_step=self._streamer(request, latest))
            return result, False
        except Cancelled:
            if (self._queue.stopping or self._cancel_id < request.id or self._superseded(request)
                    or "build" not in latest):
                raise
            return latest["build"](), True
