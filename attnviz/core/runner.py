"""config -> result: seeding, device, dtype, memory check, the traced forward, timings."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .ablation import ablating
from .config import ConfigError, RunConfig
from .masks import build_kind
from .stages import BY_NAME, DEFAULT_RECORD, STAGE_NAMES
from .userfiles import prepare


class Cancelled(Exception):
    """Raised by run() when its `cancel` callback says the result is no longer wanted."""


class NonFiniteResult(RuntimeError):
    """A run whose maps came out NaN or infinite where no mask explains it: nothing of it is drawn or written."""


MEMORY_FRACTION = 0.5  # default budget: this share of the free RAM (or free GPU memory)
SLOW_CPU_DTYPES = ("float16", "bfloat16")


@dataclass
class RunResult:
    """The stages a run kept (see stages.py), as float32 NumPy on the CPU, plus the mask and flags.

    Stage arrays read as attributes: result.weights, result.scores, result.q ... (shapes in STAGES).
    """

    config: RunConfig
    stages: dict[str, np.ndarray]  # stage name -> array, in pipeline order
    mask: np.ndarray  # bool, True = may attend, broadcastable to (B, H, Lq, Lkv)
    fully_masked_rows: np.ndarray  # (B, H, Lq) bool: no key to attend to (NaN unless safe softmax)
    device: str  # the device actually used, e.g. "cpu" or "cuda:0"
    compute_time_s: float  # the forward pass alone
    total_time_s: float  # build, inputs, transfer and forward
    notes: tuple[str, ...] = field(default=())
    # Token-labelled runs (toys, pretrained models); empty for random inputs (positions instead)
    tokens: tuple[str, ...] = ()  # query token labels, Lq of them
    key_tokens: tuple[str, ...] = ()  # key token labels where keys differ from queries (cross-attention)
    token_ids: np.ndarray | None = None  # (Lq,) int ids of the queries' tokens
    layer_weights: np.ndarray | None = None  # (layers, B, H, Lq, Lkv) every layer's weights (multi-layer models)
    source: Any = None  # model-backed runs: the backed.ModelForward this is one layer of (source.result(n))
    files: tuple = ()  # userfiles.FileRecord of your own weights / inputs files that produced this run
    outputs: Any = None  # model-backed runs: predictions.Outputs of the model's output head (read lazily)
    prompt_length: int | None = None  # a generation (config.generate): tokens[:prompt_length] are the prompt

    # --- the output head (models with one; None elsewhere). Computed on first read: read on the worker.

    @property
    def predictions(self):
        """predictions.Predictions of this forward, or None (no output head)."""
        return None if self.outputs is None else self.outputs.predictions()

    @property
    def top_ids(self) -> np.ndarray | None:
        """(L, k) int: the k most likely tokens per position (k = config.top_k)."""
        return _part(self.predictions, "top_ids")

    @property
    def top_probs(self) -> np.ndarray | None:
        """(L, k) float32: their probabilities."""
        return _part(self.predictions, "top_probs")

    @property
    def top_tokens(self) -> tuple[tuple[str, ...], ...] | None:
        """L rows of k token labels."""
        return _part(self.predictions, "top_tokens")

    @property
    def target_ids(self) -> np.ndarray | None:
        """(L,) int: the token that comes next (a toy: its task's answer), -1 where none."""
        return _part(self.predictions, "target_ids")

    @property
    def target_probs(self) -> np.ndarray | None:
        """(L,) float32: the probability given to the target, NaN where there is none."""
        return _part(self.predictions, "target_probs")

    @property
    def unablated(self):
        """The Predictions of the same input without the ablation (None when nothing is ablated)."""
        return None if self.outputs is None else self.outputs.unablated()

    @property
    def kl(self) -> np.ndarray | None:
        """(L,) KL(unablated ‖ ablated) in nats per position (None when nothing is ablated)."""
        return None if self.outputs is None else self.outputs.kl()

    @property
    def lens(self):
        """predictions.Lens (logit lens) of a causal LM, else None."""
        return None if self.outputs is None else self.outputs.lens()

    @property
    def lens_ids(self) -> np.ndarray | None:
        """(layers, L) int: the top-1 token of the residual stream after each layer."""
        return _part(self.lens, "ids")

    @property
    def lens_probs(self) -> np.ndarray | None:
        """(layers, L) float32: its probability."""
        return _part(self.lens, "probs")

    def file_dicts(self) -> dict[str, dict[str, Any]]:
        """{weights/inputs: {name, path, sha256, bytes}} of the files this run read (for exports)."""
        return {r.field: r.to_dict() for r in self.files}

    def __getattr__(self, name: str) -> np.ndarray:
        if name.startswith("__") or name == "stages":  # not yet set (copy, pickle)
            raise AttributeError(name)
        try:
            return self.stages[name]
        except KeyError:
            raise AttributeError(f"RunResult has no stage {name!r}; kept: {', '.join(self.stages)}") from None

    def axis_tokens(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(query labels, key labels) of a token-labelled run whose labels fit its maps, else None."""
        keys = self.key_tokens or self.tokens
        if not self.tokens or len(self.tokens) != self.config.seq_q or len(keys) != self.config.lkv:
            return None
        return self.tokens, keys

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array: the kept stages in pipeline order, then the mask and the row flags."""
        return {**self.stages, "mask": self.mask, "fully_masked_rows": self.fully_masked_rows}


def _part(holder, name: str):
    return None if holder is None else getattr(holder, name)


def resolve_device(name: str) -> torch.device:
    """'cpu', 'cuda', 'cuda:N' or 'auto' -> a device that exists, else ConfigError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("device", name, "no CUDA device is available (torch.cuda.is_available() is False)",
                          "use device cpu, or auto to pick CUDA only where it exists")
    device = torch.device(name)
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ConfigError("device", name, f"only {count} CUDA device(s) exist",
                          f"use cuda:0 .. cuda:{count - 1}")
    return device


def build_mask(config: RunConfig, device: torch.device | None = None) -> Tensor | None:
    """The config's mask as bool (True = may attend), broadcastable to (B, H, Lq, Lkv)."""
    c = config
    return build_kind(c.mask, c.batch, c.seq_q, c.lkv, window=c.window, sinks=c.sinks if c.applies("sinks") else 0,
                      kv_lengths=c.kv_lengths_per_item() if c.applies("kv_lengths") else (), device=device)


def run_stages(config: RunConfig) -> list[str]:
    """The stages this configuration produces, in pipeline order (what a full trace would hold)."""
    if config.spec.backed:
        from .backed import backed_stages

        return backed_stages()
    options = config.attention_options()
    absent = set()
    if options.rotate() is None:
        absent |= {"q_proj", "k_proj"}
    produced = {mod.stage for mod in options.score_mods(config.heads)}
    absent |= {"biased", "capped"} - produced
    if config.spec.head_factor == 1:
        absent.add("combined")
    else:  # a differential head's output mixes two maps: no one map to weight by its values
        absent.add("value_weighted")
    return [name for name in STAGE_NAMES if name not in absent]


def kept_maps(config: RunConfig, keep: frozenset[str] | None = None) -> int:
    """How many (B, H, Lq, Lkv) maps a run keeps (a differential head's stages before `combined`
    count twice; `dropped` counts only when dropout makes it a map of its own)."""
    keep = recorded_stages(config) if keep is None else keep
    before_combine = STAGE_NAMES.index("combined")
    count = 0
    for name in keep:
        if not BY_NAME[name].is_map or (name == "dropped" and not config.dropout_active):
            continue
        count += config.spec.head_factor if STAGE_NAMES.index(name) < before_combine else 1
    return count


def estimate_memory(config: RunConfig, keep: frozenset[str] | None = None) -> int:
    """Bytes the run needs at its peak, counted generously (attention maps dominate)."""
    elem = torch.empty((), dtype=getattr(torch, config.dtype)).element_size()
    b, h, lq, lkv = config.batch, config.heads, config.seq_q, config.lkv
    maps = b * h * lq * lkv
    kept = kept_maps(config, keep)
    transient = (1 if config.dropout_active else 0) + (1 if config.attention_options().score_mods(h) else 0)
    live = max(kept + transient, 2)  # e.g. scores, weights (+ noise, dropped)
    to_float32 = (kept + 1) * 4 if elem != 4 else 0  # the result is converted to float32 NumPy
    widths = config.d_model + sum(getattr(config, w) for w in ("d_out", "d_cross") if config.applies(w))
    tokens = b * (lq + lkv) * widths * 8 * max(elem, 4)
    params = 4 * widths * widths * 4
    return maps * (live * elem + to_float32) + tokens + params


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


def available_memory(device: torch.device) -> int:
    if device.type == "cuda":  # free, plus what torch's caching allocator holds but does not use
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return torch.cuda.mem_get_info(device)[0] + cached
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):  # not Linux: assume 8 GiB free
        return 8 << 30


def _gib(n: float) -> str:
    if n >= 2**28:
        return f"{n / 2**30:.2f} GiB"
    if n >= 2**20:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**10:.0f} KiB" if n >= 2**10 else f"{n:.0f} bytes"  # small budgets are not "0 MiB"


