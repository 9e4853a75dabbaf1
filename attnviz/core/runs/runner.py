"""config -> result: seeding, device, dtype, memory check, the traced forward, timings."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import Tensor

from attnviz.core.kernel.context import ForwardContext
from attnviz.core.kernel.masks import build_kind
from attnviz.core.kernel.pooling import (
    Pooling,
    fitting_target,
    pool_note,
    pooled_parts,
)
from attnviz.core.kernel.progress import Watch
from attnviz.core.kernel.stages import (
    ALWAYS_KEPT,
    BY_NAME,
    DEFAULT_RECORD,
    DIFFERENTIAL,
    ROTATION,
    SCORE_MOD,
    STAGE_NAMES,
    stages_made_by,
)
from attnviz.core.runs.backed import ablation_plan, backed_stages, check_region, run_forward
from attnviz.core.runs.config import ConfigError, RunConfig
from attnviz.core.runs.device import MemoryBudgetError, format_bytes, resolve_device, to_numpy
from attnviz.core.runs.drawn import drawn
from attnviz.core.runs.memory import (
    memory_allowance,
    over_budget,
    pooled_seed_bytes,
    pools,
    result_bytes,
    seed_bytes,
    seed_map_bytes,
)
from attnviz.core.runs.result import Cancelled, NonFiniteResult, RunResult  # noqa: F401 - runner's importers catch NonFiniteResult
from attnviz.core.runs.scalars import to_int
from attnviz.core.runs.userfiles import prepare

SLOW_CPU_DTYPES = ("float16", "bfloat16")


def build_mask(config: RunConfig, device: torch.device | None = None) -> Tensor | None:
    """The config's mask as bool (True = may attend), broadcastable to (B, H, Lq, Lkv)."""
    c = config
    return build_kind(c.mask, c.batch, c.seq_q, c.lkv, window=c.window, sinks=c.sinks if c.applies("sinks") else 0,
                      kv_lengths=c.kv_lengths_per_item() if c.applies("kv_lengths") else (), device=device)


def run_stages(config: RunConfig) -> list[str]:
    """The stages this configuration produces, in pipeline order (what a full trace would hold)."""
    if config.spec.backed:
        return backed_stages()
    options = config.attention_options()
    absent = set()
    if options.rotate() is None:
        absent |= stages_made_by(ROTATION)
    produced = {mod.stage for mod in options.score_mods(config.heads)}
    absent |= stages_made_by(SCORE_MOD) - produced
    if config.spec.head_factor == 1:
        absent |= stages_made_by(DIFFERENTIAL)
    else:  # a differential head's output mixes two maps: no one map to weight by its values
        absent.add("value_weighted")
    return [name for name in STAGE_NAMES if name not in absent]


def estimate_memory(config: RunConfig, keep: frozenset[str] | None = None) -> int:
    """Bytes the run needs at its peak (memory.seed_bytes of the stages it keeps: by default, those it records)."""
    return seed_bytes(config, recorded_stages(config) if keep is None else keep)


def result_memory(config: RunConfig, keep: frozenset[str] | None = None) -> int:
    """Bytes of the float32 RunResult in host memory (memory.result_bytes): a CUDA run copies it back."""
    return result_bytes(config, recorded_stages(config) if keep is None else keep)


def estimate_flops(config: RunConfig) -> int:
    """Floating-point operations of the forward's matrix products (2 per multiply-add): the four
    projections and the two attention products (scores and weights @ V)."""
    c = config
    width = getattr(c, c.spec.head_width)  # Q's width, and the output's
    kv_width = c.head_dim * c.spec.head_factor * c.kv_head_count
    key_in = c.d_cross if c.applies("d_cross") else c.d_model
    projections = c.seq_q * c.d_model * width + 2 * c.lkv * key_in * kv_width + c.seq_q * width * width
    attention = 2 * c.heads * c.spec.head_factor * c.seq_q * c.lkv * c.head_dim
    return 2 * c.batch * (projections + attention)


def shortened(config: RunConfig, length: int) -> RunConfig:
    """`config` with both lengths at most `length`, still valid for its mask: padding lengths are
    clipped to the new key length (what the quick fix in the app and the CLI's advice do)."""
    lq, lkv = min(config.seq_q, length), min(config.seq_kv, length)
    if not config.applies("kv_lengths"):
        return replace(config, seq_q=lq, seq_kv=lkv)
    keys = lkv if config.spec.cross else lq
    return replace(config, seq_q=lq, seq_kv=lkv, kv_lengths=tuple(min(n, keys) for n in config.kv_lengths))


