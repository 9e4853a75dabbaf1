"""`attnviz render` flags of the explaining views: --view pipeline, --scale-mode, --stats, --rollout."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import attnviz.core as core
from attnviz.cli import main
from attnviz.core import RunConfig, run
from attnviz.core.analysis.stats import head_stats, rollout
from attnviz.core.kernel.stages import ALL_STAGES

SMALL = ["--d-model", "8", "--heads", "4", "--seq-q", "6"]


@pytest.fixture(autouse=True)
def _qt(qapp):
    return qapp


def test_pipeline_figure_png_svg_and_npz(tmp_path, capsys):
    for ext in (".png", ".svg", ".npz"):
        out = tmp_path / f"p{ext}"
        assert main(["render", *SMALL, "--position", "rope", "--view", "pipeline", "--head", "2", "-o", str(out)]) == 0
        assert out.stat().st_size > 500
    svg = (tmp_path / "p.svg").read_text()
    for title in ("x (input)", "q (projected)", "q (rotated)", "Q·Kᵀ", "masked", "softmax", "concat heads",
                  "output projection", "head 2 of 4"):
        assert title in svg, title
    arrays = np.load(tmp_path / "p.npz")
    expected = run(RunConfig(d_model=8, heads=4, seq_q=6, position="rope"), record=ALL_STAGES)
    np.testing.assert_array_equal(arrays["weights"], expected.weights[0, 2])
    np.testing.assert_array_equal(arrays["qk"], expected.qk[0, 2])


def test_scale_mode_changes_the_picture(tmp_path):
    paths = {}
    for mode in ("linear", "log", "row", "rank"):
        paths[mode] = tmp_path / f"{mode}.npz.png"
        assert main(["render", "--seq-q", "64", "--scale-mode", mode, "-o", str(paths[mode])]) == 0
    data = {m: p.read_bytes() for m, p in paths.items()}
    assert len(set(data.values())) == 4
    assert main(["render", "--scale-mode", "cubic", "-o", str(tmp_path / "x.png")]) == 2


def test_stats_csv_equals_the_formula(tmp_path):
    out = tmp_path / "stats.csv"
    assert main(["render", *SMALL, "--stats", str(out)]) == 0  # -o may be left out
    lines = out.read_text().splitlines()
    assert lines[0] == "head,entropy (nats),max weight,mean distance,first key,previous token,diagonal"
    w = run(RunConfig(d_model=8, heads=4, seq_q=6)).weights[0]  # causal: row 0 has one key, left out
    got = np.array([[float(v) for v in line.split(",")[1:]] for line in lines[1:]])
    np.testing.assert_allclose(got[:, 0], head_stats(w, keys=np.arange(1, 7))["entropy"], rtol=1e-5)
    np.testing.assert_allclose(got[:, 3], w[:, 1:, 0].mean(-1), rtol=1e-5)
    assert main(["render", *SMALL, "--stats", str(tmp_path / "stats.txt")]) == 2


def test_rollout_on_a_single_layer_run_is_a_clear_error(tmp_path, capsys):
    out = tmp_path / "r.png"
    assert main(["render", *SMALL, "--rollout", "-o", str(out)]) == 2
    assert "multi-layer" in capsys.readouterr().err and not out.exists()
    assert main(["render", *SMALL, "--rollout", "--view", "pipeline", "-o", str(out)]) == 2


def test_rollout_of_a_multi_layer_result(tmp_path, monkeypatch):
    def layered(config, **kwargs):  # the model-backed variants fill layer_weights; stand in for them
        result = run(config, **kwargs)
        w = result.weights
        return dataclasses.replace(result, layer_weights=np.stack([w, np.roll(w, 1, axis=1)]))

    monkeypatch.setattr(core, "run", layered)
    assert main(["render", *SMALL, "--rollout", "-o", str(tmp_path / "r.svg")]) == 0
    assert "Attention rollout" in (tmp_path / "r.svg").read_text()
    assert main(["render", *SMALL, "--rollout", "-o", str(tmp_path / "r.npz")]) == 0
    arrays = np.load(tmp_path / "r.npz")
    w = run(RunConfig(d_model=8, heads=4, seq_q=6)).weights
    np.testing.assert_allclose(arrays["rollout"], rollout(np.stack([w, np.roll(w, 1, axis=1)])), rtol=1e-5)
    assert main(["render", *SMALL, "--stats", str(tmp_path / "s.csv")]) == 0
    assert "layer 1 head 3" in (tmp_path / "s.csv").read_text()
