"""The modern variants against references nobody here wrote: SDPA's enable_gqa, flex_attention with
score_mods and mask_mods written here from the papers, transformers' rotary code, and the
Differential Transformer's equations."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from attnviz.core import (
    ConfigError,
    RunConfig,
    alibi_slopes,
    attention,
    rope,
    run,
    run_stages,
)
from attnviz.core.analysis.cells import cell_path
from attnviz.core.kernel.mods import AttentionOptions
from attnviz.core.kernel.stages import ALL_STAGES

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def flex_weights(q, k, score_mod=None, block_mask=None, scale=None):
    """flex_attention's attention weights: with V the identity over keys, the output *is* the weights."""
    b, h, lkv = q.shape[0], q.shape[1], k.shape[2]
    eye = torch.eye(lkv, dtype=q.dtype).expand(b, h, lkv, lkv).contiguous()
    return flex_attention(q, k, eye, score_mod=score_mod, block_mask=block_mask, scale=scale)


def qkv(b=2, h=4, hkv=4, lq=12, lkv=12, dh=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, lq, dh, generator=g), torch.randn(b, hkv, lkv, dh, generator=g),
            torch.randn(b, hkv, lkv, dh, generator=g))


# --- GQA / MQA ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kv_heads", [1, 2, 8])
def test_gqa_and_mqa_match_sdpa_enable_gqa(kv_heads):
    q, k, v = qkv(h=8, hkv=kv_heads)
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    ours, trace = attention(q, k, v, mask=causal, record={"weights", "k"})
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=causal, enable_gqa=True)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    assert trace.k.shape[1] == kv_heads  # the trace keeps the shared keys, not copies


def test_gqa_query_heads_of_a_group_read_the_same_keys():
    config = RunConfig(variant="causal", d_model=64, heads=8, kv_heads=2, seq_q=10, mask="none")
    result = run(config)
    assert result.k.shape == (1, 2, 10, 8) and result.q.shape == (1, 8, 10, 8)
    # heads 0-3 share kv head 0: their scores are their own q against the same keys
    expected = torch.from_numpy(result.q[0, 3]) @ torch.from_numpy(result.k[0, 0]).T / math.sqrt(8)
    torch.testing.assert_close(torch.from_numpy(result.scores[0, 3]), expected, rtol=1e-5, atol=1e-5)


def test_kv_heads_shrink_the_projections_and_keep_seed_keys():
    module = RunConfig(variant="causal", d_model=64, heads=8, kv_heads=2).spec.build(
        RunConfig(variant="causal", d_model=64, heads=8, kv_heads=2))
    assert module.key.weight.shape == (16, 64) and module.value.weight.shape == (16, 64)
    assert set(module.state_dict()) == {f"{n}.{p}" for n in ("query", "key", "value", "output")
                                        for p in ("weight", "bias")}


# --- ALiBi and the soft cap against flex_attention -------------------------------------------------


def paper_slopes(n):
    """The ALiBi authors' get_slopes, transcribed from the paper's reference code."""
    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest) + paper_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("heads", [1, 2, 6, 8, 12, 16])
def test_alibi_slopes_follow_the_papers_code_including_non_powers_of_two(heads):
    torch.testing.assert_close(alibi_slopes(heads), torch.tensor(paper_slopes(heads)), rtol=1e-6, atol=0)


def test_alibi_and_softcap_match_flex_attention_score_mods():
    q, k, v = qkv(h=6, hkv=6)
    q, k = q * 3, k * 3  # peaky scores, so the cap matters
    slopes, cap = torch.tensor(paper_slopes(6)), 2.5

    def score_mod(score, b, h, q_idx, kv_idx):  # written from the papers, not from attnviz.core.kernel.mods
        score = score - slopes[h] * (q_idx - kv_idx).abs()
        return cap * torch.tanh(score / cap)

    options = AttentionOptions(position="alibi", softcap=cap)
    ours, trace = attention(q, k, v, **options.kernel_args(6), record={"weights", "biased", "capped", "scaled"})
    torch.testing.assert_close(ours, flex_attention(q, k, v, score_mod=score_mod), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(trace.weights, flex_weights(q, k, score_mod=score_mod), rtol=1e-5, atol=1e-6)
    assert (trace.capped.abs() <= cap).all() and not (trace.scaled.abs() <= cap).all()


def test_qk_scale_replaces_one_over_sqrt_d():
    q, k, v = qkv()
    ours, _ = attention(q, k, v, scale=1 / 8)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, scale=1 / 8), rtol=1e-5, atol=1e-6)


