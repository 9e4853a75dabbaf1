"""A request and its outcome: what the window asks for (a config and how to show it) and what comes back, and
which stages a request's run keeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnviz.core import RunConfig, RunResult, run
from attnviz.core.kernel.stages import ALL_STAGES, DEFAULT_RECORD
from attnviz.core.runs.backed import backed_stages
from attnviz.core.runs.runner import run_stages
from attnviz.frames import Frames, ViewOptions, view_stage


@dataclass(frozen=True)
class Request:
    id: int
    config: RunConfig
    options: ViewOptions | None  # None: no view, the result alone (a caller that checks and draws it itself: the CLI)
    force: bool = False  # compute again even if the last result shows this config (Generate pressed again)
    zoom: Any = None  # also the exact block of a region of the shown maps: what the session's zoomer reads
    layers: bool = False  # a long pooled forward hands its finished layers on (Events.layers) for the model view
    record: frozenset[str] | None = None  # the stages the run keeps (None: what the views read, window_record)
    region: tuple[int, int, int, int] | None = None  # (q0, q1, k0, k1): a pooled run keeps that exact block (run())


@dataclass
class Outcome:
    request: Request
    result: RunResult
    frames: Frames | None  # None for a request without options
    recomputed: bool
    worker_time_s: float
    partial: bool = False  # a generation still running: what it wrote so far (the final Outcome follows)
    generated: tuple[int, int] | None = None  # a generation: (tokens written, tokens asked for)
    stopped: bool = False  # a generation the Stop button ended: what it wrote till then
    zoom: Any = None  # the request's zoom: every head of the block, exact (the zoomer's frames)
    late: frozenset[str] = frozenset()  # extras left out of frames (present.late_names): Events.extras brings them


@dataclass
class Failure:
    request: Request
    message: str
    field: str | None = None
    suggestions: tuple = ()
    error: BaseException | None = None  # the exception it was made from: a script maps it to its own exit status


def generating(config: RunConfig) -> bool:
    """Whether `config`'s run writes tokens after its text (a model-backed or toy variant with generate > 0)."""
    return config.generate > 0 and config.applies("generate")


def supersedes(new: RunConfig | None, running: RunConfig) -> bool:
    """Whether a request for `new` (None: an invalid edit) makes a running generation of `running` pointless:
    any change but the layer shown (a view of the same forward) and view options (not in the config)."""
    return new is None or new.replace(layer=running.layer) != running


def needed_stages(config: RunConfig, options: ViewOptions | None) -> frozenset[str]:
    """The stages a request's views read: the map view's stage, and every stage this configuration
    has while the pipeline view is shown (only then: a full trace costs memory); none without options."""
    if options is None:
        return frozenset()
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
    some out (window_record). A pooled run's, a generation's or a file's stays as it is. Off the GUI thread only."""
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
