"""The kernel's choices by name, without torch: the mask kinds, position encodings, ablations and pooling
modes a configuration may name, what each one reads, and the head counts a width allows.

RunConfig validates against these alone, so it imports without the engine; masks.py, mods.py, ablation.py
and pooling.py attach the computation to the same names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WINDOW_RULE = "the query and the `window` keys before it"


@dataclass(frozen=True)
class MaskInfo:
    name: str
    description: str
    params: tuple[str, ...]  # the RunConfig fields it reads
    causal: bool = False  # whether it is a causal kind (sink keys stay behind the query)
    align: str = "top-left"


MASK_INFO: dict[str, MaskInfo] = {k.name: k for k in [
    MaskInfo("none", "No mask: every query sees every key", ()),
    MaskInfo("causal", "Causal, top-left aligned (the seeds' triu(1), SDPA is_causal)", (), causal=True),
    MaskInfo("causal-bottom-right", "Causal, bottom-right aligned (decoding / KV-cache view)", (), causal=True,
             align="bottom-right"),
    MaskInfo("padding", "Key padding: batch item b sees its first kv_lengths[b] keys", ("kv_lengths",)),
    MaskInfo("window", f"Causal sliding window: {WINDOW_RULE} (Mistral)", ("window", "sinks"), causal=True),
    MaskInfo("window-bidirectional", "Sliding window, both sides: keys within `window` of the query (Longformer)",
             ("window", "sinks")),
]}


@dataclass(frozen=True)
class PositionKind:
    name: str
    description: str
    families: str  # which model families use it (for tooltips)
    params: tuple[str, ...] = ()
    interleaved: bool | None = None  # RoPE kinds: the pairing; None = not a rotation


POSITIONS: dict[str, PositionKind] = {p.name: p for p in [
    PositionKind("none", "No position information in the attention (the seeds)", "the tutorials, BERT, GPT-2"),
    PositionKind("rope", "Rotary embedding, rotating halves (rotate_half)", "GPT-NeoX, Llama, Mistral, Qwen2",
                 ("rope_base",), interleaved=False),
    PositionKind("rope-interleaved", "Rotary embedding, rotating adjacent pairs", "GPT-J", ("rope_base",),
                 interleaved=True),
    PositionKind("alibi", "Linear distance penalty per head (ALiBi slopes)", "BLOOM, MPT"),
]}

ABLATIONS = {"zero": "the head's output set to 0", "mean": "the head's output set to its mean over the positions"}
SPEC = re.compile(r"(\d+)\.(\d+|\*)")
SPEC_FIX = 'write heads as "layer.head", e.g. 3.5, or 4.* for every head of layer 4, separated by commas'

POOL_MODES = {"auto": "pool when every layer's maps would need more than 1 GiB or the memory budget",
              "always": "always pool the maps (statistics stay exact)",
              "never": "never pool: a run whose maps do not fit is refused, with the size"}


def spec_problem(spec: str) -> str | None:
    """What is wrong with one "layer.head" string, or None."""
    if not isinstance(spec, str) or not SPEC.fullmatch(spec.strip()):
        return f"{spec!r} is not layer.head"
    return None


def nearest_heads(width: int, heads: int) -> list[int]:
    """The divisors of `width` closest to `heads` (one below and one above when both exist)."""
    divisors = [h for h in range(1, max(width, 1) + 1) if width % h == 0]
    below = [h for h in divisors if h < heads]
    above = [h for h in divisors if h > heads]
    return ([below[-1]] if below else []) + ([above[0]] if above else [])