# --- window + sinks against a mask_mod --------------------------------------------------------------


@pytest.mark.parametrize("mask, causal", [("window", True), ("window-bidirectional", False)])
def test_window_with_sinks_matches_a_flex_mask_mod(mask, causal):
    window, sinks, length = 3, 2, 16

    def mask_mod(b, h, q_idx, kv_idx):  # StreamingLLM: a window plus the first keys, written here
        near = (q_idx - kv_idx <= window) & (q_idx >= kv_idx) if causal else (q_idx - kv_idx).abs() <= window
        sink = (kv_idx < sinks) & (q_idx >= kv_idx) if causal else kv_idx < sinks
        return near | sink

    config = RunConfig(variant="causal", d_model=32, heads=2, seq_q=length, mask=mask, window=window, sinks=sinks)
    result = run(config)
    block = create_block_mask(mask_mod, None, None, length, length, device="cpu")
    q, k = torch.from_numpy(result.q), torch.from_numpy(result.k)
    torch.testing.assert_close(torch.from_numpy(result.weights), flex_weights(q, k, block_mask=block),
                               rtol=1e-5, atol=1e-6)
    assert (result.weights[..., 10, :sinks] > 0).all()  # a late query still sees the sinks


# --- RoPE against the formula and transformers' rotary code ---------------------------------------


def test_rope_rotate_half_matches_transformers_llama():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    x = torch.randn(2, 3, 10, 16)
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, 16, 2).float() / 16))
    freqs = torch.arange(10).float()[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), -1)
    ref, _ = apply_rotary_pos_emb(x, x, emb.cos()[None], emb.sin()[None])
    torch.testing.assert_close(rope(x, base=500000.0), ref, rtol=1e-5, atol=1e-5)


def test_rope_interleaved_matches_transformers_gptj():
    from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb, create_sinusoidal_positions

    x = torch.randn(2, 10, 3, 16)  # GPT-J rotates (B, L, H, d)
    sincos = create_sinusoidal_positions(10, 16)[None]  # (1, L, d): sin half, cos half
    sin, cos = torch.split(sincos, 8, dim=-1)
    ref = apply_rotary_pos_emb(x, sin, cos)
    torch.testing.assert_close(rope(x.transpose(1, 2), interleaved=True).transpose(1, 2), ref, rtol=1e-5, atol=1e-5)


def test_rope_is_the_rotation_formula_and_makes_scores_relative():
    x = torch.randn(5, 4)
    out = rope(x[None], base=100.0, interleaved=True)[0]
    for m in range(5):  # pair (x0, x1) at position m turns by m * base^0
        c, s = math.cos(m), math.sin(m)
        torch.testing.assert_close(out[m, :2], torch.stack([x[m, 0] * c - x[m, 1] * s, x[m, 0] * s + x[m, 1] * c]))
    q, k = torch.randn(1, 8), torch.randn(1, 8)  # q·k depends on the distance only
    qs, ks = rope(q.expand(12, 8).contiguous()), rope(k.expand(12, 8).contiguous())
    torch.testing.assert_close((qs[7] * ks[4]).sum(), (qs[3] * ks[0]).sum(), rtol=1e-4, atol=1e-5)


def test_rope_in_a_run_rotates_q_and_k_and_keeps_the_projections():
    config = RunConfig(variant="causal", d_model=32, heads=2, seq_q=9, position="rope")
    result = run(config, record=ALL_STAGES)
    assert {"q_proj", "k_proj"} <= set(result.stages)
    torch.testing.assert_close(torch.from_numpy(result.q), rope(torch.from_numpy(result.q_proj)))
    torch.testing.assert_close(torch.from_numpy(result.k), rope(torch.from_numpy(result.k_proj)))


