"""A seeded fuzz of a tiny checkpoint folder: config values, damaged or swapped tensors, extra files and a
swapped tokenizer. Every case ends in exit 0 with finite maps equal to transformers' own, or exit 2 with
one line; never a traceback, never a hang (each case has a time limit)."""

from __future__ import annotations

import json
import random
import shutil
import signal

import numpy as np
import pytest
import torch
from tiny import SENTENCE

from attnviz.cli import main

BAD_VALUES = [0, -1, 10**9, float("nan"), float("inf"), "x", [1], None, True, 2.5]
CASES = 24
SECONDS = 90


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang


def _render_in_time(args: list[str], what: str) -> int:
    """`attnviz render ARGS`'s exit status; the test fails when no answer comes within SECONDS."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(SECONDS)
    try:
        return main(["render", *args])
    except Hang:
        pytest.fail(f"{what}: no answer within {SECONDS} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _mutate_config(folder, rng: random.Random) -> str:
    config = json.loads((folder / "config.json").read_text())
    key = rng.choice(sorted(k for k, v in config.items() if isinstance(v, (int, float)) and not isinstance(v, bool)))
    config[key] = rng.choice(BAD_VALUES)
    (folder / "config.json").write_text(json.dumps(config))
    return f"config {key} = {config[key]!r}"


def _mutate_weights(folder, rng: random.Random) -> str:
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    if rng.random() < 0.5:
        data = path.read_bytes()
        path.write_bytes(data[: rng.randrange(8, len(data))])
        return "weights truncated"
    state = load_file(str(path))
    key = rng.choice(sorted(state))
    state[key] = torch.randn(*(s + 1 for s in state[key].shape))
    save_file(state, str(path))
    return f"tensor {key} of another shape"


def _mutate_files(folder, rng: random.Random, donor) -> str:
    kind = rng.choice(["stray", "tokenizer", "empty tokenizer"])
    if kind == "stray":
        shutil.copy(donor / "model.safetensors", folder / "other.safetensors")
    elif kind == "tokenizer":
        shutil.copy(donor / "tokenizer.json", folder / "tokenizer.json")
    else:
        (folder / "tokenizer.json").write_text("{")
    return kind


def _reference_weights(folder, ids):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    with torch.no_grad():
        return [a[0].numpy() for a in model(torch.tensor([ids]), output_attentions=True).attentions]


@pytest.mark.parametrize("case", range(CASES))
def test_a_damaged_checkpoint_is_exit_0_and_right_or_exit_2_and_one_line(tiny_models, tmp_path, capsys, case):
    rng = random.Random(case)
    folder, donor = tmp_path / "model", tiny_models("bert")
    shutil.copytree(tiny_models("gpt2"), folder)
    mutate = [_mutate_config, _mutate_weights, lambda f, r: _mutate_files(f, r, donor)][case % 3]
    what = mutate(folder, rng)
    capsys.readouterr()  # what building the tiny models printed is not the run's
    out = tmp_path / "out.npz"
    code = _render_in_time(["--model", str(folder), "--text", SENTENCE, "--all-layers", "-o", str(out)], what)
    err = capsys.readouterr().err.strip()
    assert code in (0, 2), f"{what}: exit {code}: {err}"
    if code == 2:
        assert len(err.splitlines()) == 1 and "Traceback" not in err and not out.exists(), what
        return
    data = np.load(out)
    assert np.isfinite(data["layer_weights"]).all(), what
    for mine, theirs in zip(data["layer_weights"], _reference_weights(folder, data["token_ids"].tolist())):
        np.testing.assert_allclose(mine, theirs, atol=1e-4, err_msg=what)


READ_KEYS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "vocab_size", "max_position_embeddings", "rms_norm_eps", "model_type"]
DEFECTS = {"wrong type": "x", "a list": [1], "negative": -1, "zero": 0, "huge": 10**9, "nan": float("nan"),
           "float": 2.5, "missing": KeyError}


@pytest.mark.parametrize("defect", list(DEFECTS))
@pytest.mark.parametrize("key", READ_KEYS)
def test_every_defect_of_every_config_key_read_is_one_line(tiny_models, tmp_path, capsys, key, defect):
    folder = tmp_path / "model"
    shutil.copytree(tiny_models("llama"), folder)
    config = json.loads((folder / "config.json").read_text())
    if DEFECTS[defect] is KeyError:
        config.pop(key, None)
    else:
        config[key] = DEFECTS[defect]
    (folder / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    code = _render_in_time(["--model", str(folder), "--text", SENTENCE, "-o", str(tmp_path / "out.npz")],
                           f"{key} {defect}")
    err = capsys.readouterr().err.strip()
    assert code in (0, 2), f"{key} {defect}: exit {code}: {err}"
    assert code == 0 or (len(err.splitlines()) == 1 and "Traceback" not in err), f"{key} {defect}: {err}"
