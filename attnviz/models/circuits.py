"""A transformers model's weights and modules as circuits read them (core/analysis/circuit_parts.py).

Nothing is assumed from a norm's attribute name (Llama's post_attention_layernorm is the MLP's input norm,
Gemma 2's the attention output's): one two-token forward with hooks finds, in each layer's block, the module
whose output the attention reads (its norm) and the one that reads what the attention returns (a post-attention
norm, Gemma 2). The projections are read by their modules: q_proj / k_proj / v_proj (Llama, Mistral, Qwen,
Gemma ...), GPT-2's fused c_attn, Phi-3's qkv_proj, GPT-NeoX's
query_key_value; the output projection is the one the output side
found (outputs.py).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from attnviz.core.analysis.circuit_parts import APPLIES, CircuitParts, LayerParts, Norm, hidden_states
from attnviz.models.folder import ModelError
from attnviz.models.layers import model_inputs
from attnviz.models.outputs import blocks_of

PROBE = torch.tensor([[0, 1]])
QK_NORMS = ("q_norm", "k_norm", "q_layernorm", "k_layernorm")


def _refuse(name: str, problem: str, fix: str = "choose a decoder-only model on attnviz's kernel path (GPT-2, "
            "Llama, Mistral, Qwen, Gemma ...) or toy-induction") -> ModelError:
    return ModelError(name, f"{problem}: {APPLIES} do not apply", fix, field_name="model")


def check_applies(view) -> None:
    """ModelError naming why a model has no circuit parts: an encoder-decoder, weights only, no output head."""
    model, name = view.model, view.model.info.name
    if view.decoder is not None or len(model.info.stacks) > 1:
        raise _refuse(name, f"{name} is an encoder-decoder (its stacks: {', '.join(model.info.stacks)}); its "
                      "decoder reads the encoder through cross-attention, not one residual stream")
    if "scores" not in model.info.stages:
        raise _refuse(name, f"{model.info.model_type} runs transformers' own attention (weights only), so attnviz "
                      "sees no head's output")
    if not model.has_head or not model.info.causal or not model.side.lens:
        raise _refuse(name, f"{name} has no next-token head reading a final norm of its residual stream")


def _watch(modules) -> tuple[dict, dict, list]:
    inputs, outputs = {}, {}

    def pre(module, args, kwargs):
        inputs.setdefault(module, hidden_states(args, kwargs) if args or "hidden_states" in kwargs else None)

    def post(module, args, output):
        outputs.setdefault(module, output[0] if isinstance(output, tuple) else output)
    handles = [h for m in modules for h in (m.register_forward_pre_hook(pre, with_kwargs=True),
                                            m.register_forward_hook(post))]
    return inputs, outputs, handles


def _same(a, b) -> bool:
    return isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape and bool(torch.equal(a, b))


def _norm(module: nn.Module, width: int) -> Norm:
    """A norm's effective scale: LayerNorm's weight; an RMS norm's read from its output on a constant vector
    (so Gemma's 1 + w and any other spelling come out as the family computes them)."""
    weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
    if isinstance(module, nn.LayerNorm):
        scale = weight.detach() if weight is not None else torch.ones(width)
        return Norm(module, scale, None if bias is None else bias.detach(), centred=True)
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    with torch.inference_mode():
        scale = module(torch.full((1, width), 1e3, device=device)).float()[0]  # a constant vector's rms is itself
    return Norm(module, scale, None, centred=False)


def _find_norms(base: nn.Module, blocks, modules) -> list[tuple[nn.Module | None, nn.Module | None]]:
    """Per layer (the norm the attention reads, the norm that reads the attention's output or None)."""
    children = [c for b in blocks for c in b.children()]
    inputs, outputs, handles = _watch([*children, *modules])
    try:
        with torch.inference_mode():
            base(**model_inputs(base, PROBE.to(next(base.parameters()).device)))
    finally:
        for h in handles:
            h.remove()
    found = []
    for block, attn in zip(blocks, modules):
        kids = [c for c in block.children() if c is not attn]
        pre = next((c for c in kids if _same(outputs.get(c), inputs.get(attn))), None)
        post = next((c for c in kids if _same(inputs.get(c), outputs.get(attn))), None)
        found.append((pre, post))
    return found


def _split(weight: Tensor, heads: int) -> Tensor:
    """(H·dh, d) rows of a projection -> (H, d, dh)."""
    return weight.reshape(heads, -1, weight.shape[-1]).transpose(1, 2)


def _projections(attn: nn.Module, heads: int, kv_heads: int, name: str) -> tuple[Tensor, Tensor, Tensor]:
    """(W_Q (H, d, dh), W_K (Hkv, d, dh), W_V (Hkv, d, dv)) of an attention module."""
    kids = dict(attn.named_children())
    if all(k in kids for k in ("q_proj", "k_proj", "v_proj")):
        q, k, v = (kids[k].weight.detach() for k in ("q_proj", "k_proj", "v_proj"))
    elif "c_attn" in kids and type(kids["c_attn"]).__name__ == "Conv1D":  # GPT-2: (d, 3d), inputs first
        q, k, v = kids["c_attn"].weight.detach().T.chunk(3, dim=0)
    elif "qkv_proj" in kids:  # Phi-3: rows q, then k, then v
        w = kids["qkv_proj"].weight.detach()
        dh = w.shape[0] // (heads + 2 * kv_heads)
        q, k, v = w.split([heads * dh, kv_heads * dh, kv_heads * dh])
    elif "query_key_value" in kids:  # GPT-NeoX: rows per head, q k v of that head side by side
        w = kids["query_key_value"].weight.detach()
        q, k, v = (t.reshape(-1, w.shape[-1]) for t in w.reshape(heads, 3, -1, w.shape[-1]).unbind(1))
    else:
        raise _refuse(name, f"attnviz does not know where {type(attn).__name__} keeps its query, key and value "
                      "weights (q_proj/k_proj/v_proj, c_attn, qkv_proj or query_key_value)")
    return _split(q, heads), _split(k, kv_heads), _split(v, kv_heads)


def _out_proj(attn: nn.Module, w_o: Tensor) -> nn.Module:
    """The module whose weight is the output projection the output side found (GPT-2's Conv1D is transposed)."""
    return next(m for m in attn.modules() if getattr(m, "weight", None) is not None and
                m.weight.data_ptr() == w_o.data_ptr())


def pretrained_parts(view) -> CircuitParts:
    """The CircuitParts of a RunModel (models/run_model.py); ModelError where they do not apply."""
    check_applies(view)
    model = view.model
    info, base, modules, side = model.info, model.module.base_model, model.attention_modules, model.side
    blocks = blocks_of(base, modules)
    width = side.head.weight.shape[1]
    layers = []
    for attn, block, (pre, post) in zip(modules, blocks, _find_norms(base, blocks, modules)):
        if pre is None:
            raise _refuse(info.name, f"{info.name}'s layers normalise after the residual sum (post-norm), so no "
                          "head writes straight into the residual stream")
        w_q, w_k, w_v = _projections(attn, info.heads, info.kv_heads, info.name)
        w_o = side.out_weights[attn]  # (d, H·dv)
        layers.append(LayerParts(
            w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o.detach().T.reshape(info.heads, -1, w_o.shape[0]),
            norm=_norm(pre, width), attention=attn, out_proj=side.out_weights.projection(attn), block=block,
            post_norm=None if post is None else _norm(post, width),
            qk_norm=any(hasattr(attn, n) for n in QK_NORMS)))
    head = side.head
    tokenizer = model.tokenizer
    return CircuitParts(
        embed=model.module.get_input_embeddings().weight.detach(), unembed=head.weight.detach().T,
        unembed_bias=None if getattr(head, "bias", None) is None else head.bias.detach(),
        final_norm=_norm(side.norm, width) if side.norm is not None else Norm(nn.Identity(), torch.ones(width),
                                                                             None, centred=False), layers=tuple(layers),
        tokenize=lambda text: list(tokenizer.encode(text, False).ids),
        rotary=any("Rotary" in type(m).__name__ for m in base.modules()), softcap=side.softcap)