# --- differential attention against the paper's equations ----------------------------------------


def test_differential_attention_follows_the_paper():
    config = RunConfig(variant="differential", d_model=32, heads=2, seq_q=7, layer=3, mask="causal")
    result = run(config, record=ALL_STAGES)
    torch.manual_seed(config.seed)
    module = config.spec.build(config)
    x = torch.from_numpy(result.x)
    b, length, heads, dh = 1, 7, 2, 8
    q = module.q_proj(x).view(b, length, 2 * heads, dh).transpose(1, 2)
    k = module.k_proj(x).view(b, length, 2 * heads, dh).transpose(1, 2)
    v = module.v_proj(x).view(b, length, heads, 2 * dh).transpose(1, 2)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    a = torch.softmax((q @ k.transpose(-1, -2) * dh ** -0.5).masked_fill(~causal, -math.inf), -1)
    lambda_init = 0.8 - 0.6 * math.exp(-0.3 * 3)
    lam = (torch.exp((module.lambda_q1 * module.lambda_k1).sum(-1))
           - torch.exp((module.lambda_q2 * module.lambda_k2).sum(-1)) + lambda_init)
    diff = a[:, 0::2] - lam.view(1, heads, 1, 1) * a[:, 1::2]  # adjacent sub-heads, as the paper's code
    attn = diff @ v
    attn = attn * torch.rsqrt(attn.pow(2).mean(-1, keepdim=True) + 1e-5) * module.subln.weight
    out = module.out_proj((attn * (1 - lambda_init)).transpose(1, 2).reshape(b, length, 2 * heads * dh))
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(result.weights), a, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(torch.from_numpy(result.combined), diff, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(torch.from_numpy(result.output), out, rtol=1e-4, atol=1e-5)
    assert (result.dropped < 0).any()  # signed: the second map subtracts


# --- sink logit -------------------------------------------------------------------------------------


def test_sink_logit_joins_the_denominator_like_gpt_oss():
    q, k, v = qkv(h=3, hkv=3)
    sink = torch.tensor([0.0, 2.0, -1.0])
    _, trace = attention(q, k, v, sink=sink, record={"scores", "weights"})
    s = trace.scores
    expected = torch.exp(s) / (torch.exp(s).sum(-1, keepdim=True) + torch.exp(sink).view(1, 3, 1, 1))
    torch.testing.assert_close(trace.weights, expected, rtol=1e-5, atol=1e-6)
    assert (trace.weights.sum(-1) < 1).all()


def test_sink_logit_run_adds_a_parameter_only_when_on():
    on = RunConfig(variant="causal", d_model=32, heads=2, sink_logit=1.5)
    assert "sinks" in on.spec.build(on).state_dict()
    off = RunConfig(variant="causal", d_model=32, heads=2)
    assert "sinks" not in off.spec.build(off).state_dict()
    assert (run(on).weights.sum(-1) < 1).all()


# --- composition, stages, hover path ----------------------------------------------------------------


def test_everything_composes_in_one_configuration():
    config = RunConfig(variant="causal", d_model=64, heads=8, kv_heads=2, position="rope", softcap=3.0,
                       mask="window", window=4, sinks=1, seq_q=20)
    result = run(config, record=ALL_STAGES)
    assert set(run_stages(config)) - set(result.stages) == set()
    assert {"q_proj", "capped"} <= set(result.stages) and "biased" not in result.stages
    assert abs(result.capped).max() <= 3.0
    np_rows = result.weights.sum(-1)
    torch.testing.assert_close(torch.from_numpy(np_rows), torch.ones_like(torch.from_numpy(np_rows)))


def test_kept_stages_are_not_overwritten_in_place():
    q, k, v = qkv()
    mask = torch.ones(12, 12, dtype=torch.bool).tril()
    _, trace = attention(q, k, v, mask=mask, record={"qk", "scaled", "scores"})
    torch.testing.assert_close(trace.qk, q @ k.transpose(-1, -2))
    torch.testing.assert_close(trace.scaled, q @ k.transpose(-1, -2) / math.sqrt(8))
    assert torch.isinf(trace.scores).any() and torch.isfinite(trace.scaled).all()


def test_cell_path_reproduces_each_stage_of_the_maps():
    config = RunConfig(variant="self", d_model=32, heads=4, seq_q=10, position="alibi", softcap=2.0,
                       mask="causal")
    result = run(config, record=ALL_STAGES)
    for m, i, j in [(0, 5, 2), (3, 9, 9), (2, 4, 0)]:
        path = cell_path(result, 0, m, i, j)
        assert list(path) == ["qk", "scaled", "biased", "capped", "scores", "weights"]
        for stage, value in path.items():
            assert value == pytest.approx(float(getattr(result, stage)[0, m, i, j]), rel=1e-4, abs=1e-5), stage


# --- bad input: each a ConfigError naming the fix --------------------------------------------------


@pytest.mark.parametrize("changes, field, fix", [
    (dict(heads=8, kv_heads=3), "kv_heads", "divisor of 8"),
    (dict(softcap=-1.0), "softcap", "0 or more"),
    (dict(qk_scale=-0.5), "qk_scale", "0 or more"),
    (dict(mask="window", sinks=40, seq_q=16), "sinks", "at most 16"),
    (dict(d_model=36, heads=4, position="rope"), "position", "d_head is even"),
    (dict(position="sinusoid"), "position", "rope"),
])
def test_bad_variant_settings_name_the_fix(changes, field, fix):
    with pytest.raises(ConfigError) as info:
        RunConfig(variant="causal", **changes)
    assert info.value.field == field and fix in str(info.value)


# --- the CLI: generated flags, stage views, exit 2 on bad input ------------------------------------


def test_cli_renders_a_stage_view_and_keeps_the_stages_asked_for(tmp_path):
    import numpy as np

    from attnviz.cli import main

    out = tmp_path / "alibi.npz"
    assert main(["render", "--variant", "self", "--d-model", "32", "--heads", "4", "--seq-q", "8",
                 "--position", "alibi", "--view", "biased", "--stages", "qk,scaled", "-o", str(out)]) == 0
    with np.load(out) as data:
        assert {"qk", "scaled", "biased", "scores", "weights"} <= set(data.files)
        distance = np.abs(np.arange(8)[:, None] - np.arange(8)[None])
        bias = data["biased"][0, 0] - data["scaled"][0, 0]
        np.testing.assert_allclose(bias, -paper_slopes(4)[0] * distance, rtol=1e-5, atol=1e-5)
    assert main(["render", "--variant", "causal", "--position", "rope", "--stages", "all",
                 "-o", str(tmp_path / "rope.npz")]) == 0
    with np.load(tmp_path / "rope.npz") as data:
        assert {"q_proj", "k_proj", "qk", "scaled"} <= set(data.files) and "capped" not in data.files


@pytest.mark.parametrize("flags, words", [
    (["--heads", "8", "--kv-heads", "3"], "--kv-heads 3: "),
    (["--softcap", "-1"], "--softcap -1"),
    (["--view", "capped"], "no capped stage"),
    (["--mask", "window", "--sinks", "99"], "--sinks 99: "),
    (["--position", "nope"], "invalid choice"),
    (["--sinks", "4"], "--sinks does not apply"),  # no window mask: it would be silently ignored
    (["--text", "hello"], "--text does not apply"),
])
def test_cli_bad_variant_input_exits_2_with_one_line_and_writes_nothing(flags, words, tmp_path, capsys):
    from attnviz.cli import main

    out = tmp_path / "x.png"
    assert main(["render", "--variant", "causal", *flags, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    assert not out.exists() and not list(tmp_path.iterdir())


def test_cli_refuses_a_position_on_a_cross_variant_instead_of_ignoring_it(tmp_path, capsys):
    from attnviz.cli import main

    out = tmp_path / "x.npz"
    assert main(["render", "--variant", "cross", "--position", "rope", "-o", str(out)]) == 2
    assert "--position does not apply to variant cross" in capsys.readouterr().err and not out.exists()
