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
BLOCKS = (4, 10)  # induction: the repeated block's length, drawn per sequence from this range
MAX_LEN = 32  # induction: longest input (learned positions)


def digits_batch(gen: torch.Generator, batch: int, task: str) -> tuple[Tensor, Tensor]:
    """Random digit sequences (B, L) and their reversed or stably sorted targets (B, L)."""
    x = torch.randint(0, len(DIGITS), (batch, SEQ_LEN), generator=gen)
    y = x.flip(1) if task == "reverse" else x.sort(dim=1, stable=True).values
    return x, y


def distinct_digits(gen: torch.Generator, batch: int) -> Tensor:
    """(B, L) digit sequences without repeats, so each output copies exactly one input."""
    return torch.stack([torch.randperm(len(DIGITS), generator=gen)[:SEQ_LEN] for _ in range(batch)])


def source_positions(x: Tensor, task: str) -> Tensor:
    """(B, L): the input position that output j copies (reverse: L-1-j; sort: stable argsort)."""
    if task == "reverse":
        return torch.arange(x.shape[1] - 1, -1, -1).expand_as(x)
    return x.argsort(dim=1, stable=True)


def induction_batch(gen: torch.Generator, batch: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Random sequences over LETTERS (length MAX_LEN) with a block of m tokens (m random in
    BLOCKS) written twice in a row after a prefix of random length 0..MAX_LEN-2m.

    Both the start and the period of the repeat vary, so no fixed position or offset predicts the
    second copy: the model has to find the current token's earlier occurrence and read the token
    after it (an induction head). All tokens are uniform, so a token may occur more than once and
    some predictions are ambiguous (see `unambiguous`). Measured here: making block and prefix
    tokens distinct instead lets the model solve it with diffuse attention over the whole first copy
    and no induction head. Returns tokens (B, L), prefix lengths p (B,), block lengths m (B,) and
    a bool (B, L) marking the second copy's positions but its last, whose next token the repeat fixes.
    """
    blocks = torch.randint(BLOCKS[0], BLOCKS[1] + 1, (batch,), generator=gen)
    offsets = (torch.rand(batch, generator=gen) * (MAX_LEN - 2 * blocks + 1)).long()  # 0..MAX_LEN-2m
    x = torch.randint(0, len(LETTERS), (batch, MAX_LEN), generator=gen)
    for row, p, m in zip(x, offsets.tolist(), blocks.tolist()):
        row[p + m : p + 2 * m] = row[p : p + m]
    return x, offsets, blocks, predictable(offsets, blocks, MAX_LEN)


def unambiguous(x: Tensor, positions: Tensor) -> Tensor:
    """(B, L) positions whose token occurs exactly once before them (the induction answer is unique)."""
    same = x.unsqueeze(2) == x.unsqueeze(1)  # (B, Lq, Lk): token i equals token j
    earlier = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril(-1)  # j < i
    return positions & ((same & earlier).sum(-1) == 1)


def predictable(offsets: Tensor, blocks: Tensor, length: int) -> Tensor:
    """(B, L) True at second-copy positions p+m .. p+2m-2 (their next token is known)."""
    pos = torch.arange(length).unsqueeze(0)
    start = (offsets + blocks).unsqueeze(1)
    return (pos >= start) & (pos <= start + blocks.unsqueeze(1) - 2)


def induction_targets(offsets: Tensor, blocks: Tensor, length: int) -> Tensor:
    """(B, L): for a predictable query i = p+m+k, the key p+k+1 = i-m+1, just after the first copy
    of the query's token; -1 elsewhere."""
    pos = torch.arange(length).unsqueeze(0).expand(len(offsets), length)
    return torch.where(predictable(offsets, blocks, length), pos - blocks.unsqueeze(1) + 1, -1)
