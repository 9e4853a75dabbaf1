"""What a model's output head says of one forward: the top-k next tokens per position, the probability of
the target, the logit lens (each layer's residual stream read by the final norm and the unembedding), and
with an ablation the unablated predictions and the KL divergence between the two.

A model-backed variant's model (core/runs/backed.py) may offer, besides the forward:

    logits(hidden (B, L, d)) -> (B, L, V) logits of its output head, or None (no head)
    targets(ids) -> one target id per position, -1 where none (a causal LM: the next token; a toy: its task's)
    label(id) -> the token's label
    lens_logits(residual (B, L, d)) -> (B, L, V): the final norm and the unembedding; absent where the
        family has no lens (the residual stream after each layer is `model.residuals` after a forward)
    hidden(ids (B, L)) -> the last hidden state of a forward that records nothing (under an ablation plan)

`Outputs` computes each part the first time it is read (on the app's worker: never on the GUI thread)
and keeps it.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

LENS_ROWS = 256  # residual rows unembedded at a time: (rows, vocab) float32 logits stay ~50 MB
LOGIT_ROWS = 256  # positions whose logits the predictions make at a time (the same bound)
SPILL_BYTES = 64 << 20  # residual stream held in memory at most; the layers past it go to a temporary file


class Residuals:
    """The residual stream after each layer ((B, L, d) each, in layer order), as the lens reads it.

    The first SPILL_BYTES stay in memory; every later layer is written to an unlinked temporary file as it
    arrives and its tensor let go. A 30-layer forward of 8,192 tokens makes 566 MB of residuals that only the
    lens reads (once, when a view first asks for it): in the file they sit in the page cache, which the system
    may reclaim, instead of the process's memory beside the maps. The numbers read back are the ones written."""

    def __init__(self, spill_bytes: int | None = None):
        self.spill_bytes = SPILL_BYTES if spill_bytes is None else spill_bytes
        self._layers: list[Tensor | tuple[int, tuple[int, ...], torch.dtype]] = []  # a tensor, or where in the file
        self._file = None
        self._end = 0
        self.held_bytes = 0  # bytes of the layers kept in memory

    def append(self, t: Tensor) -> None:
        t = t.detach()
        nbytes = t.numel() * t.element_size()
        if t.device.type != "cpu" or self.held_bytes + nbytes <= self.spill_bytes:
            self._layers.append(t)
            self.held_bytes += nbytes
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="attnviz-residuals-")  # noqa: SIM115 (closed with the store)
        data = memoryview(_bytes_of(t.contiguous()))
        written = 0
        while written < nbytes:  # pwrite may write less than asked
            written += os.pwrite(self._file.fileno(), data[written:], self._end + written)
        self._layers.append((self._end, tuple(t.shape), t.dtype))
        self._end += nbytes

    def __len__(self) -> int:
        return len(self._layers)

    def __getitem__(self, layer: int) -> Tensor:
        return self.rows(layer, 0, self.shape(layer)[1], whole=True)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def shape(self, layer: int) -> tuple[int, ...]:
        held = self._layers[layer]
        return tuple(held.shape) if isinstance(held, Tensor) else held[1]

    def rows(self, layer: int, r0: int, r1: int, whole: bool = False) -> Tensor:
        """Positions r0..r1 of batch item 0 (r1 - r0, d); whole: every batch item (B, r1 - r0, d), r0 = 0."""
        held = self._layers[layer]
        if isinstance(held, Tensor):
            return held if whole else held[0, r0:r1]
        offset, shape, dtype = held
        row = shape[-1] * torch.empty((), dtype=dtype).element_size()
        out = torch.empty((shape[0] if whole else 1, r1 - r0, shape[-1]), dtype=dtype)
        view = memoryview(_bytes_of(out))
        done = 0
        while done < len(view):
            done += os.preadv(self._file.fileno(), [view[done:]], offset + r0 * row + done)
        return out if whole else out[0]


def _bytes_of(t: Tensor):
    """A contiguous CPU tensor's memory as a flat NumPy uint8 array (any dtype: bfloat16 has no NumPy type)."""
    return t.reshape(-1).view(torch.uint8).numpy()


def _residual_rows(residuals, layer: int, r0: int, r1: int) -> Tensor:
    """(r1 - r0, d): positions r0..r1 of batch item 0 of a layer's residual stream (a Residuals or a list)."""
    if isinstance(residuals, Residuals):
        return residuals.rows(layer, r0, r1)
    return residuals[layer][0, r0:r1]


def _residual_length(residuals) -> int:
    return residuals.shape(0)[1] if isinstance(residuals, Residuals) else residuals[0].shape[1]


@dataclass(frozen=True)
class Predictions:
    """Per position (L of them): the top-k tokens and the target's probability."""

    top_ids: np.ndarray  # (L, k) int64, most likely first
    top_probs: np.ndarray  # (L, k) float32
    top_tokens: tuple[tuple[str, ...], ...]  # L rows of k labels
    target_ids: np.ndarray  # (L,) int64, -1 where a position has no target
    target_probs: np.ndarray  # (L,) float32, NaN where a position has no target


