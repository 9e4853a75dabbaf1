"""Model-backed variants: a trained model computes the maps of every layer in one forward.

The protocol. A VariantSpec with `load` set is model-backed (spec.backed). `load(config, memory_budget)`
returns a model object with:

    info      .layers, .heads, .kv_heads, .d_model, .max_positions (ints); .name (str) if it has one
              .weight_piece (int, optional): float32 bytes a compact weight makes per call, at most
    encode(text: str) -> obj with .ids (sequence of int) and .tokens (sequence of str, one label per id);
              raises ConfigError (field "text") for text it cannot take (empty, too long: the fix in
              `suggestions`, e.g. the truncated text). Optional .layer_tokens: one (query labels, key
              labels) pair per layer, where a layer's axes are not the text's tokens (a toy's decoder
              cross-attention: rows are the outputs, columns the inputs)
    forward(ids: LongTensor (1, L), record: frozenset[str]) -> (hidden (1, L, d), [Trace] * info.layers)
              each Trace from attention(...) (kernel.py) holding the `record` stages and "mask"

Every layer's map has the same shape (1, info.heads, L, L): self-attention over the text's L tokens
(a model whose layers differ in shape, e.g. an encoder plus a cross-attending decoder, does not fit
yet). The model is loaded and cached by the variant itself (load_model keeps the last two); a
model object may hold a torch module as `.module`, which then follows config.device. `run_forward(config)`
encodes config.text, runs the forward once and keeps every layer's recorded stages as NumPy
(a ModelForward); `ModelForward.result(layer)` is the RunResult of one layer, so a change of layer,
head or view never runs the model again (the worker keeps the forward: result.source).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from attnviz.core.kernel import buffers
from attnviz.core.kernel.ablation import Plan
from attnviz.core.kernel.ablation import parse as parse_ablation
from attnviz.core.kernel.context import ForwardContext
from attnviz.core.kernel.kinds import ABLATIONS
from attnviz.core.kernel.masks import identify
from attnviz.core.kernel.pooling import (
    Pooling,
    fitting_target,
    stacked,
)
from attnviz.core.kernel.progress import Watch, opening
from attnviz.core.kernel.slab import MapSlab
from attnviz.core.kernel.stages import (
    ALWAYS_KEPT,
    BY_NAME,
    DEFAULT_RECORD,
    DIFFERENTIAL,
    ROTATION,
    STAGE_NAMES,
    stages_made_by,
)
from attnviz.core.runs.config import ConfigError, RunConfig
from attnviz.core.runs.device import MemoryBudgetError, format_bytes, resolve_device, to_numpy
from attnviz.core.runs.generation import GENERATED_STAGES, Ran, generate_count, generated_run
from attnviz.core.runs.memory import (  # noqa: F401 - the estimates, importable from here as before
    FORWARD_OVERHEAD,
    forward_bytes,
    forward_map_bytes,
    map_count,
    over_budget,
    pools,
)
from attnviz.core.runs.model_lock import model_lock
from attnviz.core.runs.predictions import Outputs
from attnviz.core.runs.result import Cancelled, NonFiniteResult, RunResult

# Stages a model's attention never produces: RoPE runs in the family's code before the kernel sees q
# and k, and no family computes a differential pair. A model's info.stages says what it does record.
ABSENT = stages_made_by(ROTATION, DIFFERENTIAL)
WEIGHTS_ONLY_NOTE = "weights only: this family's code does not expose its attention stages"


@dataclass(frozen=True)
class Encoded:
    """A text as a model-backed variant's encode() returns it (see the protocol above)."""

    ids: tuple[int, ...]
    tokens: tuple[str, ...]  # the display labels, one per id
    layer_tokens: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] | None = None  # per layer: (rows, columns)
    layer_ids: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] | None = None  # their ids, where not `ids`


