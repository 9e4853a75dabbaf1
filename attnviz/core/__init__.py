"""attnviz.core: the attention engine. Pure PyTorch and NumPy; never imports Qt."""

from attnviz.core.analysis.attribution import LogitAttribution, head_logit_attribution
from attnviz.core.analysis.circuits import HeadCircuits, composition_scores, copying_scores, head_circuits
from attnviz.core.analysis.heads import HEAD_TYPES, THRESHOLDS, head_effects, head_scores
from attnviz.core.analysis.patching import patch_heads, patch_residual
from attnviz.core.kernel.kernel import Trace, attention, multihead_attention, repeat_kv
from attnviz.core.kernel.masks import (
    MASKS,
    causal_mask,
    fully_masked_rows,
    generate_mask,
    matrix_mask,
    padding_mask,
    window_mask,
)
from attnviz.core.kernel.mods import POSITIONS, AttentionOptions, alibi_slopes, rope
from attnviz.core.kernel.stages import MAP_STAGES, STAGE_NAMES, STAGES, Stage
from attnviz.core.runs.config import DTYPES, MASK_KINDS, POSITION_KINDS, ConfigError, RunConfig
from attnviz.core.runs.presets import list_presets, load_preset
from attnviz.core.runs.runner import RunResult, build_mask, estimate_memory, resolve_device, run, run_stages
from attnviz.core.runs.userfiles import load_config, saved_json
from attnviz.core.variants.differential import DifferentialAttention
from attnviz.core.variants.modules import CausalSelfAttention, ContextCrossAttention, CrossAttention, SelfAttention
from attnviz.core.variants.registry import VARIANTS, VariantSpec

__all__ = [
    "DTYPES", "HEAD_TYPES", "MAP_STAGES", "MASKS", "MASK_KINDS", "POSITIONS", "POSITION_KINDS", "STAGES",
    "STAGE_NAMES", "THRESHOLDS", "VARIANTS", "AttentionOptions", "CausalSelfAttention",
    "ConfigError", "ContextCrossAttention", "CrossAttention", "DifferentialAttention", "RunConfig", "RunResult",
    "SelfAttention", "Stage", "HeadCircuits", "LogitAttribution", "composition_scores", "copying_scores",
    "head_circuits", "head_logit_attribution", "patch_heads", "patch_residual", "Trace", "VariantSpec",
    "alibi_slopes", "attention", "build_mask", "causal_mask",
    "estimate_memory", "fully_masked_rows", "generate_mask", "head_effects", "head_scores", "list_presets",
    "load_config", "load_preset", "matrix_mask", "multihead_attention", "padding_mask", "repeat_kv",
    "resolve_device", "rope", "run", "run_stages", "saved_json", "window_mask",
]
