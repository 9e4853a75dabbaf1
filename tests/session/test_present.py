"""present: a result's maps and its explaining extras in one call, the slow extras of a new result left to
late_frames (the window shows the maps first)."""

from __future__ import annotations

import numpy as np

from attnviz.core import RunConfig, run
from attnviz.explain import render_extras, stats_frames
from attnviz.frames import PoolCache, ViewOptions, render
from attnviz.session.present import late_frames, late_names, present


def test_present_is_the_maps_and_the_extras_the_options_ask_for():
    result = run(RunConfig(seq_q=8, heads=2, d_model=16, seed=3))
    options = ViewOptions(stats=True, focus_row=2, mean=True)
    frames = present(result, options)
    maps = render(result, options)
    assert all(np.array_equal(a.image, b.image) for a, b in zip(frames.heads, maps.heads))
    assert np.array_equal(frames.mean.image, maps.mean.image)
    assert set(frames.extras) == {"stats", "focus"} == set(render_extras(result, options))
    want = stats_frames(result, 0, options).columns
    assert all(np.allclose(frames.extras["stats"].columns[k], want[k], equal_nan=True) for k in want)
    assert present(result, ViewOptions()).extras == {}


def test_a_models_predictions_follow_its_maps_and_are_the_same_numbers():
    config = RunConfig.for_variant("toy-induction")
    result = run(config)
    options = ViewOptions(predictions=True)
    late = late_names(result, options)
    assert late == {"predictions"}
    early = present(result, options, late=late)
    assert "predictions" not in early.extras and early.heads
    after = late_frames(result, options, PoolCache(), late)
    whole = present(result, options)
    np.testing.assert_array_equal(after["predictions"].top_probs, whole.extras["predictions"].top_probs)
    assert after["predictions"].top_tokens == whole.extras["predictions"].top_tokens


def test_a_seed_run_has_no_late_extras():
    result = run(RunConfig(seq_q=8, heads=2, d_model=16))
    assert late_names(result, ViewOptions(predictions=True, lens=True, head_scores=True)) == frozenset()
