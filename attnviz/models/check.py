"""Check a model run against transformers: one forward of transformers' own model (its eager attention, float32,
the same token ids) beside attnviz's maps and logits, as max |difference| per layer and head.

`check_against_transformers(config or result)` has transformers load the run's model folder or GGUF file with
its own loader (`attn_implementation="eager"`, `local_files_only=True`, no remote code; a GGUF dequantised to
float32 by transformers itself) and run it once with `output_attentions=True`, in a child process of its own
(reference.py), then compares. Before anything is loaded it estimates what transformers' float32 copy needs
(`transformers_bytes`) and refuses with one line (NotChecked) where that would not fit the memory allowance.
Qt-free: the app's Run > Check against transformers runs it on a thread of its own (ui/window/check_job.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from attnviz.core.kernel.progress import Cancelled
from attnviz.core.runs.backed import run_forward
from attnviz.core.runs.config import RunConfig
from attnviz.core.runs.device import format_bytes
from attnviz.core.runs.memory import memory_allowance
from attnviz.core.runs.predictions import LOGIT_ROWS
from attnviz.models import reference
from attnviz.models.reference import NotChecked

__all__ = ["CheckReport", "NotChecked", "check_against_transformers", "map_differences", "transformers_bytes"]

Progress = Callable[[str, int, int], None]  # (step, done, total): "loading", "layers", "comparing"
# transformers' process itself (Python, torch and transformers imported: 0.37 GiB measured), its modules and one
# layer's activations, generously
LOAD_OVERHEAD = 768 << 20


@dataclass(frozen=True)
class CheckReport:
    """max |attnviz - transformers| of one run's attention weights, per layer and head, and of its logits."""

    per_head: np.ndarray  # (layers, heads)
    logits: float | None  # None: the model has no output head
    key: RunConfig  # the forward checked (layer 0, nothing ablated): which shown runs the report is about
    tokens: int
    seconds: float

    @property
    def per_layer(self) -> np.ndarray:
        return self.per_head.max(axis=1)

    @property
    def maximum(self) -> float:
        return float(self.per_head.max())

    def line(self) -> str:
        """The status line: "checked against transformers: max |diff| 3.2e-7 over 30 layers × 9 heads, logits
        1.1e-5"."""
        layers, heads = self.per_head.shape
        logits = "no logits (no output head)" if self.logits is None else f"logits {self.logits:.2g}"
        return (f"checked against transformers: max |diff| {self.maximum:.2g} over {layers} layers × {heads} heads, "
                f"{logits} ({self.tokens} tokens, {self.seconds:.1f} s)")


def check_against_transformers(source, *, memory_budget: int | None = None, cancel: Callable[[], bool] | None = None,
                               progress: Progress | None = None, isolated: bool = True) -> CheckReport:
    """Compare a model run's maps and logits with transformers' eager forward on the same token ids.

    `source`: a RunConfig of a model-backed variant (attnviz runs its forward first), or a RunResult of one
    (its forward's maps are used as they are, unless pooled or ablated: then the forward runs again whole and
    unablated, since transformers computes neither). transformers runs in a child process (`isolated`, the
    default) or in this one. NotChecked (one line) where the run is not a model's, where transformers' copy
    would not fit the memory allowance, or where transformers' model cannot load; Cancelled where `cancel`
    says so (polled between steps and while transformers runs)."""
    started = time.perf_counter()
    cancel = cancel or (lambda: False)
    say = progress or (lambda step, done, total: None)
    forward = _forward_of(source, memory_budget, cancel)
    model = forward.key.spec.load(forward.key, memory_budget)  # cached: the run's own model
    folder = getattr(getattr(model, "model", model), "folder", None)
    if folder is None or getattr(model, "module", None) is None:
        raise NotChecked("not checked: Check against transformers needs a transformers folder or a GGUF model")
    ids = forward.token_ids.tolist()
    need = transformers_bytes(folder, forward.info, len(ids))
    allowed, source = memory_allowance(memory_budget)
    if need > allowed:
        raise NotChecked(f"transformers' float32 copy would need {format_bytes(need)}; {format_bytes(allowed)} "
                         f"free for it ({source}): not checked")
    _stop_if(cancel)
    say("loading", 0, 1)
    theirs = reference.reference_outputs(
        folder.path, folder.gguf.name if folder.gguf else None,
        type(model.module), ids, isolated=isolated, cancel=cancel, layer_done=lambda n, total: say("layers", n, total))
    _stop_if(cancel)
    say("comparing", 0, 1)
    per_head = map_differences(forward.layer_weights[:, 0], theirs.attentions)
    logits = _logit_difference(forward, model, ids, theirs.logits)
    return CheckReport(per_head, logits, forward.key, len(ids), time.perf_counter() - started)


