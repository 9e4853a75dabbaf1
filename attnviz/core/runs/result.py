"""What a run returns: RunResult (the kept stages as NumPy, the mask, labels, the model's predictions), and
the two ways a run ends without one (Cancelled, NonFiniteResult)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnviz.core.kernel.progress import Cancelled
from attnviz.core.runs.config import RunConfig

__all__ = ["Cancelled", "NonFiniteResult", "RunResult"]  # Cancelled is defined with the kernel's checkpoints


class NonFiniteResult(RuntimeError):
    """A run whose maps came out NaN or infinite where no mask explains it: nothing of it is drawn or written."""


@dataclass
class RunResult:
    """The stages a run kept (see stages.py), as float32 NumPy on the CPU, plus the mask and flags.

    Stage arrays read as attributes: result.weights, result.scores, result.q ... (shapes in STAGES).
    """

    config: RunConfig
    stages: dict[str, np.ndarray]  # stage name -> array, in pipeline order
    mask: np.ndarray  # bool, True = may attend, broadcastable to (B, H, Lq, Lkv)
    fully_masked_rows: np.ndarray  # (B, H, Lq) bool: no key to attend to (NaN unless safe softmax)
    device: str  # the device actually used, e.g. "cpu" or "cuda:0"
    compute_time_s: float  # the forward pass alone
    total_time_s: float  # build, inputs, transfer and forward
    notes: tuple[str, ...] = field(default=())
    # Token-labelled runs (toys, pretrained models); empty for random inputs (positions instead)
    tokens: tuple[str, ...] = ()  # query token labels, Lq of them
    key_tokens: tuple[str, ...] = ()  # key token labels where keys differ from queries (cross-attention)
    token_ids: np.ndarray | None = None  # (Lq,) int ids of the queries' tokens
    key_token_ids: np.ndarray | None = None  # (Lkv,) the keys' ids where they are not the queries' (cross)
    layer_weights: np.ndarray | None = None  # (layers, B, H, Lq, Lkv) every layer's weights (multi-layer models)
    source: Any = None  # model-backed runs: the backed.ModelForward this is one layer of (source.result(n))
    files: tuple = ()  # userfiles.FileRecord of your own weights / inputs files that produced this run
    outputs: Any = None  # model-backed runs: predictions.Outputs of the model's output head (read lazily)
    prompt_length: int | None = None  # a generation (config.generate): tokens[:prompt_length] are the prompt
    # A pooled run (pooling.py): its maps are max-pooled by (fq, fk), cell (i, j) covering positions i*fq..,
    # j*fk..; the per-head statistics of the exact maps (stat -> (B, H)); the exact region asked for
    pool_factor: tuple[int, int] | None = None
    exact_stats: dict[str, np.ndarray] | None = None
    region: np.ndarray | None = None
    score_recipe: Any = None  # a model's layer: how its scores were made (mods.ScoreRecipe), for hover
    opened: str = ""  # maps read from a file (saved.py): its path; nothing can be computed again for it
    model_name: str = ""  # maps read from a file: the model's name as titles gave it (no source to ask)

    # --- the output head (models with one; None elsewhere). Computed on first read: read on the worker.

    @property
    def predictions(self):
        """predictions.Predictions of this forward, or None (no output head)."""
        return None if self.outputs is None else self.outputs.predictions()

    @property
    def top_ids(self) -> np.ndarray | None:
        """(L, k) int: the k most likely tokens per position (k = config.top_k)."""
        return _part(self.predictions, "top_ids")

    @property
    def top_probs(self) -> np.ndarray | None:
        """(L, k) float32: their probabilities."""
        return _part(self.predictions, "top_probs")

    @property
    def top_tokens(self) -> tuple[tuple[str, ...], ...] | None:
        """L rows of k token labels."""
        return _part(self.predictions, "top_tokens")

    @property
    def target_ids(self) -> np.ndarray | None:
        """(L,) int: the token that comes next (a toy: its task's answer), -1 where none."""
        return _part(self.predictions, "target_ids")

    @property
    def target_probs(self) -> np.ndarray | None:
        """(L,) float32: the probability given to the target, NaN where there is none."""
        return _part(self.predictions, "target_probs")

    @property
    def unablated(self):
        """The Predictions of the same input without the ablation (None when nothing is ablated)."""
        return None if self.outputs is None else self.outputs.unablated()

    @property
    def kl(self) -> np.ndarray | None:
        """(L,) KL(unablated ‖ ablated) in nats per position (None when nothing is ablated)."""
        return None if self.outputs is None else self.outputs.kl()

    @property
    def lens(self):
        """predictions.Lens (logit lens) of a causal LM, else None."""
        return None if self.outputs is None else self.outputs.lens()

    @property
    def lens_ids(self) -> np.ndarray | None:
        """(layers, L) int: the top-1 token of the residual stream after each layer."""
        return _part(self.lens, "ids")

    @property
    def lens_probs(self) -> np.ndarray | None:
        """(layers, L) float32: its probability."""
        return _part(self.lens, "probs")

    def file_dicts(self) -> dict[str, dict[str, Any]]:
        """{weights/inputs: {name, path, sha256, bytes}} of the files this run read (for exports)."""
        return {r.field: r.to_dict() for r in self.files}

    def __getattr__(self, name: str) -> np.ndarray:
        if name.startswith("__") or name == "stages":  # not yet set (copy, pickle)
            raise AttributeError(name)
        try:
            return self.stages[name]
        except KeyError:
            raise AttributeError(f"RunResult has no stage {name!r}; kept: {', '.join(self.stages)}") from None

    def axis_tokens(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(query labels, key labels) of a token-labelled run whose labels fit its maps, else None."""
        keys = self.key_tokens or self.tokens
        if not self.tokens or len(self.tokens) != self.config.seq_q or len(keys) != self.config.lkv:
            return None
        return self.tokens, keys

    @property
    def generated_count(self) -> int:
        """How many of the tokens the model generated (0: not a generation, or one cut back to its prompt)."""
        return 0 if self.prompt_length is None else max(len(self.tokens) - self.prompt_length, 0)

    def generated_mask(self) -> np.ndarray:
        """(Lq,) bool: which query tokens the model generated (all False for any other run)."""
        marks = np.zeros(self.config.seq_q, dtype=bool)
        if self.generated_count:
            marks[self.prompt_length:] = True
        return marks

    def token_count_text(self, step: int | None = None) -> str:
        """How many tokens, as the window's status line and an export's title say it: '16 tokens', or for a
        generation '12 prompt + 4 generated tokens'; at a step (the window's Step slider, `render --step`) also
        how far it had got: '12 prompt + 2 of 4 generated tokens · step 2'."""
        n = self.generated_count
        if not n:
            return f"{self.config.seq_q} tokens"
        tokens = f"generated token{'s' if n != 1 else ''}"
        if step is None:
            return f"{self.prompt_length} prompt + {n} {tokens}"
        return f"{self.prompt_length} prompt + {step} of {n} {tokens} \u00b7 step {step}"

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array: the kept stages in pipeline order, then the mask and the row flags."""
        return {**self.stages, "mask": self.mask, "fully_masked_rows": self.fully_masked_rows}


def _part(holder, name: str):
    return None if holder is None else getattr(holder, name)


