"""attnviz.core: the attention engine. Pure PyTorch and NumPy; never imports Qt."""

from .config import DTYPES, MASK_KINDS, ConfigError, RunConfig, load_config
from .kernel import AttentionTrace, multihead_attention
from .masks import causal_mask, fully_masked_rows, generate_mask, matrix_mask, padding_mask, window_mask
from .modules import CausalSelfAttention, ContextCrossAttention, CrossAttention, SelfAttention
from .presets import list_presets, load_preset
from .runner import RunResult, build_mask, estimate_memory, resolve_device, run
from .variants import VARIANTS, VariantSpec

__all__ = [
    "DTYPES", "MASK_KINDS", "VARIANTS", "AttentionTrace", "CausalSelfAttention", "ConfigError",
    "ContextCrossAttention", "CrossAttention", "RunConfig", "RunResult", "SelfAttention", "VariantSpec",
    "build_mask", "causal_mask", "estimate_memory", "fully_masked_rows", "generate_mask",
    "list_presets", "load_config", "load_preset", "matrix_mask", "multihead_attention", "padding_mask",
    "resolve_device", "run", "window_mask",
]
