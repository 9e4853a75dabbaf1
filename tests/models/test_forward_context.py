"""One ForwardContext per forward reaches attnviz's kernel in every family on transformers' attention interface:
it travels in the keyword arguments each family hands through its layers (models/hf_attention.py), so its watch
hears every attention call, its plan knocks out the heads it names, and nothing of it outlives the forward."""

from __future__ import annotations

import pytest
import torch
from tiny import INTERFACE_FAMILIES, SENTENCE

from attnviz.core.kernel.ablation import Plan
from attnviz.core.kernel.context import ForwardContext
from attnviz.core.kernel.progress import Watch
from attnviz.models import load_model


@pytest.mark.parametrize("family", INTERFACE_FAMILIES)
def test_the_context_reaches_every_attention_call_of_the_family(tiny_models, family):
    model = load_model(tiny_models(family))
    ids = torch.tensor([list(model.encode(SENTENCE).ids)])
    heard = []
    plan = Plan.of_layers({0: (0,)}, "zero")  # layer 0's head 0 knocked out
    with torch.inference_mode(), ForwardContext(plan=plan, watch=Watch(on_call=heard.append)) as ctx:
        _, traces = model.forward(ids, {"context", "weights"}, ctx=ctx)
    with torch.inference_mode():
        _, plain = model.forward(ids, {"context", "weights"})
    calls = len(model.attention_modules)
    assert heard == list(range(1, calls + 1)) and plan.calls == calls  # every call, in order, under this context
    dv = traces[0]["context"].shape[-1] // traces[0]["weights"].shape[1]
    knocked, kept = traces[0]["context"][..., :dv], traces[0]["context"][..., dv:]
    assert torch.count_nonzero(knocked) == 0  # the head's output before any output projection
    torch.testing.assert_close(kept, plain[0]["context"][..., dv:])  # the other heads as without the plan
    assert torch.count_nonzero(plain[0]["context"][..., :dv]) > 0
    assert ctx.recording is None  # the forward's recording is let go with it
