"""Maps saved as .npz and opened again (core/runs/saved.py): `attnviz render --maps FILE.npz` draws exactly what the
run drew (byte-identical PNG and SVG) with no model and nothing computed again; damaged files are one line."""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.core import ConfigError
from attnviz.core.runs.saved import read_maps

RUNS = {
    "seed": ["--preset", "seed000-demo"],
    "seed-causal-rope": ["--variant", "causal", "--position", "rope", "--seq-q", "12"],
    "toy": ["--variant", "toy-induction"],
    "toy-generated": ["--variant", "toy-induction", "--text", "pophijackmehij", "--generate", "4"],  # marks kept
    "pooled": ["--variant", "causal", "--seq-q", "1500", "--pool", "always", "--heads", "2", "--d-model", "16"],
}


def render(tmp_path, name: str, *flags: str) -> bytes:
    path = tmp_path / name
    assert main(["render", *flags, "-o", str(path)]) == 0
    return path.read_bytes()


@pytest.mark.parametrize("run", sorted(RUNS))
@pytest.mark.parametrize("ext", [".png", ".svg"])
def test_a_saved_run_draws_again_byte_for_byte(tmp_path, run, ext):
    flags = RUNS[run]
    render(tmp_path, "run.npz", *flags)
    assert render(tmp_path, "again" + ext, "--maps", str(tmp_path / "run.npz")) == render(tmp_path, "run" + ext, *flags)


def test_a_pretrained_run_with_every_layer_draws_each_layer_again(tmp_path, tiny_models):
    model = ["--model", str(tiny_models("llama")), "--text", "the cat sat on the mat"]
    render(tmp_path, "run.npz", *model, "--layer", "1", "--all-layers")
    saved = str(tmp_path / "run.npz")
    assert render(tmp_path, "a.png", "--maps", saved) == render(tmp_path, "b.png", *model, "--layer", "1")
    # another layer of the file: its weights as that layer's run drew them
    layer0 = render(tmp_path, "d.png", *model, "--layer", "0")
    assert render(tmp_path, "c.png", "--maps", saved, "--layer", "0") == layer0
    result = read_maps(saved, 0)
    assert result.config.layer == 0 and set(result.stages) <= {"weights", "dropped"}
    assert result.tokens and result.config.model == str(tiny_models("llama"))


def test_an_npz_of_every_layer_written_again_keeps_every_layer(tmp_path):
    """Maps opened from a file and exported as NPZ again (the app's Export, `render --maps`) keep every layer the
    file holds; --all-layers with --maps asks for what the file has."""
    render(tmp_path, "run.npz", "--variant", "toy-induction", "--all-layers")
    with np.load(tmp_path / "run.npz") as first:
        layers = first["layer_weights"]
    assert layers.shape[0] == 2
    for name, flags in (("again.npz", ()), ("asked.npz", ("--all-layers",))):
        render(tmp_path, name, "--maps", str(tmp_path / "run.npz"), *flags)
        with np.load(tmp_path / name) as again:
            np.testing.assert_array_equal(again["layer_weights"], layers)


def test_the_opened_result_holds_the_files_arrays(tmp_path):
    render(tmp_path, "run.npz", "--variant", "toy-induction", "--all-layers")
    saved = np.load(tmp_path / "run.npz")
    result = read_maps(tmp_path / "run.npz")
    assert result.opened == str(tmp_path / "run.npz") and result.source is None and result.outputs is None
    assert np.array_equal(result.weights, saved["weights"])
    assert np.array_equal(result.layer_weights[:, 0], saved["layer_weights"])
    assert result.tokens == tuple(saved["tokens"])


def bad_files(tmp_path) -> dict:
    files = {}
    files["empty.npz"] = b""
    files["text.npz"] = b"hello, not an archive"
    no_config = tmp_path / "no-config.npz"
    np.savez(no_config, weights=np.zeros((1, 1, 2, 2), np.float32))
    files["no-config.npz"] = no_config.read_bytes()
    pickled = tmp_path / "pickled.npz"
    with zipfile.ZipFile(pickled, "w") as z:  # an object array: NumPy would need a pickle to read it
        np.lib.format.write_array(z.open("weights.npy", "w"), np.array([{"a": 1}], dtype=object), allow_pickle=True)
    files["pickled.npz"] = pickled.read_bytes()
    return files


def test_damaged_files_are_one_line_each_and_nothing_written(tmp_path, capsys):
    for name, data in bad_files(tmp_path).items():
        (tmp_path / name).write_bytes(data)
        out = tmp_path / "out.png"
        assert main(["render", "--maps", str(tmp_path / name), "-o", str(out)]) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and name in err and "Fix:" in err, err
        assert "Traceback" not in err and not out.exists()
    (tmp_path / "folder.npz").mkdir()
    assert main(["render", "--maps", str(tmp_path / "folder.npz"), "-o", str(tmp_path / "out.png")]) == 2
    assert "not a regular file" in capsys.readouterr().err
    assert main(["render", "--maps", str(tmp_path / "run.png"), "-o", str(tmp_path / "out.png")]) == 2
    assert "not an .npz file" in capsys.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "maps.npz"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_maps(fifo)


def test_a_layer_the_file_does_not_hold(tmp_path, capsys):
    render(tmp_path, "one.npz", "--variant", "toy-induction", "--layer", "1")
    assert main(["render", "--maps", str(tmp_path / "one.npz"), "--layer", "0", "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "holds the maps of layer 1 only" in err and "--all-layers" in err


def test_the_status_line_names_the_model_whose_maps_a_file_holds(tmp_path, tiny_models):
    from attnviz.ui.window.captions import run_name

    folder = tiny_models("llama")
    render(tmp_path, "run.npz", "--model", str(folder), "--text", "the cat sat on the mat")
    result = read_maps(tmp_path / "run.npz")
    assert result.config.variant == "pretrained" and folder.name in result.model_name
    assert run_name(result) == result.model_name  # not the variant's "Pretrained model (folder or .gguf)"
