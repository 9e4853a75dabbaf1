"""A long decoder text through run(): the kernel's blocks of query rows also leave out the keys after their last
row (causal), and T5's position bias must be cut to the same block. At ~1,200 words it once failed with a bare
RuntimeError (130 vs 2002 columns); here its maps equal transformers' eager decoder_attentions."""

from __future__ import annotations

import numpy as np
import torch

from attnviz.core import RunConfig, run
from attnviz.models import load_model

DECODER_TEXT = " ".join(["the cat sat on the mat"] * 200)


def test_t5_decoder_over_a_long_text_matches_transformers(tiny_models):
    from transformers import AutoModel

    folder = tiny_models("t5")
    config = RunConfig(variant="pretrained", model=str(folder), text="the cat sat", decoder_text=DECODER_TEXT,
                       stack="decoder", layer=1, pool="never")
    result = run(config)
    view = load_model(folder).view("decoder", DECODER_TEXT)
    enc, dec = view.encode("the cat sat"), list(view.decoder.ids)
    assert len(dec) > 1000
    ref = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        out = ref(input_ids=torch.tensor([enc.ids]), decoder_input_ids=torch.tensor([dec]), output_attentions=True)
    expected = out.decoder_attentions[1].numpy()
    weights = result.stages["weights"]
    assert weights.shape == expected.shape == (1, expected.shape[1], len(dec), len(dec))
    np.testing.assert_allclose(weights, expected, atol=1e-4, rtol=0)
    assert float(np.tril(weights[0, 0]).std()) > 0.001  # not a trivially uniform map
