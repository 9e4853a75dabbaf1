"""attnviz.core.kernel.masks against torch's own causal masks and brute-force loops (True = may attend)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from attnviz.core import causal_mask, fully_masked_rows, matrix_mask, padding_mask, window_mask
from attnviz.core.kernel.masks import MASKS, build_kind, identify, is_causal

SHAPES = [(1, 1), (5, 5), (3, 8), (8, 3), (1, 6), (6, 1)]


def materialised(bias) -> torch.Tensor:
    """torch's CausalBias as the dense bool mask it stands for (True = may attend)."""
    return bias._materialize(torch.device("cpu"))


@pytest.mark.parametrize("length", [1, 2, 7])
def test_causal_top_left_square_is_the_seeds_triangle(length):
    mask = causal_mask(length)
    assert mask.dtype == torch.bool and mask.shape == (length, length)
    assert torch.equal(mask, ~torch.ones(length, length).triu(1).bool())  # seed 001: triu(1) is blocked
    assert torch.equal(mask, torch.tril(torch.ones((length, length), dtype=torch.bool)))  # seed 002
    assert torch.equal(causal_mask(length, length, "bottom-right"), mask)  # the alignments agree when square


@pytest.mark.parametrize("lq, lkv", SHAPES)
def test_causal_top_left_matches_sdpa_is_causal_and_causal_upper_left(lq, lkv):
    mask = causal_mask(lq, lkv)
    assert mask.shape == (lq, lkv)
    # SDPA's documented is_causal mask: torch.ones(L, S, dtype=torch.bool).tril(diagonal=0)
    assert torch.equal(mask, torch.ones(lq, lkv, dtype=torch.bool).tril(diagonal=0))
    assert torch.equal(mask, materialised(causal_upper_left(lq, lkv)))
    assert torch.equal(causal_mask(lq, lkv, align="top-left"), mask)


@pytest.mark.parametrize("lq, lkv", SHAPES)
def test_causal_bottom_right_matches_causal_lower_right(lq, lkv):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Lq > Lkv warning about NaN rows
        expected = materialised(causal_lower_right(lq, lkv))
    assert torch.equal(causal_mask(lq, lkv, "bottom-right"), expected)


def test_bottom_right_decoding_view():
    mask = causal_mask(2, 5, "bottom-right")
    assert mask.tolist() == [[True, True, True, True, False], [True] * 5]
    assert mask[-1].all()  # the newest query sees every cached key
    assert causal_mask(2, 5).tolist() == [[True] + [False] * 4, [True, True] + [False] * 3]


def test_unknown_alignment_is_refused():
    with pytest.raises(ValueError, match="alignment"):
        causal_mask(3, 3, "centre")
    with pytest.raises(ValueError, match="alignment"):
        window_mask(3, 3, 1, align="middle")


def brute_window(lq, lkv, window, causal, align):
    shift = lkv - lq if align == "bottom-right" else 0
    out = torch.zeros(lq, lkv, dtype=torch.bool)
    for i in range(lq):
        for j in range(lkv):
            distance = (i + shift) - j  # query position minus key position
            out[i, j] = 0 <= distance <= window if causal else abs(distance) <= window
    return out


