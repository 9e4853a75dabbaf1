"""The run API: RunConfig -> run() -> RunResult, presets, against the seed scripts themselves."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from seeds import (
    Seed000CrossAttention,
    Seed001CrossAttention,
    Seed001SelfAttention,
    Seed002CausalSelfAttention,
    seed000_script,
    seed002_script,
)
from torch.utils.flop_counter import FlopCounterMode

from attnviz.core import (
    DTYPES,
    MASK_KINDS,
    VARIANTS,
    RunConfig,
    RunResult,
    causal_mask,
    list_presets,
    load_config,
    load_preset,
    padding_mask,
    run,
)
from attnviz.core.runs.runner import estimate_flops

FLOAT_ARRAYS = ("output", "q", "k", "v", "scores", "weights", "dropped", "context")
SHIPPED_PRESETS = {"default", "seed000-demo", "seed002-demo", "no-key-rows", "cross-padding",
                   "decoding-bottom-right", "sliding-window", "stable-diffusion-context"}


def small(variant: str, **changes) -> RunConfig:
    base = dict(d_model=16, d_out=8, d_cross=12, heads=2, batch=2, seq_q=5, seq_kv=7, seed=3)
    return RunConfig.for_variant(variant, **{**base, **changes})


def assert_identical(a: RunResult, b: RunResult):
    assert list(a.arrays()) == list(b.arrays())
    for name in a.arrays():
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert np.array_equal(x, y, equal_nan=x.dtype != bool), name


# --- against the seed scripts -------------------------------------------------------------------


def test_seed000_demo_preset_is_exactly_what_seed000_prints():
    expected = seed000_script().detach().numpy()  # seeds itself with torch.manual_seed(123)
    result = run(load_preset("seed000-demo"))
    assert result.output.shape == expected.shape == (3, 5, 8)
    assert np.array_equal(result.output, expected)
    # it is a train-mode sample: dropout really zeroed weights and rescaled the rest
    assert not np.array_equal(result.dropped, result.weights)
    assert (result.dropped == 0).any() and not np.allclose(result.dropped.sum(-1), 1)
    np.testing.assert_allclose(result.weights.sum(-1), 1, rtol=1e-6)


def test_seed002_demo_preset_is_the_seed002_script_under_manual_seed_0():
    torch.manual_seed(0)
    expected = seed002_script(device="cpu").detach().numpy()
    result = run(load_preset("seed002-demo"))
    assert result.output.shape == expected.shape == (8, 16, 512)
    assert np.array_equal(result.output, expected)
    assert result.fully_masked_rows.shape == (8, 8, 16) and not result.fully_masked_rows.any()


def _seed_reference(config: RunConfig, mask):
    """The seed class for config's variant, built and fed in the seed scripts' order."""
    torch.manual_seed(config.seed)
    c = config
    if c.variant == "cross":
        module = Seed000CrossAttention(c.d_model, c.d_out, c.dropout, c.heads, c.in_bias)
        inputs = (torch.randn(c.batch, c.seq_q, c.d_model), torch.randn(c.batch, c.seq_kv, c.d_model),
                  torch.randn(c.batch, c.seq_kv, c.d_model))
        kwargs = {"mask": mask}
    elif c.variant == "cross-context":
        module = Seed001CrossAttention(c.heads, c.d_model, c.d_cross, c.in_bias, c.out_bias)
        inputs = (torch.randn(c.batch, c.seq_q, c.d_model), torch.randn(c.batch, c.seq_kv, c.d_cross))
        assert mask is None  # the seed has no mask argument
        kwargs = {}
    elif c.variant == "self":
        module = Seed001SelfAttention(c.heads, c.d_model, c.in_bias, c.out_bias)
        inputs = (torch.randn(c.batch, c.seq_q, c.d_model),)
        assert mask is None or mask == "causal"
        kwargs = {"causal_mask": mask == "causal"}
    else:
        module = Seed002CausalSelfAttention(c.d_model, c.heads, c.dropout)
        inputs = (torch.randn(c.batch, c.seq_q, c.d_model),)
        kwargs = {"mask": mask}
    module.train(c.train)
    return module(*inputs, **kwargs).detach().numpy()


def _loop_padding(lengths, lkv):
    m = torch.zeros(len(lengths), 1, 1, lkv)
    for b, n in enumerate(lengths):
        m[b, 0, 0, :n] = 1
    return m


@pytest.mark.parametrize("config, seed_mask", [
    (small("self", mask="causal"), "causal"),
    (small("self", mask="none", in_bias=False), None),
    (small("cross-context", mask="none", out_bias=False), None),
    (small("cross", mask="padding", kv_lengths=(7, 2)), _loop_padding([7, 2], 7)),
    (small("cross", mask="causal", dropout=0.2, train=True), torch.ones(5, 7).tril()),
    (small("causal", mask="causal", dropout=0.3, train=True), torch.ones(5, 5).tril()),
    (small("causal", mask="window", window=1), torch.ones(5, 5).tril() - torch.ones(5, 5).tril(-2)),
], ids=["self-causal", "self-nobias", "cross-context", "cross-padding", "cross-causal-train", "causal-train",
        "causal-window"])
def test_run_equals_the_seed_module_under_the_same_seed(config, seed_mask):
    expected = _seed_reference(config, seed_mask)
    result = run(config)
    np.testing.assert_allclose(result.output, expected, atol=1e-6, rtol=0)


def test_shipped_preset_cross_padding_against_seed000():
    config = load_preset("cross-padding")
    lengths = config.kv_lengths_per_item()
    result = run(config)
    np.testing.assert_allclose(result.output, _seed_reference(config, _loop_padding(lengths, config.seq_kv)),
                               atol=1e-6, rtol=0)
    for b, n in enumerate(lengths):
        assert (result.weights[b, ..., n:] == 0).all() and (result.weights[b, ..., :n] > 0).all()


# --- determinism and isolation ------------------------------------------------------------------


@pytest.mark.parametrize("config", [
    load_preset("default"),
    load_preset("seed000-demo"),  # train mode: the dropout sample repeats too
    load_preset("no-key-rows"),  # NaN rows
    small("cross-context", mask="none", batch=3),
    small("self", mask="window-bidirectional", window=1, dtype="bfloat16"),
], ids=["default", "seed000-demo", "no-key-rows", "cross-context", "self-bf16"])
def test_same_config_gives_bit_identical_arrays(config):
    assert_identical(run(config), run(config))


def test_seed_changes_the_numbers():
    a, b = run(small("causal", mask="causal")), run(small("causal", mask="causal", seed=4))
    assert not np.array_equal(a.output, b.output)


def test_run_leaves_the_global_rng_alone():
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    run(small("causal", mask="causal", dropout=0.5, train=True))
    assert torch.equal(torch.rand(3), expected)


SEED_VARIANTS = [v for v in VARIANTS if not VARIANTS[v].backed and VARIANTS[v].read is None]  # computed by a module


@pytest.mark.parametrize("variant", SEED_VARIANTS)
@pytest.mark.parametrize("changes", [{}, {"kv_heads": 1}, {"batch": 3, "seq_kv": 11}])
def test_estimate_flops_counts_what_torch_counts(variant, changes):
    """The worker picks its thread count from estimate_flops; torch's own FLOP counter over the
    real forward is the reference (kv_heads only where the variant has it)."""
    config = small(variant, mask="none", heads=4, d_model=32, d_out=16, **changes)
    if "kv_heads" in changes and not config.applies("kv_heads"):
        pytest.skip(f"{variant} has no kv_heads")
    module, inputs = config.spec.build(config), config.spec.inputs(config)
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        module(*inputs)
    assert estimate_flops(config) == counter.get_total_flops()


# --- every variant, every mask ------------------------------------------------------------------


@pytest.mark.parametrize("variant", [v for v in SEED_VARIANTS if VARIANTS[v].head_factor == 1])
def test_each_variant_runs_with_the_documented_shapes(variant):
    config = small(variant, mask="none")
    result = run(config)
    spec = VARIANTS[variant]
    b, h, lq = config.batch, config.heads, config.seq_q
    lkv = config.seq_kv if spec.cross else config.seq_q
    assert config.lkv == lkv
    width = config.d_out if variant == "cross" else config.d_model  # what the heads split
    dh = width // h
    assert result.output.shape == (b, lq, spec.out_width(config)) == (b, lq, width)
    assert result.q.shape == (b, h, lq, dh)
    assert result.k.shape == result.v.shape == (b, h, lkv, dh)
    for name in ("scores", "weights", "dropped"):
        assert getattr(result, name).shape == (b, h, lq, lkv), name
    assert result.context.shape == (b, lq, width)
    assert np.broadcast_shapes(result.mask.shape, (b, h, lq, lkv)) == (b, h, lq, lkv)
    assert result.fully_masked_rows.shape == (b, h, lq)
    for name in FLOAT_ARRAYS:
        array = getattr(result, name)
        assert isinstance(array, np.ndarray) and array.dtype == np.float32, name
    assert result.mask.dtype == np.bool_ and result.fully_masked_rows.dtype == np.bool_
    assert result.device == "cpu" and result.config is config
    assert result.compute_time_s >= 0 and result.total_time_s >= result.compute_time_s
    np.testing.assert_allclose(result.weights.sum(-1), 1, rtol=1e-5)
    assert np.array_equal(result.dropped, result.weights)  # eval mode
    # the default stages, in the stage list's order, then the mask and row flags
    assert list(result.arrays()) == ["x", "q", "k", "v", "scores", "weights", "dropped", "context", "output",
                                     "mask", "fully_masked_rows"]


def _expected_mask(kind, lq, lkv, window, lengths):
    """Brute force, straight from MASK_KINDS' descriptions (True = may attend)."""
    m = np.zeros((len(lengths), lq, lkv), dtype=bool)
    for b in range(len(lengths)):
        for i in range(lq):
            for j in range(lkv):
                d = i - j
                m[b, i, j] = {
                    "none": True,
                    "causal": d >= 0,
                    "causal-bottom-right": i + lkv - lq >= j,
                    "padding": j < lengths[b],
                    "window": 0 <= d <= window,
                    "window-bidirectional": abs(d) <= window,
                }[kind]
    return m