@dataclass(frozen=True)
class Lens:
    """The logit lens: row l is the top-1 token of the residual stream after layer l (layers, L)."""

    ids: np.ndarray  # (layers, L) int64
    probs: np.ndarray  # (layers, L) float32
    tokens: tuple[tuple[str, ...], ...]  # layers rows of L labels


def predictions_of(logits: Tensor, targets, k: int, label) -> Predictions:
    """logits (L, V) -> Predictions (softmax in float32; k at most the vocabulary)."""
    probs = torch.softmax(logits.float(), dim=-1)
    top = probs.topk(min(k, probs.shape[-1]), dim=-1)
    target_ids = np.asarray(targets, dtype=np.int64)
    has = target_ids >= 0
    chosen = probs.gather(-1, torch.as_tensor(np.where(has, target_ids, 0), device=probs.device)[:, None])[:, 0]
    ids = top.indices.cpu().numpy().astype(np.int64)
    return Predictions(
        top_ids=ids, top_probs=top.values.cpu().numpy().astype(np.float32),
        top_tokens=tuple(tuple(label(int(i)) for i in row) for row in ids), target_ids=target_ids,
        target_probs=np.where(has, chosen.cpu().numpy(), np.nan).astype(np.float32))


def kl_divergence(before: Tensor, after: Tensor) -> np.ndarray:
    """Per position KL(before ‖ after) in nats of two (L, V) logits (float64: small differences)."""
    p, q = torch.log_softmax(before.double(), -1), torch.log_softmax(after.double(), -1)
    return (p.exp() * (p - q)).sum(-1).clamp_min(0).cpu().numpy()


def target_log_probs(logits: Tensor, targets: Tensor) -> Tensor:
    """(..., V) logits and (...) target ids -> (...) log-probabilities of the targets."""
    return torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None])[..., 0]


def lens_of(model, residuals, label, length: int | None = None) -> Lens:
    """The top-1 token and its probability of every layer's residual stream through the model's lens (its first
    `length` positions; None: all). Every layer's rows go through the unembedding together, LENS_ROWS at a time:
    its (vocab, d) weight, the largest tensor of a small model, is read once per block of rows rather than once
    per layer. A block is made from the layers' own rows (one after another, as if every layer's rows were
    joined), never a copy of them all."""
    layers = len(residuals)
    length = _residual_length(residuals) if length is None else length
    total = layers * length
    best_p, best_i = [], []
    for start in range(0, total, LENS_ROWS):
        stop, parts = min(total, start + LENS_ROWS), []
        at = start
        while at < stop:
            layer, r0 = divmod(at, length)
            r1 = min(length, r0 + stop - at)
            parts.append(_residual_rows(residuals, layer, r0, r1))
            at += r1 - r0
        rows = parts[0] if len(parts) == 1 else torch.cat(parts)
        p = torch.softmax(model.lens_logits(rows[None])[0].float(), -1)
        value, index = p.max(-1)
        best_p.append(value), best_i.append(index)
    ids = torch.cat(best_i).reshape(layers, length).cpu().numpy().astype(np.int64)
    probs = torch.cat(best_p).reshape(layers, length).cpu().numpy().astype(np.float32)
    return Lens(ids=ids, probs=probs, tokens=tuple(tuple(label(int(i)) for i in row) for row in ids))


