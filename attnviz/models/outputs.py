"""A transformers model's output side, found by watching one two-token forward: the head that turns the last
hidden state into logits, the base model's final norm, the blocks whose outputs are the residual stream,
and each attention module's output projection.

Nothing is assumed from a family's attribute names (lm_head, ln_f, norm, o_proj, c_proj ...): each part is
the module that received the tensor it must receive, and is kept only where recomputing with it gives
what the model itself computed (the logits exactly; the lens where the final norm of the last block's
output is the last hidden state). Where a check fails the part is absent and the run says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from attnviz.models.compact import float_weight, is_compact
from attnviz.models.hf_attention import recording
from attnviz.models.layers import model_inputs

PROBE = torch.tensor([[0, 1]])


class OutWeights(Mapping):
    """Attention module -> its output projection's weight W_O as float32 (d_out, H·dv), read at each lookup
    through compact.float_weight (a compact weight is made float32 for that call; others are the module's
    own tensor); `projection(module)` is the module holding it."""

    def __init__(self, projections: dict[nn.Module, nn.Module]):
        self._projections = projections

    def __getitem__(self, module: nn.Module) -> Tensor:
        child = self._projections[module]
        weight = float_weight(child)
        return weight.T if type(child).__name__ == "Conv1D" else weight  # GPT-2's Conv1D stores it transposed

    def __iter__(self):
        return iter(self._projections)

    def __len__(self) -> int:
        return len(self._projections)

    def projection(self, module: nn.Module) -> nn.Module:
        return self._projections[module]


@dataclass
class OutputSide:
    head: nn.Module | None = None  # logits = head(last hidden) (then the soft cap)
    softcap: float | None = None  # Gemma 2's final_logit_softcapping
    norm: nn.Module | None = None  # the final norm between the last block and the head (None: none)
    blocks: list[nn.Module] = field(default_factory=list)  # one per layer of the residual stream
    lens: bool = False  # head(norm(residual after the last block)) gives the logits
    out_weights: OutWeights = field(default_factory=lambda: OutWeights({}))  # attention module -> W_O (d_out, H·dv)

    def logits(self, hidden: Tensor) -> Tensor:
        out = self.head(hidden)
        return torch.tanh(out / self.softcap) * self.softcap if self.softcap else out

    def lens_logits(self, residual: Tensor) -> Tensor:
        return self.logits(residual if self.norm is None else self.norm(residual))


def _first(args: tuple, kwargs: dict):
    return args[0] if args else kwargs.get("hidden_states", kwargs.get("input"))


def _same(a, b) -> bool:
    return isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape and \
        torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5)


class _Watch:
    """Forward hooks keeping what chosen modules received and returned (removed on exit)."""

    def __init__(self, modules):
        self.inputs: dict[nn.Module, object] = {}
        self.outputs: dict[nn.Module, object] = {}
        self._handles = []
        for m in modules:
            self._handles.append(m.register_forward_pre_hook(self._pre, with_kwargs=True))
            self._handles.append(m.register_forward_hook(self._post))

    def _pre(self, module, args, kwargs):
        self.inputs.setdefault(module, _first(args, kwargs))

    def _post(self, module, args, output):
        self.outputs.setdefault(module, output[0] if isinstance(output, tuple) else output)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()


def blocks_of(base: nn.Module, attention_modules: list[nn.Module]) -> list[nn.Module]:
    """The layer (an element of a ModuleList) holding each attention module, in order, each once."""
    parent = {c: m for m in base.modules() for c in m.children()}
    blocks = []
    for module in attention_modules:
        m = module
        while m in parent and not isinstance(parent[m], nn.ModuleList):
            m = parent[m]
        if m in parent and m not in blocks:
            blocks.append(m)
    return blocks


def find_output_side(model: nn.Module, attention_modules: list[nn.Module], trained_head: bool) -> OutputSide:
    """The output side of a loaded model (see the module docstring)."""
    base = model.base_model
    side = OutputSide(out_weights=out_projections(base, attention_modules))
    if base is model or not trained_head or getattr(model.config, "is_encoder_decoder", False):
        return side
    side.blocks = blocks_of(base, attention_modules)
    heads = [c for name, c in model.named_children() if c is not base]
    with _Watch([base, *heads, *base.children(), *side.blocks]) as watch, torch.inference_mode():
        logits = getattr(model(**model_inputs(base, PROBE)), "logits", None)
    last = getattr(watch.outputs.get(base), "last_hidden_state", watch.outputs.get(base))
    if logits is None or not isinstance(last, Tensor):
        return side
    softcap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
    for head in heads:
        side.head, side.softcap = head, softcap
        with torch.inference_mode():
            if _same(watch.inputs.get(head), last) and _same(side.logits(last), logits):
                break
    else:
        side.head = None
        return side
    side.lens = _find_norm(side, watch, base, last)
    return side


def _find_norm(side: OutputSide, watch: _Watch, base: nn.Module, last: Tensor) -> bool:
    """Sets side.norm: the base model's child that turned the last block's output into the last hidden state."""
    if not side.blocks:
        return False
    after = watch.outputs.get(side.blocks[-1])
    if _same(after, last):
        return True
    for child in base.children():
        if child not in side.blocks and _same(watch.inputs.get(child), after) and \
                _same(watch.outputs.get(child), last):
            side.norm = child
            return True
    return False


def out_projections(base: nn.Module, attention_modules: list[nn.Module]) -> OutWeights:
    """Each attention module's output projection weight as (d_out, H·dv): the Linear (or GPT-2's Conv1D, whose
    weight is stored transposed) inside it that received the call's merged context, seen in one two-token
    forward on the kernel. Empty for a family that does not call the kernel."""
    linears = [c for c in base.modules() if is_compact(c) or getattr(getattr(c, "weight", None), "ndim", 0) == 2]
    with _Watch(linears) as watch, recording({"context"}) as rec, torch.inference_mode():
        base(**model_inputs(base, PROBE), **rec.kwargs)
    contexts = {}
    for module, trace in rec.calls:
        contexts.setdefault(module, trace.get("context"))
    parent = {c: m for m in base.modules() for c in m.children()}
    found = {}
    for module in dict.fromkeys(attention_modules):
        around = parent.get(module, module)  # BERT's projection is a sibling: BertSelfOutput.dense
        for child in [*module.modules(), *around.modules()]:
            if child in watch.inputs and _same(watch.inputs[child], contexts.get(module)):
                found[module] = child
                break
    return OutWeights(found)
