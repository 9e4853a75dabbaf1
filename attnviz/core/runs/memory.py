"""How much memory a run needs and how much it may take: every estimate attnviz checks before it allocates,
one function each, and the budget rule once.

The rule. A run may take the memory_budget given, else MEMORY_FRACTION of the free memory on its device
(memory_allowance); `over_budget` compares an estimate with it, and `pools` says when maps are large
enough that pool="auto" pools them (over pooling.AUTO_BYTES or over the budget).

The estimates, all in bytes and counted generously (the maps dominate):
    seed_bytes         a seed run at its peak on its device (runner.estimate_memory: of the stages it records)
    result_bytes       a seed run's float32 result in host memory (what a CUDA run copies back)
    pooled_seed_bytes  a pooled seed run at its peak
    seed_map_bytes     a seed run's kept maps, as pool="auto" weighs them
    forward_bytes      a model's forward, whole or pooled
    forward_map_bytes  a model forward's kept maps, as pool="auto" weighs them
(a model's weights: models/folder.parameter_bytes reads them off the file headers.)
"""

from __future__ import annotations

import torch

from attnviz.core.kernel.pooling import AUTO_BYTES, POOLED_BLOCK_BYTES, fitting_target, pooled_bytes
from attnviz.core.kernel.stages import BY_NAME, STAGE_NAMES
from attnviz.core.runs import device as devices
from attnviz.core.runs.config import RunConfig
from attnviz.core.runs.device import MemoryBudgetError, format_bytes  # noqa: F401 - the checks' error and wording
from attnviz.core.runs.predictions import SPILL_BYTES

MEMORY_FRACTION = 0.5  # default budget: this share of the free RAM (or free GPU memory)
FORWARD_OVERHEAD = 64 << 20  # activations and the kernel's temporaries besides the maps, generously


def memory_allowance(budget: int | None, device: torch.device | None = None) -> tuple[int, str]:
    """(bytes a run may take, what that figure is): the budget given, else MEMORY_FRACTION of the free memory
    on `device` (the CPU where None: a model's weights and every result's copy live there)."""
    if budget is not None:
        return budget, "the memory_budget given"
    where = torch.device("cpu") if device is None else device
    free = devices.available_memory(where)  # read through the module: tests stand in for the free memory
    return int(free * MEMORY_FRACTION), f"{MEMORY_FRACTION:.0%} of the free memory on {where}"


def over_budget(need: int, budget: int | None, device: torch.device | None = None) -> tuple[int, str] | None:
    """(bytes allowed, what that figure is) where `need` exceeds the budget on `device` (None: the CPU), else
    None: the one comparison every check makes."""
    allowed, source = memory_allowance(budget, device)
    return None if need <= allowed else (allowed, source)


def pools(map_bytes: int, budget: int | None, device: torch.device | None = None) -> bool:
    """Whether maps of `map_bytes` are pooled when pool="auto": over AUTO_BYTES, or over the budget."""
    return map_bytes > min(AUTO_BYTES, memory_allowance(budget, device)[0])


def _widths(config: RunConfig) -> int:
    """The widths a seed run's tokens carry: d_model, and d_out and d_cross where the variant has them."""
    return config.d_model + sum(getattr(config, w) for w in ("d_out", "d_cross") if config.applies(w))


def kept_maps(config: RunConfig, keep: frozenset[str]) -> int:
    """How many (B, H, Lq, Lkv) maps a run keeps of the stages `keep` (a differential head's stages before
    `combined` count twice; `dropped` counts only when dropout makes it a map of its own)."""
    before_combine = STAGE_NAMES.index("combined")
    count = 0
    for name in keep:
        if not BY_NAME[name].is_map or (name == "dropped" and not config.dropout_active):
            continue
        count += config.spec.head_factor if STAGE_NAMES.index(name) < before_combine else 1
    return count