def result_memory(config: RunConfig, keep: frozenset[str] | None = None) -> int:
    """Bytes of the float32 RunResult in host memory: a CUDA run copies every trace array back."""
    b, h, lq, lkv = config.batch, config.heads, config.seq_q, config.lkv
    maps = b * h * lq * lkv * kept_maps(config, keep)  # e.g. scores, weights (+ dropped)
    widths = config.d_model + sum(getattr(config, w) for w in ("d_out", "d_cross") if config.applies(w))
    tokens = b * (lq + lkv) * widths * 4  # q, k, v, context and output, generously
    return (maps + tokens) * 4 + b * lq * lkv + b * h * lq  # + the bool mask and row flags


def shortened(config: RunConfig, length: int) -> RunConfig:
    """`config` with both lengths at most `length`, still valid for its mask: padding lengths are
    clipped to the new key length (what the quick fix in the app and the CLI's advice do)."""
    lq, lkv = min(config.seq_q, length), min(config.seq_kv, length)
    if config.mask != "padding":
        return replace(config, seq_q=lq, seq_kv=lkv)
    keys = lkv if config.spec.cross else lq
    return replace(config, seq_q=lq, seq_kv=lkv, kv_lengths=tuple(min(n, keys) for n in config.kv_lengths))


class MemoryBudgetError(ConfigError):
    """The run would not fit the memory budget (raised before anything big is allocated)."""


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
        source = "the memory_budget given"
        allowed = budget
        if allowed is None:
            allowed = int(available_memory(where) * MEMORY_FRACTION)
            source = f"{MEMORY_FRACTION:.0%} of the free memory on {where}"
        checks.append((estimate, allowed, what, source))

    def fits(c: RunConfig) -> bool:
        return all(estimate(c) <= allowed for estimate, allowed, _, _ in checks)

    if fits(config):
        return estimate_memory(config, keep)
    estimate, allowed, what, source = next(c for c in checks if c[0](config) > c[1])
    over = (f"not enough memory: {what} about {_gib(estimate(config))} ({config.shapes_text()}), over the budget of "
            f"{_gib(allowed)} ({source})")

    def at(length: int) -> RunConfig:
        return shortened(config, length)

    if not fits(at(1)):  # the widths alone are too big: shorter sequences cannot help
        raise MemoryBudgetError("d_model", config.d_model, over, "use smaller widths (d_model, d_out, d_cross)")
    lo, hi = 1, max(config.seq_q, config.lkv)  # the longest length that fits, by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(at(mid)) else (lo, mid - 1)
    longer = "seq_kv" if config.lkv > config.seq_q else "seq_q"  # the length to blame: the one that is over
    clip = f", with kv_lengths at most {lo}" if config.mask == "padding" else ""
    raise MemoryBudgetError(longer, getattr(config, longer), over,
                            f"use lengths of {lo} or less{clip}, or fewer heads or batch items", suggestions=(lo,))


