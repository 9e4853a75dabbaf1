"""Every bad configuration raises ConfigError (a ValueError) naming the field, the value and the fix."""

from __future__ import annotations

import json

import pytest
import torch

from attnviz.core import (
    ConfigError,
    RunConfig,
    estimate_memory,
    list_presets,
    load_config,
    load_preset,
    resolve_device,
    run,
)

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when CUDA is missing")


def check(info: pytest.ExceptionInfo, field: str, value, *fix_words: str, problem_words: tuple[str, ...] = ()):
    """The error is a ConfigError about `field` = `value`, and its fix says `fix_words`."""
    err = info.value
    assert isinstance(err, ConfigError) and isinstance(err, ValueError)
    assert err.field == field
    assert err.value == value
    message = str(err)
    assert message.startswith(f"{field} = {value!r}: "), message
    problem, _, fix = message.partition(". Fix: ")
    assert fix, f"no fix in {message!r}"
    for word in fix_words:
        assert word in fix, f"{word!r} not in the fix of {message!r}"
    for word in problem_words:
        assert word in problem, f"{word!r} not in the problem of {message!r}"
    return message


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("variant, field, value", [
    ("causal", "d_model", 0),
    ("causal", "d_model", -64),
    ("causal", "heads", 0),
    ("causal", "heads", -2),
    ("causal", "batch", 0),
    ("causal", "seq_q", 0),
    ("cross", "seq_kv", 0),
    ("cross", "d_out", 0),
    ("cross-context", "d_cross", -1),
    ("self", "seq_q", -5),
])
def test_sizes_must_be_positive(variant, field, value):
    with pytest.raises(ConfigError) as info:
        RunConfig.for_variant(variant, **{field: value})
    check(info, field, value, f"set {field} to 1 or more", problem_words=("at least 1",))


def test_window_must_not_be_negative():
    with pytest.raises(ConfigError) as info:
        RunConfig(mask="window", window=-1)
    check(info, "window", -1, "0 or more")


def test_heads_not_dividing_the_width_lists_the_nearest_valid_counts():
    with pytest.raises(ConfigError) as info:
        RunConfig(variant="causal", d_model=64, heads=6)
    message = check(info, "heads", 6, "4 or 8", problem_words=("64",))
    assert "6 heads" in message
    # the width the heads split is d_out for seed 000's cross-attention
    with pytest.raises(ConfigError) as info:
        RunConfig.for_variant("cross", d_model=64, d_out=10, heads=4)
    check(info, "heads", 4, "2 or 5", problem_words=("10", "d_out"))
    # no valid count above the width: only the one below is offered
    with pytest.raises(ConfigError) as info:
        RunConfig(d_model=12, heads=13)
    check(info, "heads", 13, "use 12 heads")


def test_nondividing_heads_never_reach_the_module():
    assert RunConfig(d_model=64, heads=8).head_dim == 8
    assert RunConfig.for_variant("cross", d_model=10, d_out=8, heads=2).head_dim == 4  # d_in need not divide


@no_cuda
def test_cuda_without_a_cuda_device():
    config = RunConfig(device="cuda")  # well-formed: refused when run, where the machine is known
    with pytest.raises(ConfigError) as info:
        run(config)
    check(info, "device", "cuda", "cpu", "auto", problem_words=("CUDA",))
    with pytest.raises(ConfigError):
        resolve_device("cuda:0")


def test_cuda_index_that_does_not_exist():
    with pytest.raises(ConfigError) as info:
        run(RunConfig(device="cuda:99", seq_q=4))
    if torch.cuda.is_available():
        check(info, "device", "cuda:99", "cuda:0", problem_words=(str(torch.cuda.device_count()),))
    else:
        check(info, "device", "cuda:99", "cpu")


def test_unknown_variant_mask_and_dtype():
    with pytest.raises(ConfigError) as info:
        RunConfig(variant="linear")
    check(info, "variant", "linear", "causal", "self", "cross", "cross-context")
    with pytest.raises(ConfigError) as info:
        RunConfig.for_variant("linear")
    check(info, "variant", "linear", "cross-context")
    with pytest.raises(ConfigError) as info:
        RunConfig(mask="diagonal")
    check(info, "mask", "diagonal", "none", "causal-bottom-right", "window-bidirectional", "padding")
    with pytest.raises(ConfigError) as info:
        RunConfig(dtype="float8")
    check(info, "dtype", "float8", "float32", "bfloat16")