@dataclass
class ModelForward:
    """One forward of a model-backed variant: every layer's recorded stages as NumPy."""

    key: RunConfig  # the config with layer 0: everything the forward depended on
    info: object  # the model's info (see the protocol)
    stages: dict[str, list[np.ndarray]]  # stage -> one array per layer
    masks: list[np.ndarray]  # per layer, bool (1, 1, L, L), True = may attend
    layer_weights: np.ndarray  # (layers, 1, H, L, L); stages["weights"][i] are views into it
    tokens: tuple[str, ...]
    token_ids: np.ndarray  # (L,)
    layer_tokens: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] | None
    device: str
    compute_time_s: float
    total_time_s: float
    notes: tuple[str, ...] = field(default=())
    # An encoder-decoder's every stack, for the model view: (stack, layer_weights, each layer's mask (layers, Lq,
    # Lkv), None for the shown stack, whose masks are `masks`); () for a model of one stack
    stacks: tuple[tuple[str, np.ndarray, np.ndarray | None], ...] = field(default=())
    outputs: Outputs | None = None  # the output head's predictions and lens, computed when first read
    prompt_length: int | None = None  # a generation: the prompt's tokens; the rest of `tokens` were generated
    picture: object | None = None  # a vision model's input as it saw it (models/vision.py Picture), else None
    pooled: tuple = ()  # a pooled forward (pooling.py): each layer's PooledCall (its maps above are pooled)
    recipes: tuple = ()  # per layer: how its kernel call made the scores (mods.ScoreRecipe), None for another call
    layer_ids: tuple | None = None  # per layer: (row ids, column ids) where a layer's axes are not the text's tokens

    def serves(self, config: RunConfig) -> bool:
        """Whether `config` differs from this forward's at most in the layer."""
        return config.spec.backed and config.replace(layer=0) == self.key

    def result(self, layer: int):
        """The RunResult of one layer (no copy: the arrays are views of this forward's)."""
        check_layer(self.key.replace(layer=layer), self.info)
        stages = {name: arrays[layer] for name, arrays in self.stages.items() if arrays[layer] is not None}
        mask = self.masks[layer]
        heads, rows_n = self.layer_weights.shape[2], mask.shape[-2]
        rows = np.broadcast_to(~mask.any(axis=-1), (1, heads, rows_n)).copy()
        pooled = {}
        if self.pooled:
            call = self.pooled[layer]
            pooled = {"pool_factor": call.factors, "exact_stats": call.stat_arrays(),
                      "region": None if call.region is None else call.region.numpy()}
        config = resolved(self.key.replace(layer=layer), self.info, mask,
                          self.pooled[layer].shape if self.pooled else None, pooled.get("pool_factor", (1, 1)))
        return RunResult(
            config=config, stages=stages, mask=mask, fully_masked_rows=rows, device=self.device,
            compute_time_s=self.compute_time_s, total_time_s=self.total_time_s, notes=self.notes,
            **self.ids(layer), **self.labels(layer), layer_weights=self.layer_weights, source=self,
            outputs=self.outputs, prompt_length=self.prompt_length,
            score_recipe=self.recipes[layer] if self.recipes else None, **pooled)

    def kept(self, layer: int) -> frozenset[str]:
        """The stages `layer`'s result holds (a pooled forward keeps its per-token stages for one layer)."""
        return frozenset(name for name, arrays in self.stages.items() if arrays[layer] is not None)

    def blocks(self) -> list[tuple[str, np.ndarray, np.ndarray | None]]:
        """(stack, layer_weights, allowed (layers, Lq, Lkv) or None) of every stack, in the model's order: what
        the model view draws, each layer with its own mask (a sliding window's or a full layer's)."""
        own = np.stack([m[0, 0] for m in self.masks])
        shown = (self.stack, self.layer_weights, None if own.all() else own)
        return [shown if lw is self.layer_weights else (name, lw, None if m.all() else m)
                for name, lw, m in self.stacks] or [shown]

    @property
    def stack(self) -> str:
        """The stack this forward's results show ("" for a model of one stack)."""
        return next((name for name, lw, _ in self.stacks if lw is self.layer_weights), "")

    def ids(self, layer: int) -> dict[str, np.ndarray | None]:
        """token_ids of one layer's rows and key_token_ids of its columns (only where they differ): an
        encoder-decoder's decoder and cross-attention rows are the decoder's tokens, not the text's."""
        if self.layer_ids is None:
            return {"token_ids": self.token_ids}
        rows, cols = self.layer_ids[layer]
        return {"token_ids": np.asarray(rows, dtype=np.int64),
                "key_token_ids": None if cols == rows else np.asarray(cols, dtype=np.int64)}

    def labels(self, layer: int) -> dict[str, tuple[str, ...]]:
        """tokens (rows) and key_tokens (columns, only where they differ) of one layer's maps."""
        if self.layer_tokens is None:
            return {"tokens": self.tokens}
        rows, cols = self.layer_tokens[layer]
        return {"tokens": rows, "key_tokens": () if cols == rows else cols}


