"""A head's QK and OV circuits, their copying scores, and how heads compose (Elhage et al., 2021).

`head_circuits(config, layer, head)` -> HeadCircuits: the QK circuit (which token attends to which: rows the
query's token, columns the key's; q·k before the scale) and the OV circuit (what attending to a token writes
toward each output token: rows the attended token, columns the output token's logit), over one token set:

- the model's whole vocabulary where it is small and positions do not rotate q and k (the toys), `over`
  "vocabulary";
- else the text's own tokens (n x n, at the text's positions: RoPE rotates q and k where they stand), `over`
  "text".

Each token's embedding goes through the norm before attention as the model applies it (centring, scale, bias,
Gemma's 1 + w) and then the model's own projections (biases, RoPE, q/k norms included): the attention modules'
input is replaced by norm(W_E[token]) in one forward. The OV circuit goes on through W_O, Gemma 2's post-attention
norm scale and the final norm's scale into W_U (the final norm's per-position normalisation is left out: there
is no residual stream to read it from).

`copying_scores(config)` -> (layers, heads): sum(λ) / sum(|λ|) of each OV circuit on the token set's distinct
tokens (positive: the head raises the logits of the tokens it attends to).

`composition_scores(config)` -> {"q", "k", "v"}: (layers, heads, layers, heads), [l1, h1, l2, h2] =
||A·B||_F / (||A||_F ||B||_F) with A = W_OV(l1, h1) and B = W_QK(l2, h2) (Q), W_QK(l2, h2)ᵀ (K), W_OV(l2, h2) (V),
W_QK = W_Q·W_Kᵀ and W_OV = W_V·W_O (d_model x d_model) as TransformerLens' all_composition_scores; each norm's
scale folded into the matrices that read from it (the pre-attention norm into W_Q, W_K, W_V; Gemma 2's
post-attention norm into W_O), no centring, no biases; NaN where l1 >= l2, and for Q and K where the later layer
normalises q and k (Qwen 3, Gemma 3, OLMo 2: W_Q·W_Kᵀ is not its bilinear form). RoPE is left out, as in
TransformerLens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attnviz.core.analysis.circuit_parts import CircuitParts, LayerParts, hidden_states, model_parts, with_hidden_states
from attnviz.core.runs.config import ConfigError, RunConfig
from attnviz.core.runs.model_lock import model_lock
from attnviz.core.runs.result import Cancelled

VOCABULARY_LIMIT = 512  # a vocabulary this small is shown whole (both axes)
GRAM_BYTES = 512 << 20  # composition: every head's d x d Gram matrix kept where they fit in this


@dataclass(frozen=True)
class HeadCircuits:
    layer: int
    head: int
    qk: np.ndarray  # (n, n): rows query tokens, columns key tokens
    ov: np.ndarray  # (n, n): rows attended tokens, columns output tokens (logit)
    tokens: tuple[str, ...]  # the labels of both axes
    token_ids: tuple[int, ...]
    over: str  # "vocabulary" or "text"
    copying: float  # the OV circuit's copying score on the distinct tokens


def token_set(model, parts: CircuitParts, config: RunConfig) -> tuple[list[int], list[str], str]:
    """(ids, labels, "vocabulary" | "text") the circuits are shown over (see the module docstring)."""
    vocab, positions = parts.vocab_size, model.info.max_positions
    if vocab <= VOCABULARY_LIMIT and vocab <= positions and not parts.rotary:
        ids = list(range(vocab))
        return ids, [model.label(i) for i in ids], "vocabulary"
    encoded = model.encode(config.text)
    return list(encoded.ids), list(encoded.tokens), "text"


def embedding_pass(model, parts: CircuitParts, ids: list[int]) -> list:
    """One forward in which every attention layer reads norm(W_E[token]) instead of the residual stream: each
    layer's trace holds q, k (as they enter the dot product) and v of the tokens alone."""
    embedded = parts.embed[torch.as_tensor(ids, device=parts.embed.device)][None]  # (1, n, d)

    def replace(layer: LayerParts):
        def hook(module, args, kwargs):
            x = hidden_states(args, kwargs)
            return with_hidden_states(args, kwargs, layer.norm.module(embedded.to(x.device, x.dtype)))
        return hook
    with model_lock(model):  # the hooks are on the shared model: no other forward meanwhile
        handles = [layer.attention.register_forward_pre_hook(replace(layer), with_kwargs=True)
                   for layer in parts.layers]
        try:
            with torch.inference_mode():
                _, traces = model.forward(torch.tensor([ids]), frozenset({"q", "k", "v"}))
        finally:
            for h in handles:
                h.remove()
    return traces