class Outputs:
    """The output head's view of one forward, each part computed when first read and kept.

    model: the protocol above; ids (1, L); hidden (1, L, d) the forward's last hidden state; residuals its
    per-layer residual stream (or None); ablated: whether that forward ran under an ablation, so the unablated
    predictions need one more forward. The logits are made LOGIT_ROWS positions at a time and never kept
    whole: at 4,096 positions of a 49,152-token vocabulary they would be 0.8 GB (and as much again for the
    softmax)."""

    def __init__(self, model, ids: Tensor, hidden: Tensor, residuals, k: int, ablated: bool,
                 length: int | None = None):
        self.model, self.ids, self.hidden, self.residuals, self.k, self.ablated = \
            model, ids, hidden, residuals, k, ablated
        self.length = length  # the residual stream's positions the lens reads (None: all of them)
        self._lock = threading.RLock()  # a part may read another
        self._done: dict[str, object] = {}

    def prefix(self, length: int) -> Outputs:
        """The output head's view of the first `length` positions alone (a generation as it stood at a step): a
        causal model's position reads no later one, so each position's predictions and lens are the whole run's,
        and the last one has no target yet. Computed afresh when read; the residual stream is shared."""
        return Outputs(self.model, self.ids[:, :length], self.hidden[:, :length], self.residuals, self.k,
                       self.ablated, length)

    def _once(self, name: str, compute):
        with self._lock:
            if name not in self._done:
                self._done[name] = compute()
            return self._done[name]

    @property
    def available(self) -> bool:
        """Whether the model has an output head (asked of one position)."""
        return getattr(self.model, "logits", None) is not None and \
            self._once("available", lambda: self._logits(self.hidden, 0, 1) is not None)

    def _logits(self, hidden: Tensor, r0: int, r1: int) -> Tensor | None:
        with torch.inference_mode():
            out = self.model.logits(hidden[:, r0:r1])
        return None if out is None else out[0]

    def _targets(self) -> list[int]:
        return list(self.model.targets([int(i) for i in self.ids[0].tolist()]))

    def _parts(self) -> dict | None:
        """{"predictions"} (and with an ablation "unablated" and "kl") in one pass over the positions."""
        def compute():
            if not self.available:
                return None
            targets, length = self._targets(), self.hidden.shape[1]
            before = self._unablated_hidden() if self.ablated else None
            parts: dict[str, list] = {"predictions": [], "unablated": [], "kl": []}
            for r0 in range(0, length, LOGIT_ROWS):
                r1 = min(length, r0 + LOGIT_ROWS)
                after = self._logits(self.hidden, r0, r1)
                parts["predictions"].append(predictions_of(after, targets[r0:r1], self.k, self.model.label))
                if before is not None:
                    earlier = self._logits(before, r0, r1)
                    parts["unablated"].append(predictions_of(earlier, targets[r0:r1], self.k, self.model.label))
                    parts["kl"].append(kl_divergence(earlier, after))
            return {"predictions": joined(parts["predictions"]),
                    "unablated": joined(parts["unablated"]) if before is not None else None,
                    "kl": np.concatenate(parts["kl"]) if before is not None else None}
        return self._once("parts", compute)

    def _unablated_hidden(self) -> Tensor:
        with torch.inference_mode():
            return self.model.hidden(self.ids)

    def predictions(self) -> Predictions | None:
        parts = self._parts()
        return None if parts is None else parts["predictions"]

    def unablated(self) -> Predictions | None:
        """The predictions without the ablation (None when the forward ablated nothing)."""
        parts = self._parts()
        return None if parts is None else parts["unablated"]

    def kl(self) -> np.ndarray | None:
        """Per position KL(unablated ‖ ablated) in nats (None without an ablation)."""
        parts = self._parts()
        return None if parts is None else parts["kl"]

    def lens(self) -> Lens | None:
        if self.residuals is None or getattr(self.model, "lens_logits", None) is None:
            return None
        with torch.inference_mode():
            return self._once("lens", lambda: lens_of(self.model, self.residuals, self.model.label, self.length))


def joined(parts: list[Predictions]) -> Predictions:
    """Predictions of consecutive runs of positions as one."""
    return Predictions(top_ids=np.concatenate([p.top_ids for p in parts]),
                       top_probs=np.concatenate([p.top_probs for p in parts]),
                       top_tokens=tuple(row for p in parts for row in p.top_tokens),
                       target_ids=np.concatenate([p.target_ids for p in parts]),
                       target_probs=np.concatenate([p.target_probs for p in parts]))


def _cell(text: str) -> str:
    """A token label as one CSV cell: quoted, inner quotes doubled (tokens hold commas and quotes)."""
    return '"' + text.replace('"', '""') + '"'


def predictions_csv(result) -> str:
    """One row per position: its token (a generation: whether the model wrote it, true / false), the target and its
    probability, then the top k and their probabilities; with an ablation also the unablated target probability
    and the KL divergence."""
    p, before, kl = result.predictions, result.unablated, result.kl
    k = p.top_ids.shape[1]
    tops = [f"top{i + 1}{suffix}" for i in range(k) for suffix in ("", "_prob")]
    generated = result.generated_mask() if result.generated_count else None  # a generation: which tokens it wrote
    header = ["position", "token", *(["generated"] if generated is not None else []), "target", "target_prob", *tops]
    if before is not None:
        header += ["unablated_target_prob", "unablated_top1", "kl_nats"]
    tokens = result.tokens or tuple(str(i) for i in range(len(p.target_ids)))
    lines = [",".join(header)]
    for i, target in enumerate(p.target_ids):
        row = [str(i), _cell(tokens[i] if i < len(tokens) else "")]
        row += [] if generated is None else [str(bool(generated[i])).lower()]
        row += [_cell(result.outputs.model.label(int(target))) if target >= 0 else "",
                f"{p.target_probs[i]:.6g}" if target >= 0 else ""]
        row += [v for j in range(k) for v in (_cell(p.top_tokens[i][j]), f"{p.top_probs[i, j]:.6g}")]
        if before is not None:
            row += [f"{before.target_probs[i]:.6g}" if target >= 0 else "", _cell(before.top_tokens[i][0]),
                    f"{kl[i]:.6g}"]
        lines.append(",".join(row))
    return "\n".join(lines) + "\n"
