"""Activation patching: which heads (or which residual positions) carry the answer from a clean text.

The config's text is the clean run; `corrupted_text` must make as many tokens. The metric is the logit
difference logit(answer) - logit(wrong) at the last position (answer and wrong: strings the tokenizer makes
one token each). A head's score is the share of the clean-minus-corrupted difference restored when its output
(its context before the output projection, every position) is copied from the clean run into the corrupted
one, (patched - corrupted) / (clean - corrupted), as TransformerLens' get_act_patch_attn_head_out_all_pos;
`patch_residual` does the same for the residual stream entering each layer, one position at a time.

Each batch row of a forward patches a different head (or layer and position): forward pre-hooks on the
output projections (on the blocks) copy the clean slice into that row alone, so a model of 270 heads takes one
batched forward per layer, as head_effects batches its ablations; the layers before a batch's own run once, on
one row (the corrupted run's), and the batch widens where its patches begin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from attnviz.core.analysis.circuit_parts import (
    CircuitParts,
    hidden_states,
    model_parts,
    one_token,
    seeing,
    with_hidden_states,
)
from attnviz.core.analysis.heads import LOGIT_BYTES, TOKENS_PER_BATCH
from attnviz.core.runs.config import ConfigError, RunConfig
from attnviz.core.runs.model_lock import model_lock
from attnviz.core.runs.result import Cancelled

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Pair:
    """A clean and a corrupted text of one model, and the logit difference that tells them apart."""

    model: object
    parts: CircuitParts
    clean: Tensor  # (1, L) ids
    corrupted: Tensor
    answer: int
    wrong: int

    def diffs(self, ids: Tensor) -> Tensor:
        """(B,) logit(answer) - logit(wrong) at the last position of each row's forward (under any hooks)."""
        hidden = self.model.hidden(ids)[:, -1:]  # (B, 1, d): a toy gives its logits here
        step = max(1, LOGIT_BYTES // (4 * self.parts.vocab_size))
        out = []
        for i in range(0, hidden.shape[0], step):
            logits = self.model.logits(hidden[i:i + step])[:, 0].double()
            out.append(logits[:, self.answer] - logits[:, self.wrong])
        return torch.cat(out)


def pair_of(config: RunConfig, corrupted_text: str, answer: str, wrong: str) -> Pair:
    model, parts = model_parts(config)
    clean = list(model.encode(config.text).ids)
    if not corrupted_text.strip():
        raise ConfigError("corrupted_text", corrupted_text, "the corrupted text is empty",
                          "type the text with the part that decides the answer changed")
    corrupted = list(model.encode(corrupted_text).ids)
    if len(corrupted) != len(clean):
        raise ConfigError("corrupted_text", corrupted_text, f"it makes {len(corrupted)} tokens where the clean text "
                          f"makes {len(clean)}", "change the clean text's words for words of the same token length "
                          "(e.g. one name for another)")
    a, w = (one_token(parts, text, name, model.label) for name, text in (("answer", answer), ("wrong", wrong)))
    if a == w:
        raise ConfigError("wrong", wrong, "it is the same token as the answer", "give the wrong answer's token")
    device = parts.embed.device
    return Pair(model, parts, torch.tensor([clean], device=device), torch.tensor([corrupted], device=device), a, w)


def _baselines(pair: Pair, modules) -> tuple[dict, float, float]:
    """(each module's input in the clean run, the clean and the corrupted logit differences)."""
    with model_lock(pair.model), torch.inference_mode():  # hooks on the shared model
        with seeing(modules) as seen:
            clean = float(pair.diffs(pair.clean)[0])
        corrupted = float(pair.diffs(pair.corrupted)[0])
    if abs(clean - corrupted) < 1e-6:
        raise ConfigError("corrupted_text", "", f"both texts give the same logit difference ({clean:.4g}): there is "
                          "nothing to restore", "corrupt the part of the text the answer depends on")
    return seen.inputs, clean, corrupted


def _patched(pair: Pair, chunks, cancel, progress, total: int) -> np.ndarray:
    """Run each chunk (its first layer, {module: [(row, index, clean value)]}) as one corrupted forward of as many
    rows as it patches; the rows' diffs. Up to its first layer every row is the corrupted run: that part runs
    once, on one row, and the block of that layer widens it to the chunk's rows (half the work of a full batch)."""
    out, done = [], 0
    for first, chunk in chunks:
        if cancel is not None and cancel():
            raise Cancelled
        rows = sum(len(v) for v in chunk.values())
        with model_lock(pair.model):  # the hooks are on the shared model: no other forward meanwhile
            widen = pair.parts.layers[first].block.register_forward_pre_hook(_widening(rows), with_kwargs=True)
            handles = [widen] + [m.register_forward_pre_hook(_copying(p), with_kwargs=True) for m, p in chunk.items()]
            try:
                with torch.inference_mode():
                    out.append(pair.diffs(pair.corrupted).cpu())
            finally:
                for h in handles:
                    h.remove()
        done += rows
        if progress is not None:
            progress(done, total)
    return torch.cat(out).numpy()


def _widening(rows: int):
    """A pre-hook repeating a one-row residual stream `rows` times (the masks and positions broadcast)."""
    def hook(module, args, kwargs):
        x = hidden_states(args, kwargs)
        return with_hidden_states(args, kwargs, x.expand(rows, *x.shape[1:]))
    return hook


def _copying(patches):
    """A pre-hook writing, per (row, index, value), value into the module input at [row, *index]."""
    def hook(module, args, kwargs):
        x = hidden_states(args, kwargs).clone()
        for row, index, value in patches:
            x[(row, *index)] = value
        return with_hidden_states(args, kwargs, x)
    return hook


def _chunks(items: list[tuple[int, int]], length: int) -> list[list[tuple[int, int]]]:
    """(layer, what) items in batches of one layer each, at most TOKENS_PER_BATCH tokens."""
    per = max(1, TOKENS_PER_BATCH // length)
    out: list[list[tuple[int, int]]] = []
    for item in items:
        if out and out[-1][0][0] == item[0] and len(out[-1]) < per:
            out[-1].append(item)
        else:
            out.append([item])
    return out


def patch_heads(config: RunConfig, corrupted_text: str, answer: str, wrong: str, *,
                cancel: Callable[[], bool] | None = None, progress: Progress | None = None) -> np.ndarray:
    """(layers, heads): each head's restored share of the logit difference (see the module docstring)."""
    pair = pair_of(config, corrupted_text, answer, wrong)
    layers = pair.parts.layers
    clean_in, clean, corrupted = _baselines(pair, [lp.out_proj for lp in layers])
    heads = layers[0].w_o.shape[0]
    dv = layers[0].w_o.shape[1]
    items = [(li, h) for li in range(len(layers)) for h in range(heads)]
    chunks = []
    for part in _chunks(items, pair.clean.shape[1]):
        chunk: dict = {}
        for row, (li, h) in enumerate(part):
            cut = slice(h * dv, (h + 1) * dv)
            value = clean_in[layers[li].out_proj][0, :, cut]
            chunk.setdefault(layers[li].out_proj, []).append((row, (slice(None), cut), value))
        chunks.append((part[0][0], chunk))
    diffs = _patched(pair, chunks, cancel, progress, len(items))
    return ((diffs - corrupted) / (clean - corrupted)).reshape(len(layers), heads)


def patch_residual(config: RunConfig, corrupted_text: str, answer: str, wrong: str, *,
                   cancel: Callable[[], bool] | None = None, progress: Progress | None = None) -> np.ndarray:
    """(layers, L): the restored share when the residual stream entering a layer at one position is clean."""
    pair = pair_of(config, corrupted_text, answer, wrong)
    layers = pair.parts.layers
    clean_in, clean, corrupted = _baselines(pair, [lp.block for lp in layers])
    length = pair.clean.shape[1]
    items = [(li, p) for li in range(len(layers)) for p in range(length)]
    chunks = []
    for part in _chunks(items, length):
        chunk: dict = {}
        for row, (li, p) in enumerate(part):
            block = layers[li].block
            chunk.setdefault(block, []).append((row, (p,), clean_in[block][0, p]))
        chunks.append((part[0][0], chunk))
    diffs = _patched(pair, chunks, cancel, progress, len(items))
    return ((diffs - corrupted) / (clean - corrupted)).reshape(len(layers), length)



def patching_csv(scores: np.ndarray) -> str:
    """One row per head: layer, head, the restored share of the logit difference."""
    lines = ["layer,head,restored"]
    lines += [f"{layer},{head},{float(scores[layer, head]):.6g}" for layer in range(scores.shape[0])
              for head in range(scores.shape[1])]
    return "\n".join(lines) + "\n"
