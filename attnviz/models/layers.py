"""The attention layers of a transformers model: found once, then recorded on every forward.

`discover(base, interface)` finds the attention modules by one forward over two tokens: the modules the
attention interface was called with, or, for a family that does not call it, the innermost module
returning each layer's `output_attentions` tensor. Each gets hooks that keep its input (stage x) and
output. `run_layers` runs one forward under a Recording and returns one Trace per attention module;
`stack_of` says which stack a module belongs to (encoder, decoder, cross).

The hooks find the forward's Recording in its ForwardContext, among the keywords the family hands its modules
(hf_attention.py). The families that do not call the interface (gpt_neo, bloom, mpnet) hand their modules no
keywords, so for their forwards alone run_layers binds the Recording to the thread (`unpassed`): no keyword can
carry it there.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from attnviz.core.kernel.context import CONTEXT_KWARG, ForwardContext
from attnviz.core.kernel.kernel import Trace
from attnviz.core.kernel.stages import ALL_STAGES, MODULE_IO_STAGES, SOFTMAX_STAGES
from attnviz.models.hf_attention import Recording, context_in, recording

WEIGHTS_ONLY = SOFTMAX_STAGES  # and the attention module's input and output, from its hooks
HOOKED = MODULE_IO_STAGES  # what the hooks on every attention module record
CROSS_NAMES = {"EncDecAttention", "encoder_attn", "crossattention", "cross_attn"}  # t5, bart/whisper, bert


def discover(base: nn.Module, interface: bool) -> tuple[list[nn.Module], list[Trace]]:
    """The attention module of every call in call order (a module shared by several layers, as in ALBERT,
    once per layer) and the calls' traces (every stage they record), from one forward over two tokens;
    each module then gets the hooks that record its input (stage x) and output."""
    ids = torch.tensor([[0, 1]])
    with torch.inference_mode():
        if interface:
            with recording(ALL_STAGES) as rec:
                base(**model_inputs(base, ids), **rec.kwargs)
            modules, traces = [m for m, _ in rec.calls], [t for _, t in rec.calls]
        else:
            modules, traces = _modules_returning_weights(base, ids)
    hook_tokens(modules)
    return modules, traces


def hook_tokens(modules: list[nn.Module]) -> None:
    """Hooks on each attention module that keep its input (stage x) and output in the forward's Recording."""
    for m in dict.fromkeys(modules):
        m.register_forward_pre_hook(keep_input, with_kwargs=True)
        m.register_forward_hook(keep_output, with_kwargs=True)


def _modules_returning_weights(base: nn.Module, ids: Tensor) -> tuple[list[nn.Module], list[Trace]]:
    """For a family that does not call the interface: the innermost module returning each layer's
    output_attentions tensor (its attention module), and the traces of those weights."""
    returned: list[tuple[nn.Module, Tensor]] = []  # the tensors are held, so no id is reused meanwhile

    def spy(module, args, output):
        returned.extend((module, t) for t in (output if isinstance(output, tuple) else ()) if isinstance(t, Tensor))
    handles = [m.register_forward_hook(spy) for m in base.modules() if m is not base]
    try:
        out = base(**model_inputs(base, ids), output_attentions=True)
    finally:
        for h in handles:
            h.remove()
    weights = _all_attentions(out)
    modules = [next((m for m, t in returned if t is w), None) for w in weights]  # inner modules finish first
    if not weights or None in modules:
        return [], []
    return modules, weights_only_traces(weights, WEIGHTS_ONLY)


def _all_attentions(out) -> tuple:
    """output_attentions of every stack, in call order (an encoder-decoder's encoder, then per decoder
    layer its self- and cross-attention)."""
    if getattr(out, "encoder_attentions", None) is None:
        return tuple(out.attentions)
    decoder = [w for pair in zip(out.decoder_attentions, out.cross_attentions) for w in pair]
    return tuple(out.encoder_attentions) + tuple(decoder)


def model_inputs(base: nn.Module, ids: Tensor, decoder_ids: Tensor | None = None) -> dict[str, Tensor]:
    """The forward's inputs: an encoder-decoder also gets its decoder's (the start token alone by default)."""
    inputs = {"input_ids": ids}
    if getattr(base.config, "is_encoder_decoder", False):
        start = base.config.decoder_start_token_id
        inputs["decoder_input_ids"] = decoder_ids if decoder_ids is not None else torch.tensor(
            [[0 if start is None else start]], device=ids.device)
    return inputs


