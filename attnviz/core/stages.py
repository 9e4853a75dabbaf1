"""The stages of one attention call, in order: the one list the trace, RunResult, the NPZ export,
the CLI's --view choices and the views all read.

Shapes: B batch, H query heads, Hkv key/value heads (H for plain multi-head attention), Lq/Lkv
query/key lengths, dh head width, dv value width per head, d_in input width, d width of the heads
merged. Differential attention computes two maps per head: its `qk` ... `weights` stages have 2H
heads (the pairs 2h, 2h+1 belong to head h) and `combined` is the signed map of the H heads.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    description: str
    shape: str
    is_map: bool = False  # a (B, heads, Lq, Lkv) attention map, drawable as a heatmap grid


STAGES: tuple[Stage, ...] = (
    Stage("x", "the input tokens the queries come from", "(B, Lq, d_in)"),
    Stage("q_proj", "queries from the projection, before the position rotation (RoPE)", "(B, H, Lq, dh)"),
    Stage("k_proj", "keys from the projection, before the position rotation (RoPE)", "(B, Hkv, Lkv, dh)"),
    Stage("q", "queries as they enter the dot product (after RoPE)", "(B, H, Lq, dh)"),
    Stage("k", "keys as they enter the dot product (after RoPE)", "(B, Hkv, Lkv, dh)"),
    Stage("v", "values", "(B, Hkv, Lkv, dv)"),
    Stage("qk", "raw dot products Q·Kᵀ", "(B, H, Lq, Lkv)", True),
    Stage("scaled", "Q·Kᵀ times the scale (1/sqrt(d_head) unless qk_scale says otherwise)", "(B, H, Lq, Lkv)", True),
    Stage("biased", "plus the position bias (ALiBi)", "(B, H, Lq, Lkv)", True),
    Stage("capped", "soft-capped: cap·tanh(s / cap)", "(B, H, Lq, Lkv)", True),
    Stage("scores", "masked: the final pre-softmax logits (-inf where a key may not be seen)",
          "(B, H, Lq, Lkv)", True),
    Stage("weights", "softmax over the keys (rows sum to 1, less with a sink logit)", "(B, H, Lq, Lkv)", True),
    Stage("combined", "differential attention: softmax₁ − λ·softmax₂ per head (signed)", "(B, H, Lq, Lkv)", True),
    Stage("dropped", "what multiplied V: the weights after dropout (the weights themselves in eval mode)",
          "(B, H, Lq, Lkv)", True),
    Stage("value_weighted", "value-weighted attention: weights · ‖v_j W_O,h‖, rows renormalised (Kobayashi et al. "
          "2020): where the head's output comes from", "(B, H, Lq, Lkv)", True),
    Stage("context", "weights @ V, heads merged, before the output projection", "(B, Lq, d)"),
    Stage("output", "the module's output, after the output projection", "(B, Lq, d_out)"),
)

STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
MAP_STAGES: tuple[str, ...] = tuple(s.name for s in STAGES if s.is_map)
BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}

# What a run keeps unless asked for more: what today's views, hover and exports read.
DEFAULT_RECORD: frozenset[str] = frozenset(
    {"x", "q", "k", "v", "scores", "weights", "combined", "dropped", "context", "output"})
ALL_STAGES: frozenset[str] = frozenset(STAGE_NAMES)


def ordered(names) -> list[str]:
    """The given stage names in pipeline order (unknown names raise KeyError)."""
    wanted = set(names)
    for name in wanted:
        BY_NAME[name]  # noqa: B018 (raises for a name that is not a stage)
    return [n for n in STAGE_NAMES if n in wanted]
