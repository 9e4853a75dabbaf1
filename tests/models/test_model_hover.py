"""Hover's path of one cell in a model's layer, recomputed from q and k with the call's own scale and cap
(the window's run leaves the scores out), against transformers' eager attention."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from test_model_parity import reference
from tiny import SENTENCE, make_family

from attnviz.core import RunConfig, run
from attnviz.core.analysis.cells import cell_path
from attnviz.core.kernel.stages import DEFAULT_RECORD
from attnviz.explain import STAGE_TITLES
from attnviz.style import number

NO_SCORES = DEFAULT_RECORD - {"scores"}


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory):
    """A Gemma 2 whose scale is not 1/sqrt(head width) (query_pre_attn_scalar 32, heads of 8) and whose logits
    are capped: what a recomputation with the seed variants' defaults would get wrong."""
    pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("gemma2-scaled")
    make_family(folder, "gemma2", query_pre_attn_scalar=32)
    return folder


def _row(result, head: int, query: int) -> list[dict[str, float]]:
    return [cell_path(result, 0, head, query, key) for key in range(result.config.lkv)]


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_a_cells_recomputed_score_gives_eagers_weights(tiny_models, gemma2, family):
    folder = gemma2 if family == "gemma2" else tiny_models(family)
    config = RunConfig(variant="pretrained", model=str(folder), text=SENTENCE, layer=1)
    shown = run(config, record=NO_SCORES)
    assert "scores" not in shown.stages
    _, attentions = reference(folder, shown.token_ids.tolist())
    for head, query in ((0, shown.config.seq_q - 1), (3, 4)):
        path = _row(shown, head, query)
        scores = torch.tensor([p["scores"] for p in path], dtype=torch.float64)
        # the softmax of the recomputed row is transformers' own row of weights
        torch.testing.assert_close(torch.softmax(scores, -1).float(), attentions[1][0, head, query], atol=1e-5, rtol=0)
        assert math.isinf(scores[-1]) == (query < len(path) - 1)  # the causal mask: a later key is -inf
    full = run(config)  # with the scores recorded: the recomputed ones are those numbers
    recorded = [cell_path(full, 0, 2, 5, key)["scores"] for key in range(6)]
    np.testing.assert_allclose([p["scores"] for p in _row(shown, 2, 5)][:6], recorded, atol=1e-5)
    if family == "gemma2":
        assert {"qk", "scaled", "capped", "scores", "weights"} <= _row(shown, 0, 3)[0].keys()


def test_a_biased_layers_path_stops_before_the_bias(tiny_models):
    """T5 adds a position bias that one cell cannot recompute: its path says q·k and the scale, then the
    recorded weight, and no made-up score."""
    config = RunConfig(variant="pretrained", model=str(tiny_models("t5")), text=SENTENCE)
    shown = run(config, record=NO_SCORES)
    path = cell_path(shown, 0, 1, 2, 3)
    assert list(path) == ["qk", "scaled", "weights"]
    assert path["scaled"] == pytest.approx(path["qk"])  # T5 does not scale its scores
    assert cell_path(run(config), 0, 1, 2, 3)["scores"] != pytest.approx(path["scaled"])  # the bias was added


def test_the_pipelines_path_says_the_layers_own_scale(gemma2):
    """The pipeline panel's words for a cell: Gemma 2 scales q·k by query_pre_attn_scalar^-1/2 (32 here), not
    by 1/sqrt(head width) (8), and each later step is named by its stage in the pipeline's order."""
    from attnviz.ui.panels.pipeline import path_text

    shown = run(RunConfig(variant="pretrained", model=str(gemma2), text=SENTENCE, layer=1), record=NO_SCORES)
    path = cell_path(shown, 0, 1, 4, 2)
    text = path_text(shown, 0, 1, 4, 2)
    assert f"× {number(32 ** -0.5)} = {number(path['scaled'])}" in text and number(8 ** -0.5) not in text
    assert path["scaled"] == pytest.approx(path["qk"] * 32 ** -0.5, rel=1e-6)
    titles = [f"{STAGE_TITLES[name]} → " for name in ("capped", "scores", "weights")]  # the cap, the mask, softmax
    assert all(t in text for t in titles) and sorted(titles, key=text.index) == titles


def test_an_opened_models_path_stops_where_its_call_is_unknown(gemma2, tmp_path):
    """Maps of a model read back from an NPZ carry no call recipe: the path gives q·k and the saved weight, not
    a scale and a cap the seed variants' defaults would make up (1/sqrt(8) where Gemma 2 used 32^-1/2)."""
    from attnviz.core.runs.saved import read_maps
    from attnviz.export import write_npz
    from attnviz.ui.panels.pipeline import path_text

    live = run(RunConfig(variant="pretrained", model=str(gemma2), text=SENTENCE, layer=1), record=NO_SCORES)
    opened = read_maps(write_npz(live, tmp_path / "gemma2.npz"))
    assert opened.source is None and opened.score_recipe is None and "q" in opened.stages
    path, shown = cell_path(opened, 0, 1, 4, 2), cell_path(live, 0, 1, 4, 2)
    assert list(path) == ["qk", "weights"] and path["qk"] == pytest.approx(shown["qk"])
    assert path["weights"] == pytest.approx(shown["weights"])
    assert "×" not in path_text(opened, 0, 1, 4, 2) and number(8 ** -0.5) not in path_text(opened, 0, 1, 4, 2)