def check_memory(config: RunConfig, device: torch.device, budget: int | None = None,
                 keep: frozenset[str] | None = None) -> int:
    """Raise MemoryBudgetError when the run does not fit; return the estimate for `device`.

    On CUDA the float32 result is also copied to the CPU, so host memory must hold it too; an
    explicit `budget` then applies to both. The quick fix is the longest length that fits both.
    """
    limits = [(lambda c: estimate_memory(c, keep), device, "this run needs")]
    if device.type == "cuda":
        limits.append((lambda c: result_memory(c, keep), torch.device("cpu"), "its result, copied to the CPU, needs"))
    checks = []
    for estimate, where, what in limits:
        allowed, source = memory_allowance(budget, where)
        checks.append((estimate, allowed, what, source))

    def fits(c: RunConfig) -> bool:
        return all(estimate(c) <= allowed for estimate, allowed, _, _ in checks)

    if fits(config):
        return estimate_memory(config, keep)
    estimate, allowed, what, source = next(c for c in checks if c[0](config) > c[1])
    over = (f"not enough memory: {what} about {format_bytes(estimate(config))} ({config.shapes_text()}), over the "
            f"budget of {format_bytes(allowed)} ({source})")

    def at(length: int) -> RunConfig:
        return shortened(config, length)

    if not fits(at(1)):  # the widths alone are too big: shorter sequences cannot help
        raise MemoryBudgetError("d_model", config.d_model, over, "use smaller widths (d_model, d_out, d_cross)")
    lo, hi = 1, max(config.seq_q, config.lkv)  # the longest length that fits, by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(at(mid)) else (lo, mid - 1)
    longer = "seq_kv" if config.lkv > config.seq_q else "seq_q"  # the length to blame: the one that is over
    clip = f", with kv_lengths at most {lo}" if config.applies("kv_lengths") else ""
    raise MemoryBudgetError(longer, getattr(config, longer), over,
                            f"use lengths of {lo} or less{clip}, or fewer heads or batch items", suggestions=(lo,))


def _seed(seed: int, device: torch.device) -> None:
    """torch.manual_seed(seed) as the seed scripts call it, for the generators this run draws from.
    On the CPU only the CPU generator: manual_seed also seeds every CUDA device, and before CUDA
    starts that records a stack trace per call (benchmarks/README.md, Behind the code)."""
    if device.type == "cuda":
        torch.manual_seed(seed)  # dropout on the GPU draws from its generator
    else:
        torch.default_generator.manual_seed(seed)


def run(
    config: RunConfig, *, memory_budget: int | None = None, cancel: Callable[[], bool] | None = None,
    record: Iterable[str] | None = None, on_step: Callable[[int, Callable[[], RunResult]], None] | None = None,
    region: tuple[int, int, int, int] | None = None, progress: Callable[[int, int], None] | None = None,
    stages: Callable[[str, int, int], None] | None = None,
) -> RunResult:
    """Build the variant's module and inputs from the seed, run the traced forward, return NumPy.

    Same config -> bit-identical result on the CPU. Weights then inputs are drawn in the seed scripts' order
    (manual_seed, build the module, torch.randn for each input), on the CPU, then moved, so the CPU numbers do not
    depend on the device asked for. `record`: the stages to keep (default: what the views read, DEFAULT_RECORD);
    stages this configuration does not produce are skipped. `cancel` is polled between stages (a single torch op
    cannot be interrupted); when it returns True the run stops with Cancelled. A model-backed variant (spec.load
    set, see backed.py) runs its model on config.text instead and returns config.layer's result; result.source then
    holds every layer. With config.generate it writes that many tokens; on_step(tokens so far, build) is called
    after each, build() giving the RunResult of what has run so far (assembling it costs: call it only as often as
    it is shown). Long runs pool their maps (config.pool, pooling.py): result.pool_factor says by how much,
    result.exact_stats holds the per-head statistics of the exact maps, and `region` (q0, q1, k0, k1) keeps that
    block of the exact map as result.region. progress(attention calls done, of how many, the finished calls'
    pooling.PooledCall: a tuple, empty unless the maps are pooled) is called after each (a model: one per layer),
    and `cancel` is also polled between the blocks of a call (progress.py). stages(step, done, total) hears a
    model's opening steps (a GGUF: "tensors", 12, 272).
    """

    record, region = checked_arguments(record, region)
    if config.spec.read is not None:  # maps opened from a file: read as they were saved, nothing computed
        return config.spec.read(config)
    if config.spec.backed:  # a trained model: one forward over every layer, this config's layer returned
        stream = None if on_step is None else (lambda n, build: on_step(n, lambda: build().result(config.layer)))
        return run_forward(config, memory_budget=memory_budget, cancel=cancel, record=record,
                           on_step=stream, region=region, progress=progress, stages=stages).result(config.layer)
    return _run_seed(config, memory_budget, cancel, record, region, progress)


