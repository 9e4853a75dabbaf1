"""Per-head statistics and attention rollout against direct NumPy formulas."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.core import RunConfig, load_preset, run
from attnviz.core.analysis.stats import STAT_NAMES, head_stats, layer_stats, rollout, stats_csv


def _random_weights(rng, heads, lq, lkv, causal=True):
    s = rng.normal(size=(heads, lq, lkv))
    if causal:
        s = np.where(np.tril(np.ones((lq, lkv), bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_head_stats_follow_the_formulas():
    w = _random_weights(np.random.default_rng(0), 3, 9, 9)
    stats = head_stats(w)
    assert list(stats) == list(STAT_NAMES)
    for h in range(3):
        rows = w[h]
        ent = [-sum(x * np.log(x) for x in row if x > 0) for row in rows]
        assert stats["entropy"][h] == pytest.approx(np.mean(ent), rel=1e-12)
        dist = [sum(rows[i, j] * abs(i - j) for j in range(9)) for i in range(9)]
        assert stats["distance"][h] == pytest.approx(np.mean(dist), rel=1e-12)
        assert stats["max_weight"][h] == rows.max()
        assert stats["sink"][h] == pytest.approx(rows[:, 0].mean())
        assert stats["previous"][h] == pytest.approx(np.mean([rows[i, i - 1] for i in range(1, 9)]))
        assert stats["diagonal"][h] == pytest.approx(np.mean(np.diag(rows)))


def test_known_heads():
    n = 6
    eye = np.eye(n)[None]
    prev = np.eye(n, k=-1)[None].copy()
    prev[0, 0, 0] = 1.0
    uniform = np.full((1, n, n), 1 / n)
    s = head_stats(np.concatenate([eye, prev, uniform]))
    np.testing.assert_allclose(s["entropy"], [0, 0, np.log(n)], atol=1e-12)
    np.testing.assert_allclose(s["diagonal"], [1, 1 / n, 1 / n])
    np.testing.assert_allclose(s["previous"], [0, 1, 1 / n])
    np.testing.assert_allclose(s["distance"][:2], [0, 5 / 6])


def test_rows_without_a_key_are_left_out():
    result = run(load_preset("no-key-rows"))  # the first 4 query rows have no key (NaN)
    w, empty = result.weights[0], result.fully_masked_rows[0, 0]
    assert empty.any() and np.isnan(w[:, empty]).all()
    s = head_stats(w, empty)
    ok = w[:, ~empty]
    ent = -(np.where(ok > 0, ok * np.log(np.where(ok > 0, ok, 1)), 0)).sum(-1).mean(-1)
    np.testing.assert_allclose(s["entropy"], ent, rtol=1e-6)
    assert np.isfinite(s["sink"]).all()


def test_layer_stats_and_csv():
    rng = np.random.default_rng(1)
    lw = np.stack([_random_weights(rng, 2, 5, 5)[None] for _ in range(3)])  # (3, 1, 2, 5, 5)
    ls = layer_stats(lw)
    assert ls["entropy"].shape == (3, 2)
    np.testing.assert_allclose(ls["entropy"][1], head_stats(lw[1, 0])["entropy"])
    text = stats_csv(head_stats(lw[0, 0]))
    lines = text.splitlines()
    assert lines[0].startswith("head,entropy (nats),max weight") and len(lines) == 3
    assert float(lines[1].split(",")[1]) == pytest.approx(head_stats(lw[0, 0])["entropy"][0], rel=1e-5)


def _rollout_reference(layer_weights):
    """Abnar & Zuidema (2020), eq. as in their code: A = 0.5 W_avg + 0.5 I, rows renormalised,
    joint attention of layer l = A_l @ joint of layer l-1 (plain loops, one batch item)."""
    layers, batch, heads, n, _ = layer_weights.shape
    out = np.zeros((batch, n, n))
    for b in range(batch):
        joint = None
        for layer in range(layers):
            avg = sum(layer_weights[layer, b, h] for h in range(heads)) / heads
            aug = 0.5 * avg + 0.5 * np.eye(n)
            aug = aug / aug.sum(axis=-1)[:, None]
            joint = aug if joint is None else np.matmul(aug, joint)
        out[b] = joint
    return out


def test_rollout_matches_the_papers_formula():
    rng = np.random.default_rng(2)
    lw = np.stack([np.stack([_random_weights(rng, 3, 7, 7) for _ in range(2)]) for _ in range(4)])
    got = rollout(lw)
    assert got.shape == (2, 7, 7)
    np.testing.assert_allclose(got, _rollout_reference(lw), rtol=1e-12)
    np.testing.assert_allclose(got.sum(-1), 1.0)  # each row still a distribution
    np.testing.assert_allclose(np.tril(got), got, atol=1e-15)  # causal layers: a causal rollout


def test_rollout_refuses_non_square_maps():
    with pytest.raises(ValueError, match="square"):
        rollout(np.ones((2, 1, 1, 3, 4)) / 4)


def test_stats_of_a_real_run_match_result_weights():
    result = run(RunConfig(heads=4, seq_q=20))
    w = result.weights[0].astype(np.float64)
    ent = -(np.where(w > 0, w * np.log(np.where(w > 0, w, 1)), 0)).sum(-1).mean(-1)
    np.testing.assert_allclose(head_stats(result.weights[0])["entropy"], ent, rtol=1e-10)


def test_rows_with_a_single_key_are_left_out():
    """A causal map's first row has one key: weight 1.0 there whatever the head does. Counted, every causal
    head's max weight read 1.0. Hand computation over rows 1 and 2 only."""
    from attnviz.core.analysis.stats import row_keys
    from attnviz.core.kernel.stat_sums import StatSums

    w = np.array([[[1.0, 0.0, 0.0],
                   [0.25, 0.75, 0.0],
                   [0.5, 0.25, 0.25]]])
    keys = row_keys(np.tril(np.ones((3, 3), bool))[None], 3)
    assert keys.tolist() == [1, 2, 3]
    s = head_stats(w, keys=keys)
    ln = np.log
    assert s["max_weight"][0] == 0.75
    row1, row2 = 0.25 * ln(4) + 0.75 * ln(4 / 3), 0.5 * ln(2) + 0.5 * ln(4)  # -Σ w ln w
    assert s["entropy"][0] == pytest.approx((row1 + row2) / 2, rel=1e-12)
    assert s["distance"][0] == pytest.approx((0.25 * 1 + (0.5 * 2 + 0.25 * 1)) / 2, rel=1e-12)
    assert s["sink"][0] == pytest.approx((0.25 + 0.5) / 2, rel=1e-12)
    assert s["previous"][0] == pytest.approx((0.25 + 0.25) / 2, rel=1e-12)
    assert s["diagonal"][0] == pytest.approx((0.75 + 0.25) / 2, rel=1e-12)
    assert head_stats(w)["max_weight"][0] == 1.0  # without the keys the first row still counts
    blocks = StatSums(1, 3)  # fed in blocks of rows (the pooled path), the same numbers
    blocks.add(w[:, :2], 0, keys=keys[None, :2])
    blocks.add(w[:, 2:], 2, keys=keys[None, 2:])
    for name, values in blocks.result().items():
        assert values[0] == pytest.approx(s[name][0], rel=1e-12), name
    lw = np.stack([w[None], w[None]])  # (layers, B, H, L, L)
    assert layer_stats(lw, keys=keys)["max_weight"].tolist() == [[0.75], [0.75]]


