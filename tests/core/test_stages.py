"""Each stage's facts live on its Stage: the title every view spells, whether every run keeps it, who makes it."""

from attnviz.core import RunConfig, run
from attnviz.core.kernel.stages import ALWAYS_KEPT, DIFFERENTIAL, ROTATION, SCORE_MOD, STAGES, stages_made_by
from attnviz.core.runs.backed import backed_stages
from attnviz.core.runs.runner import run_stages


def test_every_stage_has_its_own_title():
    titles = [s.title for s in STAGES]
    assert all(titles) and len(set(titles)) == len(titles)


def test_a_run_keeps_the_always_kept_stages_whatever_it_records():
    assert {"weights", "dropped", "output"} == ALWAYS_KEPT
    result = run(RunConfig(d_model=8, heads=2, seq_q=5, dropout=0.5, train=True), record={"context"})
    assert set(result.stages) == {"context"} | ALWAYS_KEPT


def test_who_makes_a_stage_says_when_a_run_has_it():
    plain = set(run_stages(RunConfig(d_model=8, heads=2, seq_q=5)))
    assert not plain & stages_made_by(ROTATION, SCORE_MOD, DIFFERENTIAL)
    rope = set(run_stages(RunConfig(d_model=8, heads=2, seq_q=5, position="rope")))
    assert stages_made_by(ROTATION) == {"q_proj", "k_proj"} <= rope
    capped = set(run_stages(RunConfig(d_model=8, heads=2, seq_q=5, softcap=5.0)))
    assert "capped" in capped and "biased" not in capped
    assert not set(backed_stages()) & stages_made_by(ROTATION, DIFFERENTIAL)  # a model family rotates itself


def _every_stage(**fields):
    from attnviz.core.kernel.stages import ALL_STAGES

    return run(RunConfig(d_model=8, heads=2, seq_q=5, **fields), record=ALL_STAGES).stages


def test_the_subset_fields_say_what_the_arrays_show():
    """Each subset field read off the arrays a run keeps: rows that sum to 1 (probability), finite values where the
    mask hides a key (pre_mask), one row per key (keyed), the dot product's per-head operands (operand)."""
    import numpy as np

    from attnviz.core.kernel.stages import BY_NAME

    maps = _every_stage(variant="causal", position="alibi", softcap=5.0)
    maps = {n: a for n, a in maps.items() if BY_NAME[n].is_map}
    assert {"qk", "scaled", "biased", "capped", "scores", "weights", "dropped", "value_weighted"} <= set(maps)
    hidden = ~np.isfinite(maps["scores"])  # the cells the mask hides
    assert hidden.any()
    for name, a in maps.items():
        stage = BY_NAME[name]
        assert np.allclose(a.sum(-1), 1.0, atol=1e-5) == stage.probability, name
        computed = np.isfinite(a[hidden]).all() and (a[hidden] != 0).any()  # after the mask: -inf or 0 there
        assert computed == stage.pre_mask, name
    tokens = _every_stage(variant="cross", seq_kv=7)
    assert {"x", "q", "k", "v", "context", "output"} <= set(tokens)
    for name, a in tokens.items():
        if not BY_NAME[name].is_map:
            assert a.shape[-2] == (7 if BY_NAME[name].keyed else 5), name  # Lkv rows if keyed, else Lq
    rotated = _every_stage(variant="causal", position="rope")
    assert {"q_proj", "k_proj"} <= set(rotated)
    for name, a in rotated.items():
        if not BY_NAME[name].is_map:
            assert (a.ndim == 4) == BY_NAME[name].operand, name  # (B, heads, L, width): q, k, v before and after RoPE
    assert {n for n in maps if BY_NAME[n].softmax} == {"weights", "dropped"}  # eval mode: dropped is the weights
    np.testing.assert_array_equal(maps["dropped"], maps["weights"])
