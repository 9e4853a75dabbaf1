"""The pooled path of long runs: maps reduced block by block inside the kernel, against the exact maps
(the seed variant's own, and transformers' eager output_attentions), with exact statistics and regions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnviz.core import ConfigError, RunConfig, run
from attnviz.core.analysis.stats import head_stats, row_keys
from attnviz.core.kernel import pooling as pooling_module
from attnviz.core.kernel.context import ForwardContext
from attnviz.core.runs.runner import MemoryBudgetError


def _max_pool(maps: np.ndarray, f: int) -> np.ndarray:
    """A reference max-pool written here: (..., L, L) -> (..., ceil(L / f), ceil(L / f))."""
    x = torch.tensor(maps)
    lead = x.shape[:-2]
    pooled = F.max_pool2d(x.reshape(-1, 1, *x.shape[-2:]), f, ceil_mode=True)
    return pooled.reshape(*lead, *pooled.shape[-2:]).numpy()


@pytest.fixture
def small_target(monkeypatch):
    monkeypatch.setattr(pooling_module, "TARGET", 256)  # 1,024 tokens pool by 4


@pytest.mark.parametrize("block_bytes", [None, 1 << 17], ids=["one-block", "blocks-trimmed-to-their-keys"])
@pytest.mark.parametrize("changes", [{}, {"position": "alibi"}, {"mask": "window", "window": 100},
                                     {"variant": "differential"}])
def test_the_seed_variant_pooled_equals_its_exact_maps(small_target, changes, block_bytes, monkeypatch):
    if block_bytes:  # 8 rows a block: a causal block computes its keys up to its last row, a window its band
        monkeypatch.setattr(pooling_module, "POOLED_BLOCK_BYTES", block_bytes)
    changes = dict(changes)
    config = RunConfig.for_variant(changes.pop("variant", "causal"), seq_q=1024, heads=4, d_model=64, **changes)
    exact = run(config, record={"dropped", "output"})
    pooled = run(config.replace(pool="always"), region=(100, 180, 30, 90))
    assert pooled.pool_factor == (4, 4) and pooled.dropped.shape == (1, 4, 256, 256)
    if config.variant == "differential":  # a signed map keeps the value of largest magnitude
        ref = torch.tensor(exact.dropped).reshape(-1, 1, 1024, 1024)
        hi, lo = F.max_pool2d(ref, 4), -F.max_pool2d(-ref, 4)
        expected = torch.where(hi.abs() >= lo.abs(), hi, lo).reshape(1, 4, 256, 256).numpy()
    else:
        expected = _max_pool(exact.dropped, 4)
    np.testing.assert_allclose(pooled.dropped, expected, atol=1e-6)
    np.testing.assert_allclose(pooled.output, exact.output, atol=1e-5)  # the layer's output is exact
    np.testing.assert_allclose(pooled.region, exact.dropped[:, :, 100:180, 30:90], atol=1e-6)
    if config.variant != "differential":
        stats = head_stats(exact.dropped[0], keys=row_keys(exact.mask[0], 1024))  # as the statistics panel
        for name, values in stats.items():
            np.testing.assert_allclose(pooled.exact_stats[name][0], values, rtol=1e-5, atol=1e-7, err_msg=name)
    assert any("max-pooled 1,024 → 256" in n for n in pooled.notes)


def test_auto_pools_a_run_over_the_budget_and_never_refuses_it():
    config = RunConfig(seq_q=4096, heads=4, d_model=64)
    budget = 300 << 20  # the whole maps need 4 x 4096² x 4 bytes = 256 MiB each (scores, weights, a temporary)
    pooled = run(config, memory_budget=budget)
    assert pooled.pool_factor == (4, 4) and pooled.dropped.shape == (1, 4, 1024, 1024)
    with pytest.raises(MemoryBudgetError, match="not enough memory"):
        run(config.replace(pool="never"), memory_budget=budget)
    assert run(RunConfig(seq_q=64)).pool_factor is None  # a short run keeps its whole maps


def test_a_region_outside_the_map_is_one_clear_error():
    with pytest.raises(ConfigError, match="the map has rows 0..16") as info:
        run(RunConfig(pool="always"), region=(0, 40, 0, 4))
    assert info.value.field == "region"


def test_a_pooled_npz_says_so_and_keeps_the_exact_statistics(tmp_path, small_target):
    from attnviz.cli import main

    out = tmp_path / "pooled.npz"
    assert main(["render", "--variant", "causal", "--seq-q", "1024", "--heads", "2", "--d-model", "32",
                 "--region", "0:16,0:32", "-o", str(out)]) == 0
    data = np.load(out)
    assert data["weights_pooled"].shape == (1, 2, 256, 256) and data["pool_factor"].tolist() == [4, 4]
    assert "weights" not in data.files and data["region"].shape == (1, 2, 16, 32)
    assert data["stats_entropy"].shape == (1, 2)
    assert json.loads(str(data["config"]))["pooled"]["factor"] == [4, 4]


def test_text_from_a_file_and_its_bad_inputs(tmp_path, capsys):
    from attnviz.cli import main

    good, bad = tmp_path / "t.txt", tmp_path / "latin1.txt"
    good.write_text("pophijackmehijackme", encoding="utf-8")
    bad.write_bytes("café".encode("latin-1"))
    out = tmp_path / "o.npz"
    assert main(["render", "--variant", "toy-induction", "--text-file", str(good), "-o", str(out)]) == 0
    assert "".join(np.load(out)["tokens"]) == "pophijackmehijackme"
    assert main(["render", "--variant", "toy-induction", "--text-file", str(bad), "-o", str(out)]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err


def test_the_softmax_and_its_entropy_equal_torchs_with_large_scores_and_masked_keys():
    # scores up to ~±200 (a sink head's): the entropy's terms are summed shifted by the row's peak, never
    # as a difference of two large numbers; masked (-inf) keys weigh 0
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(1, 6, 40, 300, generator=g) * torch.tensor([0.1, 1.0, 5.0, 20.0, 60.0, 200.0])[:, None, None]
    scores[..., 250:] = -torch.inf
    reference = torch.softmax(scores, -1)
    exact = -torch.special.xlogy(reference.double(), reference.double()).sum(-1)
    weights, stats = pooling_module.softmax_stats(scores.clone(), (250, 300), torch.float32)
    torch.testing.assert_close(weights, reference, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(stats.entropy(None).double().numpy(), exact.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats.entropy(reference.sum(-1)).double().numpy(), exact.numpy(), rtol=1e-5,
                               atol=1e-6)
    assert torch.equal(stats.row_max, weights.amax(-1))


def test_a_heads_row_with_no_key_under_safe_softmax_weighs_nothing_in_the_pooled_max_weight():
    # a per-head mask where one head's row has no key (the other head's has): its weights are 0, not NaN
    from attnviz.core.analysis.stats import head_stats
    from attnviz.core.kernel.kernel import attention

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, 16, generator=g) for _ in range(3))
    mask = torch.ones(1, 2, 64, 64, dtype=torch.bool).tril()
    mask[0, 1, 3] = False
    _, exact = attention(q, k, v, mask=mask, safe_softmax=True, record={"weights"})
    with torch.inference_mode():
        pool = pooling_module.Pooling(target=16)
        with ForwardContext(pooling=pool) as ctx:
            attention(q, k, v, mask=mask, safe_softmax=True, ctx=ctx)
    got = pool.calls[0].stat_arrays()["max_weight"][0]
    keys = mask[0].sum(-1).numpy()  # (H, Lq): head 1's row 3 is left out, head 0's counts
    np.testing.assert_allclose(got, head_stats(exact.weights[0].numpy(), keys=keys)["max_weight"], rtol=1e-6)
