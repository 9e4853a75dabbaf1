"""attnviz's kernel as transformers' attention: one function registered with `AttentionInterface`.

A family whose modelling code calls `ALL_ATTENTION_FUNCTIONS` (almost every one since transformers
4.48) hands each layer's attention to `kernel_attention` once the model is loaded with
`attn_implementation=ATTN_NAME`. Embeddings, norms, RoPE (whatever its scaling), MLPs and residuals
stay the family's own code; q and k arrive as they enter the dot product (after RoPE and any q/k
norm). What transformers passes maps onto the kernel's arguments:

    scaling -> scale          softcap -> the "capped" stage     position_bias (T5) -> the "biased" stage
    dropout -> dropout_p      s_aux (gpt-oss sinks) -> sink     attention_mask -> mask (True = may attend)

A keyword that would change the arithmetic and that this function does not know is never dropped:
that call runs the family's own eager function instead and records only the weights it returns,
with a note saying why (`Recording.notes`).

A forward's ForwardContext (core/kernel/context.py: its ablation plan, pooling, slab, progress, and the
`Recording` its stages go to) travels in the forward's keyword arguments: every family on the interface hands
its keywords through its layers to the attention function (checked for each in tests/models), so
`base(**inputs, **rec.kwargs)` reaches this function with the context as CONTEXT_KWARG, on whatever thread
runs it (the app's worker and a test may run one model side by side).
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from attnviz.core.kernel.context import CONTEXT_KWARG, ForwardContext
from attnviz.core.kernel.kernel import Trace, attention, merge_heads
from attnviz.core.kernel.mods import ScoreMod, ScoreRecipe
from attnviz.core.kernel.stages import SOFTMAX_STAGES
from attnviz.core.runs.predictions import Residuals

ATTN_NAME = "attnviz"
# Keywords that carry no arithmetic for one call over a whole sequence (cache bookkeeping, the
# positions RoPE has already used, flags), or that the mask already holds (sliding_window).
PASSIVE = frozenset({
    "position_ids", "cache_position", "past_key_values", "past_key_value", "use_cache", "output_attentions",
    "output_hidden_states", "return_dict", "layer_idx", "sliding_window", "position_embeddings", "token_type_ids",
    "num_items_in_batch", "is_causal", "config", "block_sequence_ids", "output_router_logits", "logits_to_keep",
    "deterministic",  # flash attention's switch (ModernBERT): no arithmetic here
})
HANDLED = frozenset({"softcap", "s_aux", "position_bias"})


@dataclass
class Recording:
    """What one forward records: each attention call's Trace, in call order, keyed by the module. It is the
    sink of its forward's ForwardContext (`context`), which the forward passes as `**rec.kwargs`."""

    record: frozenset[str]
    context: ForwardContext = field(default_factory=ForwardContext, repr=False)
    calls: list[tuple[nn.Module, Trace]] = field(default_factory=list)
    inputs: dict[nn.Module, list[Tensor]] = field(default_factory=dict)  # each module's inputs (stage x), per call
    outputs: dict[nn.Module, list[Tensor]] = field(default_factory=dict)  # what it returned (stage output)
    notes: list[str] = field(default_factory=list)
    # the residual stream after each layer (its block's output); a long one goes to a file (predictions.Residuals)
    residuals: Residuals = field(default_factory=Residuals)

    @property
    def kwargs(self) -> dict[str, ForwardContext]:
        """The keyword a transformers forward carries the context in, down to every attention call."""
        return {CONTEXT_KWARG: self.context}

    def add(self, module: nn.Module, trace: Trace) -> None:
        self.calls.append((module, trace))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


@contextmanager
def recording(record, ctx: ForwardContext | None = None) -> Iterator[Recording]:
    """A new Recording, the sink of `ctx` (the forward's context; a fresh one where None) while the block runs a
    forward that passes `**rec.kwargs`."""
    ctx = ctx if ctx is not None else ForwardContext()
    rec = Recording(frozenset(record), context=ctx)
    previous, ctx.recording = ctx.recording, rec
    try:
        yield rec
    finally:
        ctx.recording = previous


def context_in(kwargs: dict) -> ForwardContext | None:
    """The forward's context among the keywords a module was called with (None: not passed down)."""
    return kwargs.get(CONTEXT_KWARG)


def transformers():
    """transformers, imported with the hub offline and attnviz's kernel registered."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # before the first import: huggingface_hub reads it then
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import transformers as tf

    tf.logging.set_verbosity_error()  # missing weights are checked by attnviz and said in one line
    tf.utils.logging.disable_progress_bar()  # "Loading weights" bars on stderr would break the CLI's one line
    _quiet_gguf_reader()
    register()
    return tf


def _quiet_gguf_reader() -> None:
    """transformers' GGUF reader draws its own tqdm bar (not behind disable_progress_bar): switched off."""
    try:
        import transformers.modeling_gguf_pytorch_utils as reader
    except ImportError:  # no gguf support in this transformers
        return
    if not isinstance(reader.tqdm, functools.partial):
        reader.tqdm = functools.partial(reader.tqdm, disable=True)


def register() -> None:
    """Register the kernel (and a boolean mask, True = may attend) under ATTN_NAME; idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTN_NAME, kernel_attention)
    AttentionMaskInterface.register(ATTN_NAME, boolean_mask)


def boolean_mask(*args, **kwargs) -> Tensor | None:
    """transformers' SDPA mask (bool, True = may attend), always built: the kernel has no is_causal
    shortcut, so a causal mask must never be skipped."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def split_mask(mask: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
    """A mask as transformers passes it -> (allowed: bool or None, additive bias or None).

    Boolean: True = may attend. Float (an eager-style mask): values at the dtype's minimum (or -inf)
    block a key; any other non-zero values are a bias added to the scores (kept, never dropped)."""
    if mask is None or mask.dtype == torch.bool:
        return mask, None
    allowed = mask > torch.finfo(mask.dtype).min / 2
    rest = torch.where(allowed, mask, torch.zeros((), dtype=mask.dtype, device=mask.device))
    return (None if bool(allowed.all()) else allowed), (rest if bool(rest.any()) else None)