def _run_seed(config: RunConfig, memory_budget: int | None, cancel: Callable[[], bool] | None,
              record: frozenset[str] | None, region: tuple[int, int, int, int] | None,
              progress: Callable | None) -> RunResult:
    """run() of a seed variant: its module built from the seed, one forward under its ForwardContext."""
    started = time.perf_counter()
    files = prepare(config)  # your own weights and inputs (cached reads); the config takes their shapes
    config = files.config
    device = resolve_device(config.device)
    keep, pool = _planned(config, device, memory_budget, record, region)
    cuda_devices = [device.index or 0] if device.type == "cuda" else []
    report = None if progress is None else (lambda n: progress(n, 1, () if pool is None else tuple(pool.calls)))
    with torch.random.fork_rng(devices=cuda_devices), torch.inference_mode():
        with ForwardContext(plan=_seed_plan(config), pooling=pool, watch=Watch(cancel, report)) as ctx:
            trace, compute = _seed_forward(config, files, device, keep, ctx)
        if pool is not None:
            stages, allowed, rows, pooled = pooled_parts(_stage_arrays(trace), pool.calls[0], config.heads)
        else:
            stages, allowed, pooled = _stage_arrays(trace), to_numpy(trace.mask), {}
            rows = np.broadcast_to(~allowed.any(-1), (config.batch, config.heads, config.seq_q)).copy()  # NumPy:
            # torch's bool reductions are far slower
        notes = list(files.notes)
        if device.type == "cpu" and config.dtype in SLOW_CPU_DTYPES:
            notes.append(f"{config.dtype} on the CPU runs far slower than float32")
        result = RunResult(
            config=config, stages=stages, mask=allowed, fully_masked_rows=rows,
            device=str(device if device.type == "cpu" else torch.device("cuda", device.index or 0)),
            compute_time_s=compute, total_time_s=time.perf_counter() - started,
            notes=tuple(notes) + ((pool_note(pool.calls[0]),) if pool is not None else ()),
            files=files.records, **pooled)
    return result


def _planned(config: RunConfig, device: torch.device, budget: int | None, record: Iterable[str] | None,
             region) -> tuple[frozenset[str], Pooling | None]:
    """(the stages a seed run keeps, its Pooling or None), checked against the memory budget."""
    keep = recorded_stages(config, record)
    pool = seed_pooling(config, device, budget, keep, region)
    if pool is None:
        check_memory(config, device, budget, keep)
        return keep, None
    check_pooled_memory(config, device, budget, pool.target)
    return frozenset(n for n in keep if not BY_NAME[n].is_map), pool  # only the per-token stages kept whole


def _seed_forward(config: RunConfig, files, device: torch.device, keep: frozenset[str], ctx: ForwardContext):
    """(trace, forward seconds) of a seed module: weights then inputs drawn from the seed on the CPU, then moved;
    its forward runs under `ctx` (ablation, pooling, progress and Cancel)."""
    dtype = getattr(torch, config.dtype)
    _seed(config.seed, device)
    if files.state is None and files.inputs is None:  # the draws of a configuration used lately are kept
        fresh = config.train or device.type != "cpu" or dtype != torch.float32  # the module is changed below
        module, inputs = drawn(config, lambda: config.spec.build(config), lambda: config.spec.inputs(config), fresh)
    else:
        module = config.spec.build(config)  # drawn even with a weights file: random inputs stay the same
        if files.state is not None:
            module.load_state_dict(files.state)  # strict: fit_weights checked every key and shape
        inputs = files.inputs if files.inputs is not None else config.spec.inputs(config)
    inputs = [x.to(device=device, dtype=dtype) for x in inputs]
    module = module.to(device=device, dtype=dtype).train(config.train)
    mask = build_mask(config, device)
    ctx.checkpoint()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    _, trace = module(*inputs, mask=mask, safe_softmax=config.safe_softmax, return_trace=keep, ctx=ctx)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    compute = time.perf_counter() - t0
    ctx.checkpoint()
    return trace, compute


def seed_pooling(config: RunConfig, device: torch.device, budget: int | None, keep: frozenset[str],
                 region: tuple[int, int, int, int] | None = None) -> Pooling | None:
    """A Pooling where config.pool asks for one (auto: the run's maps over 1 GiB or over the budget)."""
    auto_whole = region is None and not pools(seed_map_bytes(config, keep), budget, device)
    if config.pool == "never" or (config.pool == "auto" and auto_whole):
        return None
    maps = config.batch * config.heads * config.spec.head_factor
    return Pooling(target=fitting_target(maps, config.seq_q, config.lkv),
                   region=check_region(region, config.seq_q, config.lkv))