def run_layers(base: nn.Module, ids: Tensor, record, modules: list[nn.Module], weights_only: bool,
               decoder_ids: Tensor | None = None, cache=None, use_cache: bool = False,
               ctx: ForwardContext | None = None):
    """One forward under `ctx` (its ablation, pooling, slab, progress; None: a plain one): (the last hidden state,
    one Trace per attention module, the notes of the calls, the residual stream after each layer where
    keep_residuals hooked the blocks, the KV cache). With use_cache (a generation's step; `cache` None at first)
    the forward reads the ids over the cache and returns it grown."""
    inputs = model_inputs(base, ids, decoder_ids)
    parameters = inspect.signature(base.forward).parameters
    if use_cache:  # transformers 5.24 names the cache `cache` (past_key_values before)
        name = "cache" if "cache" in parameters else "past_key_values"
        inputs.update({name: cache, "use_cache": True})
    elif "use_cache" in parameters:  # else a decoder keeps every layer's keys and values to the end of the
        inputs["use_cache"] = False  # forward (benchmarks/README.md, Behind the code)
    with recording(record, ctx) as rec:
        if weights_only:
            with unpassed(rec):
                out = base(**inputs, output_attentions=True)
        else:
            out = base(**inputs, **rec.kwargs)
    if weights_only:
        rec.calls = list(zip(modules, weights_only_traces(_all_attentions(out), record)))
    traces = trace_modules(rec)
    if len(traces) != len(modules):
        raise RuntimeError(f"the forward ran {len(traces)} attention calls where the model was found to run "
                           f"{len(modules)}")
    grown = getattr(out, "cache", None)
    grown = getattr(out, "past_key_values", None) if grown is None else grown
    return _last_hidden(out), traces, tuple(rec.notes), rec.residuals, grown


def keep_residuals(blocks: list[nn.Module]) -> None:
    """Hooks that keep each block's output (the residual stream after that layer) in the forward's Recording."""
    def keep(module, args, kwargs, output):
        rec = _recording(kwargs)
        if rec is not None:
            rec.residuals.append(output[0] if isinstance(output, tuple) else output)
    for block in blocks:
        block.register_forward_hook(keep, with_kwargs=True)


def run_hidden(base: nn.Module, ids: Tensor, ctx: ForwardContext | None = None) -> Tensor:
    """The last hidden state of a forward outside any Recording (head effects: under `ctx`, its ablation plan)."""
    keywords = {} if ctx is None else {CONTEXT_KWARG: ctx}
    return _last_hidden(base(**model_inputs(base, ids), **keywords))


def _last_hidden(out) -> Tensor:
    hidden = getattr(out, "last_hidden_state", None)
    if hidden is None:  # a class whose forward returns logits only (no headless base)
        raise RuntimeError(f"the model's forward returns no hidden states ({type(out).__name__})")
    return hidden


def stack_of(name: str) -> str:
    """An attention module's stack from its qualified name: cross (a decoder reading the encoder),
    encoder, or decoder (every decoder-only model)."""
    parts = name.split(".")
    if any(p in CROSS_NAMES for p in parts):
        return "cross"
    return "encoder" if "encoder" in parts else "decoder"


_unpassed = threading.local()  # the Recording of this thread's forward of a family that passes no keywords down


@contextmanager
def unpassed(rec: Recording) -> Iterator[Recording]:
    """Bind `rec` to this thread for the hooks while a family that hands its modules no keywords runs a forward."""
    previous, _unpassed.rec = getattr(_unpassed, "rec", None), rec
    try:
        yield rec
    finally:
        _unpassed.rec = previous


def _recording(kwargs: dict) -> Recording | None:
    """The Recording of the forward a hook runs in: its context's (from the module's keywords), else the one bound
    for a family that passes none."""
    ctx = context_in(kwargs)
    return ctx.recording if ctx is not None else getattr(_unpassed, "rec", None)


def keep_input(module: nn.Module, args: tuple, kwargs: dict) -> None:
    rec = _recording(kwargs)
    # a pooled forward keeps some layers' tokens only
    if rec is not None and "x" in rec.record and rec.context.keeps_tokens():
        rec.inputs.setdefault(module, []).append(args[0] if args else kwargs.get("hidden_states"))


def keep_output(module: nn.Module, args: tuple, kwargs: dict, output) -> None:
    rec = _recording(kwargs)
    if rec is not None and "output" in rec.record and rec.context.keeps_tokens(done=True):
        rec.outputs.setdefault(module, []).append(output[0] if isinstance(output, tuple) else output)


def trace_modules(rec) -> list[Trace]:
    """One Trace per attention call, in call order, with its module's input and output of that call added
    (the n-th call of a module pairs with its n-th input and output)."""
    seen: dict[nn.Module, int] = {}
    traces = []
    for module, trace in rec.calls:
        n = seen[module] = seen.get(module, -1) + 1
        for name, held in (("x", rec.inputs), ("output", rec.outputs)):
            if name in rec.record and n < len(held.get(module, ())):
                trace[name] = held[module][n]
        traces.append(trace)
    return traces


def weights_only_traces(attentions, record) -> list[Trace]:
    """Traces from transformers' `output_attentions` (families whose code does not call the interface)."""
    traces = []
    for weights in attentions:
        trace = Trace(set(record) & WEIGHTS_ONLY | {"weights"})
        trace.keep("weights", weights.float()), trace.keep("dropped", weights.float())
        trace["mask"] = (weights[:1] > 0).any(dim=1, keepdim=True)
        traces.append(trace)
    return traces