@pytest.mark.parametrize("kind", list(MASK_KINDS))
def test_each_mask_kind_masks_what_it_says(kind):
    config = small("cross", mask=kind, seq_q=6, seq_kv=4, window=1, kv_lengths=(4, 1))
    result = run(config)
    b, h, lq, lkv = 2, 2, 6, 4
    expected = _expected_mask(kind, lq, lkv, 1, [4, 1])[:, None]  # (B, 1, Lq, Lkv)
    got = np.broadcast_to(result.mask, (b, h, lq, lkv))
    assert np.array_equal(got, np.broadcast_to(expected, got.shape))
    assert np.array_equal(np.isneginf(result.scores), ~got)  # -inf exactly where blocked
    empty = ~got.any(-1)
    assert np.array_equal(result.fully_masked_rows, empty)
    assert np.isnan(result.weights[empty]).all()
    assert (result.weights[~got & ~empty[..., None]] == 0).all()
    np.testing.assert_allclose(result.weights[~empty].sum(-1), 1, rtol=1e-5)
    if kind == "causal-bottom-right":  # 6 queries over 4 keys: the first 2 see nothing
        assert empty[..., :2].all() and not empty[..., 2:].any()
    if kind in ("none", "causal"):
        assert not empty.any()


def test_no_key_rows_preset_flags_nan_rows_and_safe_softmax_zeroes_them():
    config = load_preset("no-key-rows")
    result = run(config)
    lq, lkv, h = config.seq_q, config.seq_kv, config.heads
    assert (lq, lkv) == (12, 8)
    flags = result.fully_masked_rows
    assert flags.shape == (config.batch, h, lq)
    assert flags[..., : lq - lkv].all() and not flags[..., lq - lkv:].any()
    assert np.isnan(result.weights[:, :, :4]).all() and np.isnan(result.output[:, :4]).all()
    assert np.isfinite(result.output[:, 4:]).all()

    safe = run(config.replace(safe_softmax=True))
    assert np.array_equal(safe.fully_masked_rows, flags)  # still flagged, drawn as "no key"
    assert (safe.weights[:, :, :4] == 0).all() and (safe.context[:, :4] == 0).all()
    assert np.isfinite(safe.output).all()
    assert np.array_equal(safe.output[:, 4:], result.output[:, 4:])
    assert np.array_equal(safe.weights[:, :, 4:], result.weights[:, :, 4:])
    # with no context the output is the output projection's bias, the same for every empty row
    assert np.array_equal(safe.output[:, 0], safe.output[:, 3])


