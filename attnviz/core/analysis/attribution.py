"""Direct logit attribution: how much each head's output, and each key it read, adds to one logit.

`head_logit_attribution(config, position=None, token=None, baseline=None)` runs the text once and splits
total = logit(token) - logit(baseline) at `position` (defaults: the last position, its top-1 token, no baseline)
over the residual stream's parts, with every norm between a head and the logits frozen at that position (its
normalisation read back from what it computed there, as TransformerLens' apply_ln_to_stack does): the final
norm, and Gemma 2's norm of the attention's output. Frozen, each norm is linear, so

    heads.sum() + rest == total

where a head's term is its output ctx_h·W_O,h through the frozen norms onto W_U[:, token] - W_U[:, baseline],
and `rest` holds the embeddings, the MLPs, the attention's output bias, the norms' and the unembedding's biases
and (Gemma 2) what the final soft cap takes away (`parts` splits it). A head's output is Σ_j α_pj·v_j·W_O,h,
so `sources` splits each head's term over the key positions j it read, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attnviz.core.analysis.circuit_parts import CircuitParts, LayerParts, model_parts, one_token, seeing
from attnviz.core.runs.config import ConfigError, RunConfig
from attnviz.core.runs.model_lock import model_lock


@dataclass(frozen=True)
class LogitAttribution:
    heads: np.ndarray  # (layers, heads)
    sources: np.ndarray  # (layers, heads, L): each head's term split over the key positions it read
    rest: float  # embeddings, MLPs, biases (and a soft cap's share): total - heads.sum()
    total: float  # the model's own logit(token) - logit(baseline) at position
    parts: dict[str, float]  # rest, split
    position: int
    token: int
    baseline: int | None
    tokens: tuple[str, ...]  # the text's tokens (the sources' axis)


def check_position(position: int | None, length: int) -> int:
    if position is None:
        return length - 1
    if not -length <= position < length:
        raise ConfigError("position", position, f"the text has {length} tokens (positions 0..{length - 1})",
                          f"choose a position from 0 to {length - 1}", suggestions=(length - 1,))
    return position % length


def token_id(model, parts: CircuitParts, token: int | str, field_name: str) -> int:
    """An id given as an int or as a string the tokenizer makes one token."""
    if isinstance(token, str):
        return one_token(parts, token, field_name, model.label)
    if not 0 <= int(token) < parts.vocab_size:
        raise ConfigError(field_name, token, f"the model has {parts.vocab_size} tokens (ids 0..{parts.vocab_size - 1})",
                          "choose a token of the vocabulary")
    return int(token)


def _head_outputs(layer: LayerParts, seen, position: int) -> Tensor:
    """(H, d): each head's output at `position` as it joins the residual stream (post-norm frozen)."""
    heads = layer.w_o.shape[0]
    ctx = seen.inputs[layer.out_proj][0, position].double().reshape(heads, -1)  # (H, dv)
    return _into_residual(layer, seen, torch.einsum("hv,hvd->hd", ctx, layer.w_o.double()), position)


def _into_residual(layer: LayerParts, seen, out: Tensor, position: int) -> Tensor:
    post = layer.post_norm
    if post is None:
        return out
    k = post.factor(seen.inputs[post.module][0, position], seen.outputs[post.module][0, position])
    return post.frozen(out, k)


def _sources(layer: LayerParts, trace, seen, position: int) -> Tensor:
    """(H, L, d): each head's output at `position` split over its key positions, Σ_j α_pj v_j W_O,h."""
    heads = layer.w_o.shape[0]
    alpha = trace["weights"][0, :, position].double()  # (H, L)
    kv = torch.tensor([layer.kv_head(h) for h in range(heads)], device=alpha.device)
    v = trace["v"][0].double()[kv]  # (H, L, dv)
    out = torch.einsum("hl,hlv,hvd->hld", alpha, v, layer.w_o.double().to(alpha.device))
    return _into_residual(layer, seen, out, position)


def head_logit_attribution(config: RunConfig, position: int | None = None, token: int | str | None = None,
                           baseline: int | str | None = None) -> LogitAttribution:
    """Each head's direct share of logit(token) - logit(baseline) at `position` (see the module docstring)."""
    model, parts = model_parts(config)
    encoded = model.encode(config.text)
    ids = list(encoded.ids)
    p = check_position(position, len(ids))
    final = parts.final_norm
    watched = [final.module] + [m for lp in parts.layers for m in (lp.out_proj, lp.post_norm and lp.post_norm.module)
                                if m is not None]
    with model_lock(model), torch.inference_mode(), seeing(watched) as seen:  # hooks on the shared model
        hidden, traces = model.forward(torch.tensor([ids]), frozenset({"weights", "v"}))
        logits = model.logits(hidden)[0, p].double()
    tok = int(logits.argmax()) if token is None else token_id(model, parts, token, "token")
    base = None if baseline is None else token_id(model, parts, baseline, "baseline")
    u = parts.unembed[:, tok].double() - (0 if base is None else parts.unembed[:, base].double())
    total = float(logits[tok] - (0 if base is None else logits[base]))
    with torch.inference_mode():
        k = final.factor(seen.inputs[final.module][0, p], seen.outputs[final.module][0, p])
        into = [_head_outputs(lp, seen, p) for lp in parts.layers]  # each (H, d)
        heads = torch.stack([final.frozen(o, k) @ u.to(o.device) for o in into])
        sources = torch.stack([final.frozen(_sources(lp, t, seen, p), k) @ u.to(k.device)
                               for lp, t in zip(parts.layers, traces)])
        others = seen.inputs[final.module][0, p].double() - sum(o.sum(0) for o in into)
        split = {"embeddings, MLPs and attention biases": float(final.frozen(others, k) @ u.to(k.device)),
                 "norm and unembedding biases": _bias_term(parts, u, tok, base)}
    if parts.softcap:
        split["final soft cap"] = total - float(heads.sum()) - sum(split.values())
    return LogitAttribution(heads.cpu().numpy(), sources.cpu().numpy(), sum(split.values()), total, split, p, tok,
                            base, tuple(encoded.tokens))


def _bias_term(parts: CircuitParts, u: Tensor, tok: int, base: int | None) -> float:
    term = 0.0
    if parts.final_norm.bias is not None:
        term += float(parts.final_norm.bias.double() @ u.to(parts.final_norm.bias.device))
    b = parts.unembed_bias
    if b is not None:
        term += float(b[tok]) - (0.0 if base is None else float(b[base]))
    return term