def _numpy(t: Tensor) -> np.ndarray:
    """Float32 (or bool) NumPy on the CPU; zero-copy for CPU float32 tensors."""
    t = t.detach()
    if t.dtype != torch.bool:
        t = t.to(torch.float32)
    return t.cpu().numpy()


def _seed(seed: int, device: torch.device) -> None:
    """torch.manual_seed(seed) as the seed scripts call it, for the generators this run draws from.
    On the CPU only the CPU generator: manual_seed also seeds every CUDA device, and before CUDA
    starts that records a stack trace per call (1.5-1.7 ms of a 20 ms run at S)."""
    if device.type == "cuda":
        torch.manual_seed(seed)  # dropout on the GPU draws from its generator
    else:
        torch.default_generator.manual_seed(seed)


def run(
    config: RunConfig, *, memory_budget: int | None = None, cancel: Callable[[], bool] | None = None,
    record: Iterable[str] | None = None, on_step: Callable[[int, Callable[[], RunResult]], None] | None = None,
) -> RunResult:
    """Build the variant's module and inputs from the seed, run the traced forward, return NumPy.

    Same config -> bit-identical result on the CPU. Weights then inputs are drawn in the seed
    scripts' order (manual_seed, build the module, torch.randn for each input), on the CPU,
    then moved, so the CPU numbers do not depend on the device asked for.
    `record`: the stages to keep (default: what the views read, DEFAULT_RECORD); stages this
    configuration does not produce are skipped. `cancel` is polled between stages (a single torch
    op cannot be interrupted); when it returns True the run stops with Cancelled.
    A model-backed variant (spec.load set, see backed.py) runs its model on config.text instead and
    returns config.layer's result; result.source then holds every layer. With config.generate it writes that
    many tokens; on_step(tokens so far, build) is called after each, build() giving the RunResult of what has
    run so far (assembling it costs: call it only as often as it is shown).
    """

    if config.spec.backed:  # a trained model: one forward over every layer, this config's layer returned
        from .backed import run_forward

        stream = None if on_step is None else (lambda n, build: on_step(n, lambda: build().result(config.layer)))
        return run_forward(config, memory_budget=memory_budget, cancel=cancel, record=record,
                           on_step=stream).result(config.layer)

    def checkpoint() -> None:
        if cancel is not None and cancel():
            raise Cancelled

    started = time.perf_counter()
    files = prepare(config)  # your own weights and inputs (cached reads); the config takes their shapes
    config = files.config
    device = resolve_device(config.device)
    keep = recorded_stages(config, record)
    check_memory(config, device, memory_budget, keep)
    dtype = getattr(torch, config.dtype)
    notes = list(files.notes)
    if device.type == "cpu" and config.dtype in SLOW_CPU_DTYPES:
        notes.append(f"{config.dtype} on the CPU runs far slower than float32")
    cuda_devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices), torch.inference_mode():
        _seed(config.seed, device)
        module = config.spec.build(config)  # drawn even with a weights file: random inputs stay the same
        if files.state is not None:
            module.load_state_dict(files.state)  # strict: fit_weights checked every key and shape
        inputs = files.inputs if files.inputs is not None else config.spec.inputs(config)
        inputs = [x.to(device=device, dtype=dtype) for x in inputs]
        module = module.to(device=device, dtype=dtype).train(config.train)
        mask = build_mask(config, device)
        checkpoint()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        with ablating(_seed_plan(config)):
            _, trace = module(*inputs, mask=mask, safe_softmax=config.safe_softmax, return_trace=keep)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        compute = time.perf_counter() - t0
        checkpoint()
        rows = ~trace.mask.any(dim=-1)
        rows = rows.expand(config.batch, config.heads, config.seq_q)
        result = RunResult(
            config=config, stages=_stage_arrays(trace), mask=_numpy(trace.mask), fully_masked_rows=_numpy(rows).copy(),
            device=str(device if device.type == "cpu" else torch.device("cuda", device.index or 0)),
            compute_time_s=compute, total_time_s=time.perf_counter() - started, notes=tuple(notes),
            files=files.records,
        )
    return result


