"""Bad values and bad files: NaN / inf, huge, endless, binary, Latin-1 and deeply nested configurations
are ConfigErrors naming the file and the fix; a padding run too big for memory gets a fix valid for its mask."""

from __future__ import annotations

import json
import math
import os

import pytest

from attnviz.core import ConfigError, RunConfig, load_config, run
from attnviz.core.runs.configfile import MAX_CONFIG_BYTES
from attnviz.core.runs.runner import MemoryBudgetError, shortened


def saved(tmp_path, config: dict, name: str = "c.json"):
    path = tmp_path / name
    doc = {"format": "attnviz-config", "version": 1, "config": config}
    path.write_text(json.dumps(doc), encoding="utf-8")  # json.dumps writes NaN / Infinity as Python does
    return path


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_config_errors(value, tmp_path):
    with pytest.raises(ConfigError) as info:
        RunConfig(dropout=value, train=True)
    assert info.value.field == "dropout" and "finite" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(saved(tmp_path, {"dropout": value, "train": True}))
    assert info.value.field == "dropout"


def test_a_bool_is_not_a_float():
    with pytest.raises(ConfigError):
        RunConfig(dropout=True)


def file_error(path) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    assert err.field == "file" and err.value == str(path)
    message = str(err)
    assert len(message.splitlines()) == 1 and ". Fix: " in message
    return message


def test_a_device_and_a_pipe_are_refused_without_reading():
    assert "character device" in file_error("/dev/zero")  # would read until memory runs out


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    assert "pipe" in file_error(fifo)


def test_a_folder_is_refused(tmp_path):
    assert "folder" in file_error(tmp_path)


def test_a_file_over_one_mib_is_refused(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (MAX_CONFIG_BYTES + 1))
    assert "larger than 1 MiB" in file_error(big)
    ok = saved(tmp_path, RunConfig(heads=2).to_dict())
    ok.write_text(ok.read_text() + " " * (MAX_CONFIG_BYTES - ok.stat().st_size))  # exactly the limit: fine
    assert load_config(ok) == RunConfig(heads=2)


def test_binary_and_latin1_files_say_so_and_how_to_fix(tmp_path):
    binary = tmp_path / "weights.json"
    binary.write_bytes(bytes(range(256)) * 4)
    message = file_error(binary)
    assert "binary" in message and "UTF-8" in message
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"format": "attnviz-config", "description": "café", "config": {}}'.encode("latin-1"))
    message = file_error(latin)
    assert "not UTF-8" in message and "save it as UTF-8" in message and "café" not in message


def test_a_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + RunConfig(seed=3).to_json().encode())
    assert load_config(path) == RunConfig(seed=3)


def test_deep_nesting_is_a_config_error_not_a_recursion_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert "nested too deeply" in file_error(deep)
    with pytest.raises(ConfigError):
        RunConfig.from_json('{"format": "attnviz-config", "config": {"heads": ' + "[" * 900 + "]" * 900 + "}}")


def test_a_huge_value_gives_a_short_message(tmp_path):
    with pytest.raises(ConfigError) as info:
        RunConfig.from_json(json.dumps({"format": "attnviz-config", "config": {"heads": "x" * 100_000}}))
    assert len(str(info.value)) < 300


def test_memory_refusal_of_a_padding_run_names_memory_and_a_fix_valid_for_the_mask():
    config = RunConfig.for_variant("cross", mask="padding", kv_lengths=(4000, 3000), seq_q=4096, seq_kv=4096,
                                   pool="never",
                                   heads=8, batch=2)
    with pytest.raises(MemoryBudgetError) as info:
        run(config, memory_budget=50 << 20)
    err = info.value
    assert err.field == "seq_q" and "memory" in str(err)
    (fit,) = err.suggestions
    assert 1 <= fit < 4096
    fixed = shortened(config, fit)  # what the quick fix applies: valid, and it fits
    assert fixed.seq_q == fixed.seq_kv == fit and max(fixed.kv_lengths) <= fit
    assert run(fixed.replace(seq_q=min(fit, 8)), memory_budget=50 << 20).output.shape[1] == min(fit, 8)


def test_memory_refusal_blames_the_key_length_when_the_keys_are_the_long_side():
    config = RunConfig.for_variant("cross", mask="padding", kv_lengths=(4000, 100), seq_q=300, seq_kv=4000,
                                   pool="never",
                                   heads=8, batch=2)
    with pytest.raises(MemoryBudgetError) as info:
        run(config, memory_budget=40 << 20)
    err = info.value
    (fit,) = err.suggestions
    assert err.field == "seq_kv" and err.value == 4000 and 1 <= fit < 4000
    assert f"kv_lengths at most {fit}" in str(err)  # what the command line must change itself
    fixed = shortened(config, fit)
    assert fixed.seq_q == min(300, fit) and fixed.seq_kv == fit and max(fixed.kv_lengths) <= fit