def test_padding_length_zero_flags_a_whole_batch_item():
    result = run(small("causal", mask="padding", seq_q=4, kv_lengths=(4, 0)))
    assert not result.fully_masked_rows[0].any() and result.fully_masked_rows[1].all()
    assert np.isnan(result.output[1]).all() and np.isfinite(result.output[0]).all()


def test_one_kv_length_applies_to_every_item():
    config = small("cross", mask="padding", batch=3, kv_lengths=(3,))
    assert config.kv_lengths_per_item() == (3, 3, 3)
    result = run(config)
    assert np.array_equal(np.broadcast_to(result.mask, (3, 1, 1, 7)), padding_mask([3, 3, 3], 7).numpy())


def test_train_mode_dropout_sample():
    config = small("causal", mask="causal", dropout=0.5, train=True)
    result = run(config)
    kept = result.dropped != 0
    np.testing.assert_allclose(result.dropped[kept], result.weights[kept] / 0.5, rtol=1e-6)
    assert (~kept & (result.weights > 0)).any()
    eval_result = run(config.replace(train=False))
    assert np.array_equal(eval_result.weights, result.weights)  # the same weights, before dropout
    assert np.array_equal(eval_result.dropped, eval_result.weights)


# --- dtypes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-5), ("bfloat16", 6e-2), ("float16", 1e-2)])
@pytest.mark.parametrize("variant", ["causal", "cross"])
def test_other_dtypes_run_on_cpu_and_return_float32(dtype, tol, variant):
    config = small(variant, mask="causal")
    reference = run(config)
    result = run(config.replace(dtype=dtype))
    for name in FLOAT_ARRAYS:
        array = getattr(result, name)
        assert array.dtype == np.float32, name
        np.testing.assert_allclose(array, getattr(reference, name), atol=tol, rtol=tol, err_msg=name)
    slow_note = any("slower" in note for note in result.notes)
    assert slow_note == (dtype in ("float16", "bfloat16"))
    if dtype != "float64":  # really computed in low precision, not float32 in disguise:
        low = getattr(torch, dtype)  # every value is one that the low-precision dtype can hold
        for name in FLOAT_ARRAYS:
            values = torch.from_numpy(getattr(result, name))
            assert torch.equal(values.to(low).float(), values), name
        assert not np.array_equal(result.output, reference.output)