def _seed_plan(config: RunConfig):
    """A seed variant's ablation: its one layer is layer 0."""
    from .backed import ablation_plan

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
    raise ConfigError(field_name, stage, f"this model records no {stage} stage (its maps: {', '.join(kept)})",
                      f"choose one of {', '.join(kept)}", suggestions=tuple(kept))


def recorded_stages(config: RunConfig, record: Iterable[str] | None = None) -> frozenset[str]:
    """The stages a run keeps: those asked for (default DEFAULT_RECORD) that this config produces,
    always with the map the views draw (`dropped`) and the output."""
    wanted = set(DEFAULT_RECORD if record is None else record) | {"dropped", "output"}
    unknown = wanted - BY_NAME.keys()
    if unknown:
        raise ConfigError("stage", sorted(unknown)[0], "no such stage", f"use one of {', '.join(STAGE_NAMES)}")
    return frozenset(wanted & set(run_stages(config)))


def _stage_arrays(trace) -> dict[str, np.ndarray]:
    """Each kept stage as NumPy, in pipeline order; a stage that *is* another (dropped = weights in
    eval mode) shares its array instead of a copy."""
    arrays: dict[str, np.ndarray] = {}
    seen: dict[int, np.ndarray] = {}
    for name in STAGE_NAMES:
        if name in trace:
            tensor = trace[name]
            arrays[name] = seen.setdefault(id(tensor), _numpy(tensor))
    return arrays