def seed_bytes(config: RunConfig, keep: frozenset[str]) -> int:
    """Bytes a seed run needs at its peak, counted generously (attention maps dominate)."""
    elem = torch.empty((), dtype=getattr(torch, config.dtype)).element_size()
    b, h, lq, lkv = config.batch, config.heads, config.seq_q, config.lkv
    maps = b * h * lq * lkv
    kept = kept_maps(config, keep)
    transient = (1 if config.dropout_active else 0) + (1 if config.attention_options().score_mods(h) else 0)
    live = max(kept + transient, 2)  # e.g. scores, weights (+ noise, dropped)
    to_float32 = (kept + 1) * 4 if elem != 4 else 0  # the result is converted to float32 NumPy
    widths = _widths(config)
    tokens = b * (lq + lkv) * widths * 8 * max(elem, 4)
    params = 4 * widths * widths * 4
    return maps * (live * elem + to_float32) + tokens + params


def result_bytes(config: RunConfig, keep: frozenset[str]) -> int:
    """Bytes of the float32 RunResult in host memory: a CUDA run copies every trace array back."""
    b, h, lq, lkv = config.batch, config.heads, config.seq_q, config.lkv
    maps = b * h * lq * lkv * kept_maps(config, keep)  # e.g. scores, weights (+ dropped)
    tokens = b * (lq + lkv) * _widths(config) * 4  # q, k, v, context and output, generously
    return (maps + tokens) * 4 + b * lq * lkv + b * h * lq  # + the bool mask and row flags


def pooled_seed_bytes(config: RunConfig, target: int = 0) -> int:
    """Bytes a pooled seed run needs at its peak: the tokens' stages, the weights, the pooled maps (and a
    differential head's pair), the bool mask and a few blocks of scores; never a whole float map."""
    widths = _widths(config)
    maps = config.batch * config.heads * (config.spec.head_factor + 1)  # the maps kept, and the block's pooled
    mask = config.batch * config.seq_q * config.lkv  # bool, generously: per batch item
    return (config.batch * (config.seq_q + config.lkv) * widths * 8 * 4 + 4 * widths * widths * 4
            + pooled_bytes(1, maps, config.seq_q, config.lkv, target) + mask + 4 * POOLED_BLOCK_BYTES)


def seed_map_bytes(config: RunConfig, keep: frozenset[str]) -> int:
    """A seed run's kept maps as float32, at least one (what pool="auto" weighs)."""
    return config.batch * config.heads * config.seq_q * config.lkv * 4 * max(kept_maps(config, keep), 1)


def map_count(keep: frozenset[str]) -> int:
    """The maps a model's forward keeps per layer (dropped is the weights in eval mode: not counted)."""
    return sum(1 for n in keep if BY_NAME[n].is_map and n != "dropped")


def forward_bytes(info, length: int, keep: frozenset[str], pooled: bool = False) -> int:
    """Bytes one forward keeps and needs at its peak: every layer's kept maps (float32), the stacked
    weights, one layer's temporaries, the per-token stages. Pooled (backed.model_pooling): every layer's pooled
    map (written once, no stacked copy), one layer's per-token stages, the residual stream after each layer (the
    logit lens reads it) up to predictions.SPILL_BYTES, one call's bool mask and a few blocks; never a whole map.
    Both count the float32 slice a compact weight makes for one call (info.weight_piece, up to 64 MB)."""
    tokens = length * info.d_model * 4 * 8  # x, q, k, v, context, output and the layer's activations, generously
    piece = getattr(info, "weight_piece", 0)  # a compact weight's float32 slice, made per call (models/compact.py)
    if pooled:
        heads = info.layers * info.heads
        maps = pooled_bytes(info.layers, info.heads, length, length, fitting_target(heads, length, length))
        residuals = min(info.layers * length * info.d_model * 4, SPILL_BYTES)  # the rest goes to a file
        return maps + tokens + residuals + length * length + 4 * POOLED_BLOCK_BYTES + FORWARD_OVERHEAD + piece
    one_map = info.heads * length * length * 4
    return info.layers * (map_count(keep) * one_map + tokens) + one_map * (info.layers + 2) + FORWARD_OVERHEAD + piece


def forward_map_bytes(info, length: int, keep: frozenset[str]) -> int:
    """Every layer's kept maps of a model's forward as float32, at least one per layer (what pool="auto" weighs)."""
    return info.layers * info.heads * length * length * 4 * max(map_count(keep), 1)
