"""Head ablation: knock heads out inside the kernel, on the head's context before the output projection.

A spec is a tuple of "layer.head" strings ("3.5"; "4.*" = every head of layer 4). A `Plan` says, per
attention call of one forward (call index = the order the kernel is called in), which heads are knocked
out in which batch rows: "zero" sets the head's context to 0, "mean" to its mean over the query positions.
A forward's plan travels in its ForwardContext (context.py); `attention()` (kernel.py) asks it to knock out
every call's heads, so every module built on the kernel (the seed modules, the toys, every transformers
family on the kernel path) ablates the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor


def parse(specs: Sequence[str], layers: int, heads: int) -> dict[int, tuple[int, ...]]:
    """Specs -> {layer: heads knocked out}; ValueError naming a layer or head that does not exist."""
    out: dict[int, set[int]] = {}
    for spec in specs:
        where = f" ({spec})" if len(specs) > 1 else ""  # which of several specs is wrong
        layer_text, head_text = spec.strip().split(".")
        layer = int(layer_text)
        if layer >= layers:
            raise ValueError(f"layer {layer}{where} does not exist (layers 0..{layers - 1})")
        if head_text == "*":
            out.setdefault(layer, set()).update(range(heads))
            continue
        head = int(head_text)
        if head >= heads:
            raise ValueError(f"head {head}{where} does not exist (heads 0..{heads - 1})")
        out.setdefault(layer, set()).add(head)
    return {layer: tuple(sorted(h)) for layer, h in sorted(out.items())}


@dataclass
class Plan:
    """Which heads each attention call of one forward knocks out: call index -> [(batch row or None = every
    row, head)]. Calls are counted as the kernel sees them."""

    mode: str = "zero"
    knocked: dict[int, list[tuple[int | None, int]]] = field(default_factory=dict)
    calls: int = 0  # attention calls seen so far in this forward

    @classmethod
    def of_layers(cls, layers: dict[int, tuple[int, ...]], mode: str, call_of=lambda layer: layer) -> Plan:
        """Every batch row knocks out the same heads; call_of maps a layer to its call index."""
        return cls(mode, {call_of(layer): [(None, h) for h in heads] for layer, heads in layers.items()})

    def knock_out(self, context: Tensor) -> Tensor:
        """context (B, H, Lq, dv) of the next call, with this call's heads knocked out."""
        pairs = self.knocked.get(self.calls, ())
        self.calls += 1
        if not pairs:
            return context
        keep = torch.ones(context.shape[:2], dtype=torch.bool, device=context.device)
        for row, head in pairs:
            keep[slice(None) if row is None else row, head] = False
        keep = keep[..., None, None]
        if self.mode == "mean":
            return torch.where(keep, context, context.mean(dim=2, keepdim=True))
        return context * keep.to(context.dtype)