def backed_stages(info=None) -> list[str]:
    """Stages a model-backed run can produce: the model's own list where its info has one."""
    own = getattr(info, "stages", None)
    return [name for name in STAGE_NAMES if (name in own if own else name not in ABSENT)]


def check_layer(config: RunConfig, info) -> None:
    if not 0 <= config.layer < info.layers:
        name = getattr(info, "name", None) or config.model or "the model"
        raise ConfigError("layer", config.layer, f"{name} has {info.layers} layers (0..{info.layers - 1})",
                          f"choose a layer from 0 to {info.layers - 1}", suggestions=(info.layers - 1,))


def resolved(config: RunConfig, info, mask: np.ndarray, lengths: tuple[int, int] | None = None,
             pool_factor: tuple[int, int] = (1, 1)) -> RunConfig:
    """The config with the shapes the model and the text gave it (what views and exports read): the
    layer's map is (queries, keys), which differ for an encoder-decoder's cross-attention. A pooled map's
    mask is pooled too: `lengths` are then the map's own, and a window is counted in whole blocks."""
    d_model = info.d_model - info.d_model % info.heads  # a width the heads divide, for validation
    kind, window = identify(mask[0, 0])  # the kind that builds the layer's own mask: the protocol needs no flag
    window *= pool_factor[1]
    lq, lkv = lengths or mask.shape[-2:]
    return config.replace(heads=info.heads, kv_heads=info.kv_heads, d_model=d_model, batch=1, seq_q=lq, seq_kv=lkv,
                          mask=kind, window=max(min(window, lkv), 0))


def check_forward_memory(config: RunConfig, info, length: int, keep: frozenset[str], budget: int | None,
                         pooled: bool = False) -> None:
    need = forward_bytes(info, length, keep, pooled)
    over = over_budget(need, budget)
    if over is None:
        return
    allowed = over[0]
    fits = max((n for n in range(1, length) if forward_bytes(info, n, keep, pooled) <= allowed), default=0)
    fix = f"use a shorter text (at most about {fits} tokens)" if fits else "free memory, or choose a smaller model"
    raise MemoryBudgetError("text", f"{length} tokens",
                            f"every layer's maps at {length} tokens need about {format_bytes(need)}, over the "
                            f"budget of {format_bytes(allowed)}", fix)


