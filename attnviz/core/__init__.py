"""attnviz.core: the attention engine. Pure PyTorch and NumPy; never imports Qt.

Its public names load on first use (PEP 562), so `from attnviz.core import RunConfig` reads the configuration
without importing the engine and torch.
"""

from __future__ import annotations

from importlib import import_module

# the module (under attnviz.core) -> the public names it defines
_EXPORTS = {
    "analysis.attribution": "LogitAttribution head_logit_attribution",
    "analysis.circuits": "HeadCircuits composition_scores copying_scores head_circuits",
    "analysis.heads": "HEAD_TYPES THRESHOLDS head_effects head_scores",
    "analysis.patching": "patch_heads patch_residual",
    "kernel.kernel": "Trace attention multihead_attention repeat_kv",
    "kernel.kinds": "POSITIONS",
    "kernel.masks": "MASKS causal_mask fully_masked_rows generate_mask matrix_mask padding_mask window_mask",
    "kernel.mods": "AttentionOptions alibi_slopes rope",
    "kernel.stages": "MAP_STAGES STAGES STAGE_NAMES Stage",
    "runs.config": "ConfigError DTYPES MASK_KINDS POSITION_KINDS RunConfig",
    "runs.presets": "list_presets load_preset",
    "runs.runner": "RunResult build_mask estimate_memory resolve_device run run_stages",
    "runs.userfiles": "load_config saved_json",
    "variants.differential": "DifferentialAttention",
    "variants.modules": "CausalSelfAttention ContextCrossAttention CrossAttention SelfAttention",
    "variants.registry": "VARIANTS VariantSpec",
}
_HOMES = {name: f"attnviz.core.{module}" for module, names in _EXPORTS.items() for name in names.split()}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'attnviz.core' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
