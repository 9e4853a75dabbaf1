"""What a model's output head says of one forward: the top-k next tokens per position, the probability of
the target, the logit lens (each layer's residual stream read by the final norm and the unembedding), and
with an ablation the unablated predictions and the KL divergence between the two.

A model-backed variant's model (core/backed.py) may offer, besides the forward:

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

import threading
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

LENS_ROWS = 256  # residual rows unembedded at a time: (rows, vocab) float32 logits stay ~50 MB
LOGIT_ROWS = 256  # positions whose logits the predictions make at a time (the same bound)


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


def lens_of(model, residuals: list[Tensor], label) -> Lens:
    """The top-1 token and its probability of every layer's residual stream through the model's lens. Every
    layer's rows go through the unembedding together, LENS_ROWS at a time: its (vocab, d) weight, the largest
    tensor of a small model, is read once per block of rows rather than once per layer."""
    layers, length = len(residuals), residuals[0].shape[1]
    rows = torch.cat([r[0] for r in residuals])  # (layers * L, d)
    best_p, best_i = [], []
    for start in range(0, rows.shape[0], LENS_ROWS):
        p = torch.softmax(model.lens_logits(rows[None, start:start + LENS_ROWS])[0].float(), -1)
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

    def __init__(self, model, ids: Tensor, hidden: Tensor, residuals, k: int, ablated: bool):
        self.model, self.ids, self.hidden, self.residuals, self.k, self.ablated = \
            model, ids, hidden, residuals, k, ablated
        self._lock = threading.RLock()  # a part may read another
        self._done: dict[str, object] = {}

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
            return self._once("lens", lambda: lens_of(self.model, self.residuals, self.model.label))


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
    """One row per position: its token, the target and its probability, then the top k and their
    probabilities; with an ablation also the unablated target probability and the KL divergence."""
    p, before, kl = result.predictions, result.unablated, result.kl
    k = p.top_ids.shape[1]
    tops = [f"top{i + 1}{suffix}" for i in range(k) for suffix in ("", "_prob")]
    header = ["position", "token", "target", "target_prob", *tops]
    if before is not None:
        header += ["unablated_target_prob", "unablated_top1", "kl_nats"]
    tokens = result.tokens or tuple(str(i) for i in range(len(p.target_ids)))
    lines = [",".join(header)]
    for i, target in enumerate(p.target_ids):
        row = [str(i), _cell(tokens[i] if i < len(tokens) else ""), _cell(result.outputs.model.label(int(target)))
               if target >= 0 else "", f"{p.target_probs[i]:.6g}" if target >= 0 else ""]
        row += [v for j in range(k) for v in (_cell(p.top_tokens[i][j]), f"{p.top_probs[i, j]:.6g}")]
        if before is not None:
            row += [f"{before.target_probs[i]:.6g}" if target >= 0 else "", _cell(before.top_tokens[i][0]),
                    f"{kl[i]:.6g}"]
        lines.append(",".join(row))
    return "\n".join(lines) + "\n"