def _arrays(traces: list, keep: frozenset[str], stacked: np.ndarray | None = None, pooled: bool = False
            ) -> tuple[dict[str, list[np.ndarray | None]], np.ndarray]:
    """Per-layer NumPy of each stage every layer kept (a layer that ran its family's own eager attention
    keeps only the weights: then no layer shows the others' scores); the weights stacked once into
    (layers, 1, H, L, L), or `stacked` where the kernel wrote them into one array already (a pooled forward's,
    or slab.py's). A pooled forward keeps its per-token stages for some layers only (Pooling.token_calls):
    the others hold None."""
    layer_weights = stacked if stacked is not None else stack_weights([t.weights for t in traces])
    pooled_tokens = pooled
    common = [name for name in STAGE_NAMES
              if (any if pooled_tokens and not BY_NAME[name].is_map else all)(name in t for t in traces)]
    stages: dict[str, list[np.ndarray | None]] = {name: [] for name in common}
    for i, trace in enumerate(traces):
        for name in common:
            if name not in trace:
                stages[name].append(None)
                continue
            same_as_weights = trace[name] is trace["weights"]
            stages[name].append(layer_weights[i] if same_as_weights else to_numpy(trace[name]))
    return stages, layer_weights


def stack_weights(weights: list[Tensor]) -> np.ndarray:
    """Every layer's (B, H, Lq, Lkv) map as one float32 (layers, B, H, Lq, Lkv) array, in a buffer a result no
    longer shown has left (buffers.py: a fresh array's pages took most of np.stack's time, benchmarks/README.md, Behind
    the code), each layer copied by torch (threads, no GIL held)."""
    slab = buffers.empty((len(weights), *weights[0].shape), torch.float32)
    for layer, w in zip(slab, weights):
        layer.copy_(w.detach())
    return slab.numpy()


def _stacked(pooled: tuple) -> np.ndarray | None:
    """The one (layers, B, H, Lq', Lk') array a pooled forward's layers were written into (pooling.stacked)."""
    slab = stacked(pooled)
    return None if slab is None else slab.numpy()


def _layer_tokens(encoded) -> tuple | None:
    per_layer = getattr(encoded, "layer_tokens", None)
    return None if per_layer is None else tuple((tuple(q), tuple(k)) for q, k in per_layer)


def run_forward(config: RunConfig, *, memory_budget: int | None = None, cancel: Callable[[], bool] | None = None,
                record: Iterable[str] | None = None, on_step: Callable | None = None,
                region: tuple[int, int, int, int] | None = None,
                progress: Callable[[int, int], None] | None = None,
                stages: Callable[[str, int, int], None] | None = None) -> ModelForward:
    """Load (cached), encode the text, one traced forward over every layer (or, with config.generate, the
    generation's steps) -> ModelForward. on_step(tokens so far, build) streams a generation: build() is the
    ModelForward of what ran so far. stages(step, done, total) hears the opening of a model that reports its
    steps (a GGUF file: "tensors", 12, 272; "tokenizer", 1, 1), and `cancel` stops it between two."""
    started = time.perf_counter()
    device = resolve_device(config.device)
    with opening(Watch(cancel, on_stage=stages)):  # a GGUF's tensors: Cancel between two of them
        model = config.spec.load(config, memory_budget)
    check_layer(config, model.info)
    encoded = model.encode(config.text)
    count = generate_count(config, model, len(encoded.ids))
    keep = frozenset((set(DEFAULT_RECORD if record is None else record) | ALWAYS_KEPT)
                     & set(backed_stages(model.info)) & (GENERATED_STAGES if count else set(STAGE_NAMES)))
    pool = model_pooling(config, model, len(encoded.ids), count, keep, memory_budget, region)
    if pool is not None:  # the maps are pooled in the kernel: only the per-token stages are kept whole
        keep = frozenset(n for n in keep if not BY_NAME[n].is_map)
    check_forward_memory(config, *_forward_shape(model, len(encoded.ids) + count), keep, memory_budget,
                         pooled=pool is not None)
    if cancel is not None and cancel():
        raise Cancelled
    _place(model, device)
    plan = ablation_plan(config, model.info, len(encoded.ids), getattr(model, "call_index", None))
    t0 = time.perf_counter()
    # torch's thread count is the caller's: the app's worker sets it from the cores other programs
    # leave free (session/cpushare.py); a model forward of many mid-sized ops suffers most from a starved thread
    if count:
        def build(ran: Ran) -> ModelForward:
            return _model_forward(config, model, ran, keep, device, time.perf_counter() - t0, started, plan)
        ran = generated_run(config, model, encoded, count, keep, plan, device, cancel, on_step, build)
    else:
        ran = _model_run(model, encoded, keep, plan, pool, device, cancel, progress)
    compute = time.perf_counter() - t0
    if plan is not None:
        check_kernel_ran(plan, config, model.info)
    if cancel is not None and cancel():
        raise Cancelled
    return _model_forward(config, model, ran, keep, device, compute, started, plan)