def test_dtypes_listed():
    assert set(DTYPES) == {"float32", "float64", "float16", "bfloat16"}


# --- configs, presets, JSON ----------------------------------------------------------------------


def test_shipped_presets_load_and_run():
    presets = list_presets()
    assert set(presets) >= SHIPPED_PRESETS
    for name in presets:
        assert presets[name], f"preset {name} has no description"
        config = load_preset(name)
        assert RunConfig.from_json(config.to_json()) == config
        result = run(config)
        assert result.output.shape[:2] == (result.config.batch, result.config.seq_q)  # a text sets a toy's length


def test_decoding_preset_is_bottom_right():
    result = run(load_preset("decoding-bottom-right"))
    allowed = np.broadcast_to(result.mask, (1, 1, 4, 16))[0, 0]
    assert np.array_equal(allowed, causal_mask(4, 16, "bottom-right").numpy())
    assert (result.weights[..., -1, :] > 0).all()  # the newest query sees every cached key


def test_sliding_window_preset_keeps_at_most_window_plus_one_keys():
    config = load_preset("sliding-window")
    result = run(config)
    assert ((result.weights > 0).sum(-1) <= config.window + 1).all()
    assert ((result.weights > 0).sum(-1)[..., config.window:] == config.window + 1).all()


def test_config_json_round_trip_and_load_config(tmp_path):
    config = small("cross", mask="padding", kv_lengths=[7, 3], safe_softmax=True)
    assert config.kv_lengths == (7, 3)  # lists become tuples: the config stays hashable and frozen
    assert RunConfig.from_json(config.to_json("mine")) == config
    path = tmp_path / "mine.json"
    path.write_text(config.to_json(), encoding="utf-8")
    assert load_config(path) == config
    assert hash(config) == hash(load_config(path))
    with pytest.raises(AttributeError):
        config.heads = 4  # frozen


def test_auto_device():
    result = run(small("causal", mask="causal", device="auto"))
    assert result.device == ("cuda:0" if torch.cuda.is_available() else "cpu")