@pytest.mark.parametrize("align", ["top-left", "bottom-right"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lq, lkv", [(6, 6), (4, 9), (9, 4), (1, 5)])
@pytest.mark.parametrize("window", [0, 1, 3, 20])
def test_window_masks_match_brute_force(lq, lkv, window, causal, align):
    got = window_mask(lq, lkv, window, causal=causal, align=align)
    assert got.dtype == torch.bool and got.shape == (lq, lkv)
    assert torch.equal(got, brute_window(lq, lkv, window, causal, align))


def test_window_edge_cases():
    assert torch.equal(window_mask(5, None, 0), torch.eye(5, dtype=torch.bool))  # only itself
    assert torch.equal(window_mask(5, None, 0, causal=False), torch.eye(5, dtype=torch.bool))
    assert torch.equal(window_mask(5, 7, 99), causal_mask(5, 7))  # a huge causal window is causal
    assert window_mask(5, 7, 99, causal=False).all()
    assert window_mask(6, None, 2).sum(-1).tolist() == [1, 2, 3, 3, 3, 3]
    with pytest.raises(ValueError, match="window"):
        window_mask(4, 4, -1)


@pytest.mark.parametrize("lengths, lkv", [([5, 2, 0], 5), ([3], 4), ((1, 4), 4), (torch.tensor([2, 6]), 6)])
def test_padding_mask_matches_loop(lengths, lkv):
    got = padding_mask(lengths, lkv)
    lengths = [int(n) for n in lengths]
    assert got.dtype == torch.bool and got.shape == (len(lengths), 1, 1, lkv)
    for b, n in enumerate(lengths):
        for j in range(lkv):
            assert bool(got[b, 0, 0, j]) == (j < n)


@pytest.mark.parametrize("lengths", [[6], [2, -1]])
def test_padding_mask_refuses_lengths_outside_the_sequence(lengths):
    with pytest.raises(ValueError, match=r"0\.\.5"):
        padding_mask(lengths, 5)


def test_matrix_mask_accepts_lists_numpy_and_tensors():
    rows = [[1, 0, 2], [0, 0, 0]]
    expected = torch.tensor([[True, False, True], [False, False, False]])
    assert torch.equal(matrix_mask(rows), expected)
    assert torch.equal(matrix_mask(np.array(rows, dtype=np.float32), 2, 3), expected)
    assert torch.equal(matrix_mask(torch.tensor(rows).bool(), lq=2, lkv=3), expected)
    assert matrix_mask(rows).dtype == torch.bool


@pytest.mark.parametrize("matrix, lq, lkv", [
    ([[1, 0, 1], [1, 1, 1]], 3, 3),  # wrong row count
    ([[1, 0, 1], [1, 1, 1]], 2, 4),  # wrong column count
    ([1, 0, 1], None, None),  # 1-D
    ([[[1, 1]]], None, None),  # 3-D
    (1, None, None),  # 0-D
])
def test_matrix_mask_shape_errors(matrix, lq, lkv):
    with pytest.raises(ValueError, match=r"\(Lq, Lkv\)") as info:
        matrix_mask(matrix, lq, lkv)
    assert str(tuple(torch.as_tensor(matrix).shape)) in str(info.value)


def test_fully_masked_rows():
    mask = torch.tensor([[True, False], [False, False], [False, True]])
    assert fully_masked_rows(mask).tolist() == [False, True, False]
    # bottom-right with Lq > Lkv: the first Lq - Lkv queries have no key
    assert fully_masked_rows(causal_mask(7, 4, "bottom-right")).tolist() == [True] * 3 + [False] * 4
    assert not fully_masked_rows(causal_mask(7, 4)).any()  # top-left: query 0 sees key 0
    # padding: a zero length empties every row of that batch item
    assert fully_masked_rows(padding_mask([3, 0], 3)).view(2).tolist() == [False, True]
    assert not fully_masked_rows(window_mask(6, 6, 0)).any()


@pytest.mark.parametrize("lq, lkv", [(7, 7), (5, 9)])
@pytest.mark.parametrize("kind", ["none", "causal", "causal-bottom-right", "window", "window-bidirectional"])
def test_identify_reads_back_the_kind_that_built_a_mask(kind, lq, lkv):
    window = 2 if "window" in kind else 0
    built = build_kind(kind, 1, lq, lkv, window=window)
    matrix = torch.ones(lq, lkv, dtype=torch.bool) if built is None else built[0, 0]
    found = identify(matrix)
    rebuilt = build_kind(found[0], 1, lq, lkv, window=found[1])
    assert torch.equal(matrix, torch.ones_like(matrix) if rebuilt is None else rebuilt[0, 0])
    assert MASKS[found[0]].causal == MASKS[kind].causal


def test_identify_reads_transformers_sliding_windows_in_attnviz_s_convention():
    masking = pytest.importorskip("transformers.masking_utils")
    n = 9
    q, kv = torch.arange(n).view(-1, 1), torch.arange(n).view(1, -1)
    causal = masking.sliding_window_causal_mask_function(4)(0, 0, q, kv)  # the query and 3 keys before it
    both = masking.sliding_window_bidirectional_mask_function(2)(0, 0, q, kv)
    assert identify(causal) == ("window", 3) and is_causal(causal)
    assert identify(both) == ("window-bidirectional", 2) and not is_causal(both)  # not a causal window
    assert identify(masking.causal_mask_function(0, 0, q, kv)) == ("causal", 0)