def model_pooling(config: RunConfig, model, length: int, count: int, keep: frozenset[str], budget: int | None,
                  region) -> Pooling | None:
    """A Pooling where config.pool asks for one: auto pools when every layer's maps would need more than 1 GiB
    or the budget. A generation (its steps' rows are short) and an encoder-decoder (its stacks interleave)
    keep whole maps."""
    if config.pool == "never" or count or getattr(model, "forward_layers", model.info.layers) != model.info.layers:
        return None
    if config.pool == "auto" and region is None and not pools(forward_map_bytes(model.info, length, keep), budget):
        return None
    layers = model.info.layers
    return Pooling(target=fitting_target(layers * model.info.heads, length, length),
                   region=check_region(region, length, length), calls_expected=layers,
                   token_calls=frozenset({config.layer}))  # the shown layer's per-token stages alone


def check_region(region, lq: int, lkv: int) -> tuple[int, int, int, int] | None:
    """(q0, q1, k0, k1) within the map, non-empty, else ConfigError (field "region")."""
    if region is None:
        return None
    q0, q1, k0, k1 = (int(x) for x in region)
    if not (0 <= q0 < q1 <= lq and 0 <= k0 < k1 <= lkv):
        raise ConfigError("region", f"{q0}:{q1},{k0}:{k1}", f"the map has rows 0..{lq} and columns 0..{lkv}",
                          f"give q0:q1,k0:k1 with 0 <= q0 < q1 <= {lq} and 0 <= k0 < k1 <= {lkv}")
    return q0, q1, k0, k1


def pooled_ran(ran: Ran, pool: Pooling) -> Ran:
    """A pooled forward's traces with each layer's pooled map as its weights (and its pooled mask)."""
    if len(pool.calls) != len(ran.traces):
        raise RuntimeError(f"{len(pool.calls)} pooled attention calls for {len(ran.traces)} layers")
    for trace, call in zip(ran.traces, pool.calls):
        trace["weights"] = trace["dropped"] = call.weights
        trace["mask"] = call.allowed
    ran.pooled = tuple(pool.calls)
    return ran


def _slab_ran(ran: Ran, maps: MapSlab) -> Ran:
    """The forward's weights as the slab the kernel wrote them into, where it holds every layer's."""
    held = maps.holding([t["weights"] for t in ran.traces if "weights" in t])
    ran.slab = held if held is not None and held.dtype == torch.float32 and held.device.type == "cpu" else None
    return ran


def _model_run(model, encoded, keep: frozenset[str], plan: Plan | None, pool: Pooling | None, device: torch.device,
               cancel: Callable[[], bool] | None, progress: Callable | None) -> Ran:
    """One forward of every layer under its ForwardContext: the plan, the pooling or the slab the kernel writes
    the maps into, progress per layer (with the pooled layers so far) and Cancel within one."""
    calls = len(getattr(model, "attention_modules", ())) or model.info.layers
    report = None if progress is None else (
        lambda n: progress(min(n, calls), calls, () if pool is None else tuple(pool.calls)))
    # the kernel writes the maps into one tensor (not an encoder-decoder's: its stacks' maps differ)
    one_stack = getattr(model, "forward_layers", model.info.layers) == model.info.layers
    maps = MapSlab(calls) if pool is None and one_stack else None
    with ForwardContext(plan=plan, pooling=pool, slab=maps, watch=Watch(cancel, report)) as ctx:
        ran = _forward_once(model, encoded, keep, device, ctx)
    return pooled_ran(ran, pool) if pool is not None else _slab_ran(ran, maps) if maps is not None else ran