def test_many_maps_in_blocks_and_a_subset_of_columns_follow_the_formulas(monkeypatch):
    # 2 layers x 3 heads of 40 x 40 causal maps, fed in blocks of a few query rows over all six maps at once
    from attnviz.core.analysis import stats as stats_module

    monkeypatch.setattr(stats_module, "STAT_BLOCK_CELLS", 6 * 40 * 7)  # 7 rows a block: blocks end mid-map
    rng = np.random.default_rng(3)
    lw = np.stack([_random_weights(rng, 3, 40, 40) for _ in range(2)])[:, None]  # (layers, B, H, L, L)
    keys = np.arange(1, 41)  # causal: row i may see i + 1 keys (row 0 has no choice and is left out)
    full = layer_stats(lw, 0, keys)
    some = layer_stats(lw, 0, keys, names=("sink", "previous", "diagonal"))
    assert set(some) == {"sink", "previous", "diagonal"}
    for layer in range(2):
        for h in range(3):
            rows = lw[layer, 0, h]
            ent = [-sum(x * np.log(x) for x in rows[i] if x > 0) for i in range(1, 40)]
            assert full["entropy"][layer, h] == pytest.approx(np.mean(ent), rel=1e-12)
            assert full["max_weight"][layer, h] == rows[1:].max()
            for got in (full, some):
                assert got["sink"][layer, h] == pytest.approx(rows[1:, 0].mean(), rel=1e-12)
                assert got["previous"][layer, h] == pytest.approx(np.mean([rows[i, i - 1] for i in range(1, 40)]))
                assert got["diagonal"][layer, h] == pytest.approx(np.mean([rows[i, i] for i in range(1, 40)]))
