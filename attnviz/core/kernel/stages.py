"""The stages of one attention call, in order: the one list the trace, RunResult, the NPZ export,
the CLI's --view choices and the views all read.

Shapes: B batch, H query heads, Hkv key/value heads (H for plain multi-head attention), Lq/Lkv
query/key lengths, dh head width, dv value width per head, d_in input width, d width of the heads
merged. Differential attention computes two maps per head: its `qk` ... `weights` stages have 2H
heads (the pairs 2h, 2h+1 belong to head h) and `combined` is the signed map of the H heads.
"""

from __future__ import annotations

from dataclasses import dataclass

# Who produces a stage, and so when a run has it
INPUT = "input"  # the module's input
PROJECTION = "projection"  # the module's own projections (q, k, v; the output projection)
ROTATION = "rotation"  # the kernel's RoPE: only with position rope (a model family rotates in its own code)
SCORE_MOD = "score mod"  # a score mod (ALiBi, soft cap): only when that mod is on
KERNEL = "kernel"  # the attention kernel, every call
DIFFERENTIAL = "differential"  # only a differential head (two maps per head); no model family has one


@dataclass(frozen=True)
class Stage:
    name: str
    description: str
    shape: str
    is_map: bool = False  # a (B, heads, Lq, Lkv) attention map, drawable as a heatmap grid
    title: str = ""  # how the pipeline, hover and figures spell it
    made_by: str = KERNEL
    always_kept: bool = False  # every run keeps it, whatever it was asked to record (the maps views draw)
    keyed: bool = False  # a per-token stage with one row per key (k, v), not per query
    operand: bool = False  # q, k or v as the dot products read them: kept by the caller, not per block
    pre_mask: bool = False  # a map before the mask: defined where masked too (computed for every key)
    softmax: bool = False  # the softmax weights as a map (dropped is the same map in eval mode)
    probability: bool = False  # rows are shares that sum to 1: drawn in the weights' colormap and scale
    module_io: bool = False  # the attention module's input or output: hooks on any model's module record it

    @property
    def per_query(self) -> bool:
        """One row per query: every map, and the per-token stages that are not keyed."""
        return not self.keyed


MAP_SHAPE = "(B, H, Lq, Lkv)"
STAGES: tuple[Stage, ...] = (
    Stage("x", "the input tokens the queries come from", "(B, Lq, d_in)", title="x (input)", made_by=INPUT,
          module_io=True),
    Stage("q_proj", "queries from the projection, before the position rotation (RoPE)", "(B, H, Lq, dh)",
          title="q (projected)", made_by=ROTATION, operand=True),
    Stage("k_proj", "keys from the projection, before the position rotation (RoPE)", "(B, Hkv, Lkv, dh)",
          title="k (projected)", made_by=ROTATION, keyed=True, operand=True),
    Stage("q", "queries as they enter the dot product (after RoPE)", "(B, H, Lq, dh)", title="q", made_by=PROJECTION,
          operand=True),
    Stage("k", "keys as they enter the dot product (after RoPE)", "(B, Hkv, Lkv, dh)", title="k", made_by=PROJECTION,
          keyed=True, operand=True),
    Stage("v", "values", "(B, Hkv, Lkv, dv)", title="v", made_by=PROJECTION, keyed=True, operand=True),
    Stage("qk", "raw dot products Q·Kᵀ", MAP_SHAPE, True, "Q·Kᵀ", pre_mask=True),
    Stage("scaled", "Q·Kᵀ times the scale (1/sqrt(d_head) unless qk_scale says otherwise)", MAP_SHAPE, True, "scaled",
          pre_mask=True),
    Stage("biased", "plus the position bias (ALiBi)", MAP_SHAPE, True, "+ bias", SCORE_MOD, pre_mask=True),
    Stage("capped", "soft-capped: cap·tanh(s / cap)", MAP_SHAPE, True, "capped", SCORE_MOD, pre_mask=True),
    Stage("scores", "masked: the final pre-softmax logits (-inf where a key may not be seen)", MAP_SHAPE, True,
          "masked"),
    Stage("weights", "softmax over the keys (rows sum to 1, less with a sink logit)", MAP_SHAPE, True, "softmax",
          always_kept=True, softmax=True, probability=True),
    Stage("combined", "differential attention: softmax₁ − λ·softmax₂ per head (signed)", MAP_SHAPE, True, "combined",
          DIFFERENTIAL),
    Stage("dropped", "what multiplied V: the weights after dropout (the weights themselves in eval mode)",
          MAP_SHAPE, True, "dropout", always_kept=True, softmax=True, probability=True),
    Stage("value_weighted", "value-weighted attention: weights · ‖v_j W_O,h‖, rows renormalised (Kobayashi et al. "
          "2020): where the head's output comes from", MAP_SHAPE, True, "value-weighted", probability=True),
    Stage("context", "weights @ V, heads merged, before the output projection", "(B, Lq, d)", title="concat heads"),
    Stage("output", "the module's output, after the output projection", "(B, Lq, d_out)", title="output projection",
          made_by=PROJECTION, always_kept=True, module_io=True),
)

STAGE_NAMES: tuple[str, ...] = tuple(s.name for s in STAGES)
MAP_STAGES: tuple[str, ...] = tuple(s.name for s in STAGES if s.is_map)
BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}

# What a run keeps unless asked for more: what today's views, hover and exports read.
DEFAULT_RECORD: frozenset[str] = frozenset(
    {"x", "q", "k", "v", "scores", "weights", "combined", "dropped", "context", "output"})
ALL_STAGES: frozenset[str] = frozenset(STAGE_NAMES)
ALWAYS_KEPT: frozenset[str] = frozenset(s.name for s in STAGES if s.always_kept)
# The subsets the kernel, the model families and the views read, each from its Stage field
SOFTMAX_STAGES: frozenset[str] = frozenset(s.name for s in STAGES if s.softmax)
PROBABILITY_STAGES: frozenset[str] = frozenset(s.name for s in STAGES if s.probability)
PRE_MASK_STAGES: frozenset[str] = frozenset(s.name for s in STAGES if s.pre_mask)
OPERAND_STAGES: frozenset[str] = frozenset(s.name for s in STAGES if s.operand)
MODULE_IO_STAGES: frozenset[str] = frozenset(s.name for s in STAGES if s.module_io)
QUERY_TOKEN_STAGES: frozenset[str] = frozenset(s.name for s in STAGES if not s.is_map and s.per_query)
KEY_TOKEN_STAGES: frozenset[str] = frozenset(s.name for s in STAGES if s.keyed)


def stages_made_by(*producers: str) -> frozenset[str]:
    """The stages those producers make (e.g. stages_made_by(ROTATION): what only a RoPE run has)."""
    return frozenset(s.name for s in STAGES if s.made_by in producers)


def ordered(names) -> list[str]:
    """The given stage names in pipeline order (unknown names raise KeyError)."""
    wanted = set(names)
    for name in wanted:
        BY_NAME[name]  # noqa: B018 (raises for a name that is not a stage)
    return [n for n in STAGE_NAMES if n in wanted]