def _forward_once(model, encoded, keep: frozenset[str], device: torch.device, ctx: ForwardContext) -> Ran:
    ids = torch.tensor([list(encoded.ids)], dtype=torch.long, device=device)
    with torch.inference_mode():
        hidden, traces = model.forward(ids, keep, ctx=ctx)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return Ran(traces, hidden, getattr(model, "residuals", None), list(encoded.ids), tuple(encoded.tokens),
               _layer_tokens(encoded), layer_ids=getattr(encoded, "layer_ids", None))


def _model_forward(config: RunConfig, model, ran: Ran, keep: frozenset[str], device: torch.device, compute: float,
                   started: float, plan: Plan | None) -> ModelForward:
    masks = [np.broadcast_to(t.mask.cpu().numpy(), (1, 1, *t.weights.shape[-2:])).copy() for t in ran.traces]
    pooled = _stacked(ran.pooled)
    stacked = pooled if pooled is not None else None if ran.slab is None else ran.slab.numpy()
    stages, layer_weights = _arrays(ran.traces, keep, stacked, pooled=pooled is not None)
    _check_finite(layer_weights, model.info, [getattr(t, "context_sum", None) for t in ran.traces])
    ids = torch.tensor([ran.ids], dtype=torch.long, device=device)
    return ModelForward(
        key=config.replace(layer=0), info=model.info, stages=stages, masks=masks, layer_weights=layer_weights,
        tokens=ran.tokens, token_ids=np.asarray(ran.ids, dtype=np.int64), device=str(device),
        layer_tokens=ran.layer_tokens, notes=_notes(model, device), stacks=_stack_blocks(model, layer_weights),
        compute_time_s=compute, total_time_s=time.perf_counter() - started, prompt_length=ran.prompt_length,
        pooled=ran.pooled, recipes=tuple(getattr(t, "recipe", None) for t in ran.traces), layer_ids=ran.layer_ids,
        picture=getattr(model, "picture", None),
        outputs=Outputs(model, ids, ran.hidden, ran.residuals, config.top_k, plan is not None))


def ablation_plan(config: RunConfig, info, length: int, call_index=None) -> Plan | None:
    """The config's ablation for a model of info.layers x info.heads (None: nothing ablated); ConfigError for a
    layer or head that does not exist, or a mean over a single position. call_index maps a layer of the shown
    stack to its attention call in the forward (default: the same number)."""
    if not config.applies("ablate") or not config.ablate:
        return None
    try:
        layers = parse_ablation(config.ablate, info.layers, info.heads)
    except ValueError as exc:
        name = getattr(info, "name", "the model")
        raise ConfigError("ablate", config.ablate, f"{exc} in {name}", f"name layers 0..{info.layers - 1} and heads "
                          f"0..{info.heads - 1}") from None
    check_ablation_mode(config.ablation, length)
    return Plan.of_layers(layers, config.ablation, call_index or (lambda layer: layer))


def check_kernel_ran(plan: Plan, config: RunConfig, info) -> None:
    """A forward under an ablation plan that never reached the kernel ablated nothing: say so, never draw it."""
    if plan.calls == 0:
        raise ConfigError("ablate", config.ablate, f"{getattr(info, 'name', 'the model')} runs its family's own "
                          "attention, not attnviz's kernel, so no head can be knocked out", "clear the ablation",
                          suggestions=((),))


def check_ablation_mode(mode: str, length: int) -> None:
    if mode not in ABLATIONS:
        raise ConfigError("ablation", mode, "unknown ablation", f"use one of {', '.join(ABLATIONS)}",
                          suggestions=tuple(ABLATIONS))
    if mode == "mean" and length < 2:
        raise ConfigError("ablation", "mean", "a mean over a single position is that position's own output",
                          "use zero ablation, or a longer input", suggestions=("zero",))