def _forward_of(source, memory_budget: int | None, cancel: Callable[[], bool]):
    """The ModelForward to compare: a result's own where its maps are whole and unablated, else run whole."""
    from attnviz.core.runs.backed import ModelForward

    forward = getattr(source, "source", None)
    config = source if isinstance(source, RunConfig) else getattr(source, "config", None)
    if isinstance(forward, ModelForward):
        config = forward.key
    if config is None or not config.spec.backed:
        raise NotChecked("not checked: Check against transformers needs a pretrained model's run")
    usable = (isinstance(forward, ModelForward) and not forward.pooled and not forward.key.ablate
              and forward.layer_weights.shape[-1] == len(forward.token_ids))
    if not usable:
        forward = run_forward(config.replace(layer=0, ablate=(), pool="never"), memory_budget=memory_budget,
                              cancel=cancel)
    if forward.stacks or forward.picture is not None:
        raise NotChecked("not checked: Check against transformers compares models of one stack reading a text "
                         "(not an encoder-decoder or a picture)")
    return forward


def transformers_bytes(folder, info, length: int) -> int:
    """Bytes transformers' float32 copy of the model needs for one forward of `length` tokens: its parameters as
    float32, every layer's attention maps (kept by output_attentions, one more in the making), the logits, and the
    process it runs in. A GGUF file's parameters count twice, and the file once: transformers' loader holds every
    tensor dequantised in NumPy while it builds the model, reading the file's pages (measured: Gemma 3 270M,
    1.07 GB of float32 from a 253 MB file: transformers' process peaked at 2.5-3.1 GiB; this counts 3.1 GiB for
    122 tokens)."""
    from attnviz.models.folder import parameter_bytes

    params = parameter_bytes(folder) * (2 if folder.gguf else 1) + (folder.gguf.stat().st_size if folder.gguf else 0)
    maps = (info.layers + 1) * info.heads * length * length * 4
    logits = length * info.vocab_size * 4
    tokens = info.layers * length * info.d_model * 4 * 8
    return params + maps + logits + tokens + LOAD_OVERHEAD


def map_differences(ours: np.ndarray, theirs: list[np.ndarray]) -> np.ndarray:
    """(layers, heads) max |ours - theirs| of every layer's (heads, L, L) weights: `ours` (layers, H, L, L),
    `theirs` transformers' attentions, one (H, L, L) array per layer. NaN where either holds NaN."""
    if len(theirs) != len(ours):
        raise NotChecked(f"not checked: transformers returned {len(theirs)} attention maps for {len(ours)} layers")
    out = np.empty(ours.shape[:2], dtype=np.float64)
    for layer, (a, b) in enumerate(zip(ours, theirs)):
        if b.shape != a.shape:
            raise NotChecked(f"not checked: transformers' layer {layer} map is {b.shape}, attnviz's {a.shape}")
        out[layer] = np.abs(a - b).reshape(a.shape[0], -1).max(axis=1)
    return out


def _logit_difference(forward, model, ids: list[int], theirs: np.ndarray | None) -> float | None:
    """max |attnviz's logits - transformers'| over every position, LOGIT_ROWS positions at a time; None where
    attnviz's model has no output head (or transformers' model gave no logits)."""
    outputs = forward.outputs
    if theirs is None or outputs is None or getattr(model, "logits", None) is None:
        return None
    hidden = outputs.hidden
    if hidden.shape[1] != len(ids):
        hidden = model.hidden(torch.tensor([ids], dtype=torch.long))
    worst = 0.0
    with torch.inference_mode():
        for r0 in range(0, len(ids), LOGIT_ROWS):
            ours = model.logits(hidden[:, r0:r0 + LOGIT_ROWS])
            if ours is None:
                return None
            part = torch.from_numpy(np.ascontiguousarray(theirs[r0:r0 + LOGIT_ROWS]))
            worst = max(worst, float((ours[0].cpu() - part).abs().max()))
    return worst


def _stop_if(cancel: Callable[[], bool]) -> None:
    if cancel():
        raise Cancelled