def _output_map(parts: CircuitParts, layer: LayerParts, head: int, columns: Tensor) -> Tensor:
    """(dv, n): a head's value vector -> the logits of the `columns` tokens (W_O, norm scales, W_U)."""
    w = layer.w_o[head].double()
    if layer.post_norm is not None:
        w = w * layer.post_norm.scale.double()
    w = w * parts.final_norm.scale.double()
    return w @ parts.unembed[:, columns].double()


def _ov(parts: CircuitParts, trace, layer: LayerParts, head: int, rows: Tensor, columns: Tensor) -> Tensor:
    v = trace["v"][0, layer.kv_head(head)].double()[rows]  # (n, dv)
    return v @ _output_map(parts, layer, head, columns.to(v.device))


def copying_score(ov: Tensor) -> float:
    """sum(λ) / sum(|λ|) of a square matrix's eigenvalues."""
    eig = torch.linalg.eigvals(ov.double().cpu())
    return float(eig.sum().real / eig.abs().sum().clamp_min(1e-300))


def _distinct(ids: list[int]) -> tuple[Tensor, Tensor]:
    """(positions of each distinct id's first occurrence, those ids)."""
    first = {}
    for i, t in enumerate(ids):
        first.setdefault(t, i)
    return torch.tensor(list(first.values())), torch.tensor(list(first))


def _check_head(config: RunConfig, parts: CircuitParts, layer: int, head: int) -> None:
    layers, heads = len(parts.layers), parts.layers[0].w_q.shape[0]
    if not 0 <= layer < layers:
        raise ConfigError("layer", layer, f"the model has {layers} layers (0..{layers - 1})",
                          f"choose a layer from 0 to {layers - 1}", suggestions=(layers - 1,))
    if not 0 <= head < heads:
        raise ConfigError("head", head, f"the model has {heads} heads per layer (0..{heads - 1})",
                          f"choose a head from 0 to {heads - 1}", suggestions=(heads - 1,))


def head_circuits(config: RunConfig, layer: int, head: int) -> HeadCircuits:
    """The head's QK and OV circuits over the token set (see the module docstring)."""
    model, parts = model_parts(config)
    _check_head(config, parts, layer, head)
    ids, labels, over = token_set(model, parts, config)
    trace = embedding_pass(model, parts, ids)[layer]
    lp = parts.layers[layer]
    q = trace["q"][0, head].double()
    k = trace["k"][0, lp.kv_head(head)].double()
    everything = torch.arange(len(ids))
    ov = _ov(parts, trace, lp, head, everything, torch.tensor(ids))
    rows, _ = _distinct(ids)
    copying = copying_score(ov[rows][:, rows])
    return HeadCircuits(layer, head, (q @ k.T).cpu().numpy(), ov.cpu().numpy(), tuple(labels), tuple(ids), over,
                        copying)


def copying_scores(config: RunConfig, *, cancel: Callable[[], bool] | None = None) -> np.ndarray:
    """(layers, heads): each OV circuit's copying score on the token set's distinct tokens (`cancel`: asked
    between layers; Cancelled once it says True)."""
    model, parts = model_parts(config)
    ids, _, _ = token_set(model, parts, config)
    traces = embedding_pass(model, parts, ids)
    rows, distinct = _distinct(ids)
    heads = parts.layers[0].w_q.shape[0]
    out = np.zeros((len(parts.layers), heads))
    for li, (lp, trace) in enumerate(zip(parts.layers, traces)):
        _check_cancel(cancel)
        for h in range(heads):
            out[li, h] = copying_score(_ov(parts, trace, lp, h, rows, distinct))
    return out


# --- composition ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Factored:
    """Matrices L·R (d x r)(r x d) of every head of a layer, kept as L, R and the r x r cores of their QR
    factors (L = Q_L·C_L, Rᵀ = Q_R·C_R), so ||L·R|| = ||C_L·C_Rᵀ|| and a product's norm never forms d x d."""

    left: Tensor  # (H, d, r)
    right: Tensor  # (H, r, d)
    c_left: Tensor  # (H, r, r)
    c_right: Tensor  # (H, r, r)

    @classmethod
    def of(cls, left: Tensor, right: Tensor) -> Factored:
        c_left = torch.linalg.qr(left, mode="r").R
        c_right = torch.linalg.qr(right.transpose(-1, -2), mode="r").R
        return cls(left, right, c_left, c_right)

    def norms(self) -> Tensor:
        return torch.linalg.matrix_norm(self.c_left @ self.c_right.transpose(-1, -2))


