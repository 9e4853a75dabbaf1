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
