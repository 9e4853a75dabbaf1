"""The toys' tasks: seeded batch generators and the answer each attention head should find.

Every generator takes a torch.Generator, so a seed fixes the data exactly (training and held-out
sets use different seeds). Shapes: B batch, L sequence length.
"""

from __future__ import annotations

import torch
from torch import Tensor

DIGITS = "0123456789"
LETTERS = "abcdefghijklmnop"  # the induction toy's 16 tokens

SEQ_LEN = 8  # reverse / sort: exactly this many digits
BLOCK = 10  # induction: length of the block that is repeated
MAX_LEN = 32  # induction: longest input (learned positions)
MAX_PREFIX = MAX_LEN - 2 * BLOCK  # the repeat starts at offsets 0..12


def digits_batch(gen: torch.Generator, batch: int, task: str) -> tuple[Tensor, Tensor]:
    """Random digit sequences (B, L) and their reversed or stably sorted targets (B, L)."""
    x = torch.randint(0, len(DIGITS), (batch, SEQ_LEN), generator=gen)
    y = x.flip(1) if task == "reverse" else x.sort(dim=1, stable=True).values
    return x, y


def source_positions(x: Tensor, task: str) -> Tensor:
    """(B, L): the input position that output j copies (reverse: L-1-j; sort: stable argsort)."""
    if task == "reverse":
        return torch.arange(x.shape[1] - 1, -1, -1).expand_as(x)
    return x.argsort(dim=1, stable=True)


def induction_batch(gen: torch.Generator, batch: int) -> tuple[Tensor, Tensor, Tensor]:
    """Sequences `prefix + block + block + filler` of length MAX_LEN over LETTERS.

    The block holds BLOCK distinct tokens; the prefix (random length 0..MAX_PREFIX) and filler use
    only tokens outside the block, so each token of the second copy has exactly one earlier
    occurrence and the next token is determined. Returns tokens (B, L), the prefix lengths (B,)
    and a bool (B, L) marking the positions whose next token is predictable by induction.
    """
    vocab = len(LETTERS)
    rows, offsets = [], torch.randint(0, MAX_PREFIX + 1, (batch,), generator=gen)
    for p in offsets.tolist():
        perm = torch.randperm(vocab, generator=gen)
        block, others = perm[:BLOCK], perm[BLOCK:]
        fill = others[torch.randint(0, len(others), (MAX_LEN - 2 * BLOCK,), generator=gen)]
        rows.append(torch.cat([fill[:p], block, block, fill[p:]]))
    x = torch.stack(rows)
    return x, offsets, predictable(offsets, MAX_LEN)


def predictable(offsets: Tensor, length: int) -> Tensor:
    """(B, L) True at second-copy positions p+BLOCK .. p+2*BLOCK-2 (their next token is known)."""
    pos = torch.arange(length).unsqueeze(0)
    start = offsets.unsqueeze(1) + BLOCK
    return (pos >= start) & (pos <= start + BLOCK - 2)


def induction_targets(offsets: Tensor, length: int) -> Tensor:
    """(B, L): for a predictable query i = p+BLOCK+k, the key p+k+1 after the token's first copy;
    -1 elsewhere."""
    pos = torch.arange(length).unsqueeze(0).expand(len(offsets), length)
    return torch.where(predictable(offsets, length), pos - BLOCK + 1, -1)
