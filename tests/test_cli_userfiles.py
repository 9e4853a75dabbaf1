"""`attnviz render --weights FILE --inputs FILE`: the seed module's output from its own state_dict,
one-line exit 2 on a mismatch with nothing written, and the files' names and hashes in the NPZ."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from seeds import Seed000CrossAttention

from attnviz.cli import main
from attnviz.core import RunConfig, saved_json


@pytest.fixture
def seed000(tmp_path):
    """A seed 000 CrossAttention (d_in 32, d_out 64, 4 heads) saved with torch.save(state_dict), and inputs."""
    torch.manual_seed(7)
    module = Seed000CrossAttention(32, 64, 0.0, 4).eval()
    inputs = {"queries": torch.randn(2, 5, 32), "keys": torch.randn(2, 9, 32), "values": torch.randn(2, 9, 32)}
    torch.save(module.state_dict(), tmp_path / "seed000.pt")
    torch.save(inputs, tmp_path / "inputs.pt")
    with torch.no_grad():
        expected = module(*inputs.values()).numpy()
    return tmp_path / "seed000.pt", tmp_path / "inputs.pt", expected


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_seed000_weights_and_inputs_give_the_seed_output(seed000, tmp_path, capsys):
    weights, inputs, expected = seed000
    out = tmp_path / "out.npz"
    code = main(["render", "--variant", "cross", "--mask", "none", "--d-model", "32", "--d-out", "64",
                 "--weights", str(weights), "--inputs", str(inputs), "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    z = np.load(out)
    np.testing.assert_allclose(z["output"], expected, atol=1e-5, rtol=0)
    assert str(z["weights_file"]) == "seed000.pt" and str(z["inputs_file"]) == "inputs.pt"
    assert str(z["weights_sha256"]) == _sha(weights) and str(z["inputs_sha256"]) == _sha(inputs)
    doc = json.loads(str(z["config"]))
    assert doc["files"]["weights"]["sha256"] == _sha(weights)
    config = RunConfig.from_json(str(z["config"]))
    assert (config.batch, config.seq_q, config.seq_kv, config.in_bias) == (2, 5, 9, False)  # from the files


def test_a_mismatched_width_exits_2_with_one_line_and_writes_nothing(seed000, tmp_path, capsys):
    weights, inputs, _ = seed000
    out = tmp_path / "out.npz"
    code = main(["render", "--variant", "cross", "--d-model", "48", "--d-out", "64",
                 "--weights", str(weights), "--inputs", str(inputs), "-o", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not out.exists()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "--d-model 48: " in err and "W_query.weight" in err and "(64, 32)" in err and "to 32" in err


def test_a_pickled_checkpoint_exits_2_and_says_why(tmp_path, capsys):
    torch.save(Seed000CrossAttention(64, 64, 0.0, 4), tmp_path / "model.pt")
    code = main(["render", "--variant", "cross", "--weights", str(tmp_path / "model.pt"), "-o",
                 str(tmp_path / "o.png")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "weights_only" in err and "state_dict" in err
    assert not (tmp_path / "o.png").exists()


def test_files_for_a_model_backed_variant_are_a_usage_error(seed000, tmp_path, capsys):
    weights, _, _ = seed000
    code = main(["render", "--variant", "pretrained", "--model", str(tmp_path), "--weights", str(weights), "-o",
                 str(tmp_path / "o.npz")])
    assert code == 2 and "--weights does not apply to variant pretrained" in capsys.readouterr().err


def test_a_saved_config_with_a_changed_file_exits_2(seed000, tmp_path, capsys):
    weights, inputs, _ = seed000
    config = RunConfig.for_variant("cross", d_model=32, weights=str(weights), inputs=str(inputs))
    saved = tmp_path / "saved.json"
    saved.write_text(saved_json(config))  # with the files' sha256s
    assert main(["render", "--config", str(saved), "-o", str(tmp_path / "a.npz")]) == 0
    torch.save({"queries": torch.zeros(1, 2, 32), "keys": torch.zeros(1, 2, 32), "values": torch.zeros(1, 2, 32)},
               inputs)
    capsys.readouterr()
    assert main(["render", "--config", str(saved), "-o", str(tmp_path / "b.npz")]) == 2
    err = capsys.readouterr().err
    assert "inputs" in err and "changed" in err and not (tmp_path / "b.npz").exists()