def _folded(layer: LayerParts) -> dict[str, Factored]:
    """The layer's W_QK, W_QKᵀ and W_OV per head with the norms' scales folded in (float32)."""
    g = layer.norm.scale.float()[:, None]
    heads = layer.w_q.shape[0]
    kv = torch.tensor([layer.kv_head(h) for h in range(heads)])
    w_q, w_k = g * layer.w_q.float(), g * layer.w_k.float()[kv]
    w_v, w_o = g * layer.w_v.float()[kv], layer.w_o.float()
    if layer.post_norm is not None:
        w_o = w_o * layer.post_norm.scale.float()
    return {"q": Factored.of(w_q, w_k.transpose(1, 2)), "k": Factored.of(w_k, w_q.transpose(1, 2)),
            "v": Factored.of(w_v, w_o)}


def _compose(earlier: Factored, later: Factored) -> Tensor:
    """(N1, H2): ||A·B|| / (||A|| ||B||) of every earlier head's A with every later head's B."""
    middle = torch.einsum("ard,hds->ahrs", earlier.right, later.left)  # (N1, H2, r, s)
    core = earlier.c_left[:, None] @ middle @ later.c_right.transpose(-1, -2)[None]
    return torch.linalg.matrix_norm(core) / (earlier.norms()[:, None] * later.norms()[None])


def _gram_of_left(f: Factored) -> Tensor:
    """(H, d·d): AᵀA of each A = L·R, flattened."""
    return (f.right.transpose(1, 2) @ (f.left.transpose(1, 2) @ f.left) @ f.right).flatten(1)


def _gram_of_right(f: Factored) -> Tensor:
    """(H, d·d): B·Bᵀ of each B = L·R, flattened."""
    return (f.left @ (f.right @ f.right.transpose(1, 2)) @ f.left.transpose(1, 2)).flatten(1)


def composition_scores(config: RunConfig, *, cancel: Callable[[], bool] | None = None) -> dict[str, np.ndarray]:
    """{"q", "k", "v"}: (layers, heads, layers, heads) composition scores (see the module docstring); `cancel` is
    asked between layers (Cancelled once it says True).

    ||A·B||² = <AᵀA, B·Bᵀ>_F: with every earlier head's AᵀA kept (d x d each, where they fit in GRAM_BYTES)
    all pairs of two layers are one matrix product, r·d/H times fewer operations than the factored pairs
    (SmolLM2-135M: ~80 instead of ~500 GFLOP); a wider model takes the factored way, in bounded memory."""
    _, parts = model_parts(config)
    folded = [_folded(layer) for layer in parts.layers]
    n, heads = len(parts.layers), parts.layers[0].w_q.shape[0]
    d = parts.layers[0].w_q.shape[1]
    out = {kind: np.full((n, heads, n, heads), np.nan) for kind in ("q", "k", "v")}
    grams = n * heads * d * d * 4 <= GRAM_BYTES
    with torch.inference_mode():
        if grams:
            ov_grams = torch.cat([_gram_of_left(f["v"]) for f in folded])  # (n·heads, d·d)
            ov_norms = torch.cat([f["v"].norms() for f in folded])
        for l2 in range(1, n):
            _check_cancel(cancel)
            ov = None if grams else _stack([folded[l1]["v"] for l1 in range(l2)])
            for kind in ("q", "k", "v"):
                if kind != "v" and parts.layers[l2].qk_norm:
                    continue
                later = folded[l2][kind]
                if grams:
                    dots = ov_grams[:l2 * heads] @ _gram_of_right(later).T  # (l2·heads, heads)
                    scores = dots.clamp_min(0).sqrt() / (ov_norms[:l2 * heads, None] * later.norms()[None])
                else:
                    scores = _compose(ov, later)
                out[kind][:l2, :, l2, :] = scores.cpu().numpy().reshape(l2, heads, heads)
    return out


def _check_cancel(cancel: Callable[[], bool] | None) -> None:
    if cancel is not None and cancel():
        raise Cancelled


def _stack(items: list[Factored]) -> Factored:
    return Factored(*(torch.cat([getattr(f, name) for f in items]) for name in ("left", "right", "c_left",
                                                                              "c_right")))