def _place(model, device: torch.device) -> None:
    """The cached model follows the device asked for (and back to the CPU)."""
    module = getattr(model, "module", None)
    if module is not None and next(module.parameters()).device != device:
        with model_lock(model):  # never under another thread's forward
            module.to(device)


def placed_model(config: RunConfig, memory_budget: int | None = None):
    """The config's model (loaded, cached) on the config's device."""
    model = config.spec.load(config, memory_budget)
    _place(model, resolve_device(config.device))
    return model


def _stack_blocks(model, layer_weights: np.ndarray) -> tuple:
    """Every stack's weights and first mask, where the model has several (model.other_stacks after its forward:
    stack -> traces); the shown stack's entry is this forward's own layer_weights."""
    others = getattr(model, "other_stacks", None)
    if not others:
        return ()
    blocks = []
    for name in model.info.stacks:
        if name == model.stack:  # its mask is the shown layer's (ModelForward.blocks)
            blocks.append((name, layer_weights, None))
        else:
            traces = others[name]
            weights = stack_weights([t.weights for t in traces])
            masks = np.stack([np.broadcast_to(t.mask.cpu().numpy(), (1, 1, *weights.shape[-2:]))[0, 0] for t in traces])
            blocks.append((name, weights, masks))
    return tuple(blocks)


def _check_finite(layer_weights: np.ndarray, info, context_sums: list[Tensor | None]) -> None:
    """A model's softmax over a single text has a key for every query: a NaN or an infinity in its weights
    comes from the numbers themselves (weights, a config value, the input), never from a mask.

    context_sums: each layer's attention context summed by the kernel (None: a layer it did not run). A NaN or
    infinite weight makes its row's context NaN or infinite (NaN · v and inf · 0 are NaN), so a finite context
    sum vouches for the layer's map: its 9 x 512 x 64 values are read instead of the 9 x 512 x 512 of the map
    (benchmarks/README.md, Behind the code). The others are checked by their maps' own sums: a sum is
    finite exactly when every term is (maps of values within ±1 cannot overflow it), no temporary of the map's
    size (np.isfinite(w).all() was slower)."""
    sums = [None if c is None else bool(torch.isfinite(c)) for c in context_sums]
    sums += [None] * (len(layer_weights) - len(sums))
    bad = next((i for i, (w, vouched) in enumerate(zip(layer_weights, sums))
                if not vouched and not torch.isfinite(torch.from_numpy(w).sum())), None)
    if bad is not None:
        name = getattr(info, "name", "the model")
        raise NonFiniteResult(f"{name}: layer {bad}'s attention weights are not finite (NaN or infinite); its "
                              "weights, a config.json value (a norm's epsilon, say) or the input overflow, so "
                              "nothing is drawn or written")


def _forward_shape(model, length: int) -> tuple:
    """(info, length) the memory check counts: an encoder-decoder's forward records every stack's layers
    (model.forward_layers of them) at the longer of its two texts (model.decoder_length)."""
    layers = getattr(model, "forward_layers", None)
    if layers is None:
        return model.info, length
    return replace(model.info, layers=layers), max(length, model.decoder_length)


def _notes(model, device: torch.device) -> tuple[str, ...]:
    """What the status line says of this model's forward: what it lacks, and how it computed."""
    info, notes = model.info, list(getattr(model, "notes", ()))
    if getattr(info, "stages", None) and "scores" not in info.stages:
        notes.append(WEIGHTS_ONLY_NOTE)
    dtype = getattr(info, "dtype", "float32")
    if dtype in ("bfloat16", "float16"):
        notes.append(f"{dtype} checkpoint computed in " + (f"{dtype} (autocast)" if device.type == "cuda" else
                                                             "float32 on the CPU"))
    elif dtype.startswith("gguf"):
        notes.append(f"{dtype} weights dequantised to float32")
    return tuple(notes)