def check_pooled_memory(config: RunConfig, device: torch.device, budget: int | None, target: int = 0) -> None:
    """A pooled run keeps the tokens' stages, the pooled maps and a few blocks: MemoryBudgetError past that."""
    need = pooled_seed_bytes(config, target)
    over = over_budget(need, budget, device)
    if over is not None:
        allowed = over[0]
        raise MemoryBudgetError("seq_q", config.seq_q, f"not enough memory even with pooled maps: about "
                                f"{format_bytes(need)}, over the budget of {format_bytes(allowed)}",
                                "use shorter lengths, smaller widths or a smaller batch")


def _seed_plan(config: RunConfig):
    """A seed variant's ablation: its one layer is layer 0."""
    info = SimpleNamespace(layers=1, heads=config.heads, name=config.spec.label)
    return ablation_plan(config, info, config.seq_q)


def require_stage(config: RunConfig, stage: str, field_name: str = "view") -> None:
    """ConfigError unless this configuration produces `stage` (a view of it must say why not)."""
    if stage not in run_stages(config):
        raise ConfigError(field_name, stage, f"this configuration has no {stage} stage ({BY_NAME[stage].description})",
                          "choose another stage, or turn on what makes it (position alibi for biased, a soft cap for "
                          "capped, position rope for q_proj/k_proj, the differential variant for combined)")


def require_kept(result: RunResult, stage: str, field_name: str = "view") -> None:
    """ConfigError unless `result` holds `stage`: a model records only what its family exposes (weights
    alone for some; no soft cap where it has none), known once it is loaded."""
    if stage in result.stages:
        return
    kept = [n for n in result.stages if BY_NAME[n].is_map]
    if result.opened:
        raise ConfigError(field_name, stage, f"{Path(result.opened).name} holds no {stage} stage (its maps: "
                          f"{', '.join(kept)}): the file holds maps only, nothing is computed again",
                          f"choose one of {', '.join(kept)}", suggestions=tuple(kept))
    raise ConfigError(field_name, stage, f"this model records no {stage} stage (its maps: {', '.join(kept)})",
                      f"choose one of {', '.join(kept)}", suggestions=tuple(kept))


def checked_arguments(record, region) -> tuple[frozenset[str] | None, tuple[int, int, int, int] | None]:
    """run()'s `record` (a collection of stage names, not one string) and `region` (four whole numbers: 0.5 is
    not a row) as given through the API, else ConfigError; where the region lies is checked once the map is known."""
    if record is not None:
        if isinstance(record, (str, bytes)) or not isinstance(record, Iterable):
            raise ConfigError("record", record, "not a collection of stage names",
                              "give a set of names, e.g. {'weights', 'scores'}")
        record = frozenset(record)
        unknown = sorted(str(n) for n in record if not isinstance(n, str) or n not in BY_NAME)
        if unknown:
            raise ConfigError("stage", unknown[0], "no such stage", f"use one of {', '.join(STAGE_NAMES)}")
    if region is not None:
        parts = [to_int(x) for x in region] if isinstance(region, (tuple, list)) else []
        if len(parts) != 4 or any(problem for _, problem in parts):
            raise ConfigError("region", region, "not four whole numbers (q0, q1, k0, k1)",
                              "give the block's rows and keys, e.g. (0, 64, 0, 512)")
        region = tuple(v for v, _ in parts)
    return record, region


def recorded_stages(config: RunConfig, record: Iterable[str] | None = None) -> frozenset[str]:
    """The stages a run keeps: those asked for (default DEFAULT_RECORD) that this config produces,
    always with those every run keeps (ALWAYS_KEPT: the maps the views draw, the output)."""
    wanted = set(DEFAULT_RECORD if record is None else record) | ALWAYS_KEPT
    unknown = wanted - BY_NAME.keys()
    if unknown:
        raise ConfigError("stage", sorted(unknown)[0], "no such stage", f"use one of {', '.join(STAGE_NAMES)}")
    return frozenset(wanted & set(run_stages(config)))


def _stage_arrays(trace) -> dict[str, np.ndarray]:
    """Each kept stage as NumPy, in pipeline order (see _shared_numpy)."""
    return _shared_numpy({name: trace[name] for name in STAGE_NAMES if name in trace})


def _shared_numpy(tensors: dict[str, Tensor]) -> dict[str, np.ndarray]:
    """Each tensor as NumPy, in the same order; a stage that *is* another (dropped = weights in eval mode) shares
    its array instead of a copy, converted once."""
    arrays: dict[int, np.ndarray] = {}
    for t in tensors.values():
        if id(t) not in arrays:
            arrays[id(t)] = to_numpy(t)
    return {name: arrays[id(t)] for name, t in tensors.items()}