def test_padding_lengths_must_fit_the_key_sequence():
    with pytest.raises(ConfigError) as info:
        RunConfig(mask="padding", seq_q=8, kv_lengths=(9,))
    check(info, "kv_lengths", (9,), "between 0 and 8", problem_words=("9",))
    with pytest.raises(ConfigError) as info:
        RunConfig(mask="padding", seq_q=8, batch=2, kv_lengths=(8, -1))
    check(info, "kv_lengths", (8, -1), "between 0 and 8")
    # cross-attention pads the keys, whose length is seq_kv
    RunConfig.for_variant("cross", mask="padding", seq_q=4, seq_kv=20, kv_lengths=(20,))
    with pytest.raises(ConfigError) as info:
        RunConfig.for_variant("cross", mask="padding", seq_q=40, seq_kv=20, kv_lengths=(21,))
    check(info, "kv_lengths", (21,), "between 0 and 20")


def test_padding_needs_one_length_or_one_per_batch_item():
    with pytest.raises(ConfigError) as info:
        RunConfig(mask="padding", batch=3, seq_q=8, kv_lengths=(4, 5))
    check(info, "kv_lengths", (4, 5), "1 or 3 lengths", problem_words=("2 lengths", "batch 3"))
    with pytest.raises(ConfigError) as info:
        RunConfig(mask="padding", batch=2, seq_q=8)
    check(info, "kv_lengths", (), "one length per batch item")
    with pytest.raises(ConfigError) as info:
        RunConfig(mask="padding", seq_q=8, kv_lengths=(4.5,))
    check(info, "kv_lengths", (4.5,))
    # lengths only matter with the padding mask
    assert RunConfig(mask="causal", kv_lengths=(99, 99, 99)).kv_lengths == (99, 99, 99)


def test_memory_over_budget_is_refused_with_the_estimate_and_the_budget():
    config = RunConfig(seq_q=256, heads=8, batch=2, pool="never")  # auto would pool it
    need = estimate_memory(config)
    assert 2 << 20 < need < 1 << 28  # a few MiB
    with pytest.raises(ConfigError) as info:
        run(config, memory_budget=1 << 20)
    message = check(info, "seq_q", 256, "lengths of", problem_words=("budget",))
    assert f"{need / 2**20:.0f} MiB" in message  # the estimate
    assert "1 MiB" in message and "memory_budget" in message  # the budget, and where it came from
    assert "B=2 H=8 Lq=256 Lkv=256" in message
    fit = int(message.split("lengths of ")[1].split()[0])
    assert 0 < fit < 256
    with pytest.raises(ConfigError) as info:
        run(config, memory_budget=1000)
    assert "1000 bytes" in str(info.value)
    assert run(config.replace(seq_q=4), memory_budget=need).output.shape == (2, 4, 64)  # fits: runs


def test_memory_estimate_grows_with_the_maps():
    base = RunConfig(seq_q=64)
    assert estimate_memory(base.replace(seq_q=128)) > estimate_memory(base)
    assert estimate_memory(base.replace(heads=8)) > estimate_memory(base)
    assert estimate_memory(base.replace(train=True, dropout=0.1)) > estimate_memory(base)
    # the attention maps alone: B * H * Lq * Lkv float32 values for scores and weights
    big = RunConfig(seq_q=2048, heads=8, batch=2)
    assert estimate_memory(big) >= 2 * 2 * 8 * 2048 * 2048 * 4


def test_from_json_errors():
    good = json.loads(RunConfig().to_json())
    with pytest.raises(ConfigError) as info:
        RunConfig.from_json('{"format": "attnviz-config", "config": {')
    check(info, "file", '{"format": "attnviz-config", "config": {', "fix the JSON syntax",
          problem_words=("not valid JSON",))
    with pytest.raises(ConfigError) as info:
        RunConfig.from_json(json.dumps({**good, "config": {**good["config"], "n_heads": 4}}))
    check(info, "n_heads", 4, "remove it", "heads", problem_words=("unknown",))
    with pytest.raises(ConfigError) as info:
        RunConfig.from_json(json.dumps({"config": good["config"]}))
    check(info, "format", None, '"format": "attnviz-config"')
    with pytest.raises(ConfigError) as info:
        RunConfig.from_json("[1, 2]")
    check(info, "format", "list")
    with pytest.raises(ConfigError) as info:
        RunConfig.from_json(json.dumps({**good, "config": {**good["config"], "heads": "4"}}))
    check(info, "heads", "4")
    with pytest.raises(ConfigError) as info:
        RunConfig.from_json(json.dumps({**good, "config": {**good["config"], "heads": 6}}))
    check(info, "heads", 6, "4 or 8")


def test_load_config_and_load_preset_errors(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError) as info:
        load_config(missing)
    check(info, "file", str(missing), "check the path")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    check(info, "file", str(bad), "JSON")
    assert "{not json" not in str(info.value)  # names the file, never quotes its contents
    with pytest.raises(ConfigError) as info:
        load_preset("no-such-preset")
    check(info, "preset", "no-such-preset", *list_presets())