def _score_mods(bias: Tensor | None, softcap: float | None) -> list[ScoreMod]:
    mods = []
    if bias is not None:  # the rows of the scores at hand (a pooled run computes blocks of rows)
        mods.append(ScoreMod("biased", lambda s, b, h, i, j: s + _bias_block(bias, i, j, s.shape).to(s.dtype)))
    if softcap:
        mods.append(ScoreMod("capped", lambda s, *_: torch.tanh(s / softcap) * softcap))
    return mods


def _bias_block(bias: Tensor, rows: Tensor, cols: Tensor, shape: torch.Size) -> Tensor:
    """A (..., Lq, Lk) bias cut to the block of scores of `shape` whose query rows and key columns the grids
    `rows` and `cols` hold (all of them at once but for a block: a long causal text's blocks also leave out the
    keys after their last row, as T5's decoder past ~1,000 tokens showed)."""
    if bias.shape[-2] not in (1, shape[-2]):
        bias = bias[..., rows.reshape(-1), :]
    if bias.shape[-1] not in (1, shape[-1]):
        bias = bias[..., cols.reshape(-1)]
    return bias


def _causal(lq: int, lk: int, device: torch.device) -> Tensor:
    """Bottom-right causal mask (the queries are the last lq of the lk positions)."""
    return (torch.arange(lq, device=device)[:, None] + (lk - lq)) >= torch.arange(lk, device=device)[None, :]


def kernel_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                     scaling: float | None = None, dropout: float = 0.0, **kwargs) -> tuple[Tensor, Tensor]:
    """transformers' attention signature on attnviz's kernel: query (B, H, Lq, dh), key/value
    (B, Hkv, Lk, dh) -> (context (B, Lq, H, dv), weights (B, H, Lq, Lk)). The forward's ForwardContext comes
    in kwargs (CONTEXT_KWARG; a plain call without it)."""
    ctx = kwargs.pop(CONTEXT_KWARG, None) or ForwardContext()
    rec = ctx.recording
    unknown = sorted(k for k, v in kwargs.items() if v is not None and k not in PASSIVE | HANDLED)
    if unknown:
        return _family_eager(module, ctx, unknown, query, key, value, attention_mask, scaling, dropout, **kwargs)
    dtype = query.dtype
    allowed, extra = split_mask(attention_mask)
    bias = kwargs.get("position_bias")
    if extra is not None:
        bias = extra if bias is None else bias + extra
    if allowed is None and kwargs.get("is_causal") and query.shape[2] > 1:
        allowed = _causal(query.shape[2], key.shape[2], query.device)
    sink = kwargs.get("s_aux")
    # The families' softmax runs in float32 whatever the checkpoint's dtype: so does the kernel here
    q, k, v = (t.float() for t in (query, key, value))
    scale, softcap = scaling if scaling is not None else 1 / math.sqrt(q.shape[-1]), kwargs.get("softcap")
    context, trace = attention(
        q, k, v, mask=allowed, scale=scale,
        score_mods=_score_mods(bias, softcap), sink=None if sink is None else sink.float(),
        dropout_p=dropout, training=module.training, ctx=ctx,
        record=(rec.record | {"weights"}) if rec and ctx.keeps_tokens() else {"weights"})  # pooled: maybe maps alone
    if rec is not None:
        trace.keep("context", merge_heads(context))
        trace.recipe = ScoreRecipe(scale, softcap or None, biased=bias is not None)
        rec.add(module, trace)
    weights = trace.get("weights")  # absent from a pooled run: the maps went to its Pooling
    return context.transpose(1, 2).contiguous().to(dtype), None if weights is None else weights.to(dtype)


def _family_eager(module: nn.Module, ctx: ForwardContext, unknown: list[str], *args, **kwargs):
    """Run the family's own eager attention for a call with keywords the kernel does not know."""
    rec = ctx.recording
    family = sys.modules[type(module).__module__]
    eager = getattr(family, "eager_attention_forward", None)
    if eager is None:
        raise NotImplementedError(f"{type(module).__name__} passes {', '.join(unknown)}, which attnviz's kernel does "
                                  "not know, and its family has no eager attention function to run instead")
    query, key, value, mask, scaling, dropout = args
    if mask is not None and mask.dtype == torch.bool:  # eager functions add their mask: 0 / the dtype's minimum
        mask = torch.zeros(mask.shape, dtype=query.dtype, device=mask.device).masked_fill_(
            ~mask, torch.finfo(query.dtype).min)
    out, weights = eager(module, query, key, value, mask, scaling=scaling, dropout=dropout, **kwargs)
    out = ctx.knock_out(out.transpose(1, 2)).transpose(1, 2)  # (B, Lq, H, dv): ablation as the kernel does it
    if rec is not None:
        trace = Trace(rec.record & SOFTMAX_STAGES)
        trace.keep("weights", weights.float()), trace.keep("dropped", weights.float())
        trace["mask"] = weights[:1, :1] > 0
        rec.add(module, trace)
        rec.note(f"{type(module).__name__} passes {', '.join(unknown)}: those layers ran the family's own eager "
                 "attention and record only the weights")
    return out, weights
