"""Check a model run against transformers: one forward of transformers' own model (its eager attention, float32,
the same token ids) beside attnviz's maps and logits, as max |difference| per layer and head.

`check_against_transformers(config or result)` loads the run's model folder or GGUF file with transformers'
own loader (`attn_implementation="eager"`, `local_files_only=True`, no remote code; a GGUF dequantised to
float32 by transformers itself), runs it once with `output_attentions=True`, and compares. Before anything is
loaded it estimates what transformers' float32 copy needs (`transformers_bytes`) and refuses with one line
(NotChecked) where that would not fit the memory allowance. Qt-free: the app's Run > Check against
transformers runs it on a thread of its own (ui/window/check_job.py).
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from attnviz.core.kernel.progress import Cancelled
from attnviz.core.runs.backed import run_forward
from attnviz.core.runs.config import RunConfig
from attnviz.core.runs.device import format_bytes, memory_allowance
from attnviz.core.runs.predictions import LOGIT_ROWS

Progress = Callable[[str, int, int], None]  # (step, done, total): "loading", "layers", "comparing"
LAYER_NAME = re.compile(r"(?:^|\.)(?:layers|layer|h|block|blocks)\.\d+$")  # a family's container of layers
LOAD_OVERHEAD = 256 << 20  # transformers' modules, the activations of one layer, generously


class NotChecked(Exception):
    """The check cannot run: one line that says why (and what would let it run)."""


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
                               progress: Progress | None = None) -> CheckReport:
    """Compare a model run's maps and logits with transformers' eager forward on the same token ids.

    `source`: a RunConfig of a model-backed variant (attnviz runs its forward first), or a RunResult of one
    (its forward's maps are used as they are, unless pooled or ablated: then the forward runs again whole and
    unablated, since transformers computes neither). NotChecked (one line) where the run is not a model's,
    where transformers' copy would not fit the memory allowance, or where transformers' model cannot load;
    Cancelled where `cancel` says so (polled between steps and between transformers' layers)."""
    started = time.perf_counter()
    cancel = cancel or (lambda: False)
    say = progress or (lambda step, done, total: None)
    forward = _forward_of(source, memory_budget, cancel)
    model = forward.key.spec.load(forward.key, memory_budget)  # cached: the run's own model
    folder = getattr(getattr(model, "model", model), "folder", None)
    if folder is None or getattr(model, "module", None) is None:
        raise NotChecked("not checked: Check against transformers needs a transformers folder or a GGUF model")
    ids = torch.tensor([forward.token_ids.tolist()], dtype=torch.long)
    need = transformers_bytes(folder, forward.info, ids.shape[1])
    allowed, source = memory_allowance(memory_budget)
    if need > allowed:
        raise NotChecked(f"transformers' float32 copy would need {format_bytes(need)}; {format_bytes(allowed)} "
                         f"free for it ({source}): not checked")
    say("loading", 0, 1)
    reference = load_reference(folder, type(model.module))
    try:
        _stop_if(cancel)
        say("layers", 0, forward.info.layers)
        out = _reference_forward(reference, ids, cancel, lambda n, total: say("layers", n, total))
        say("comparing", 0, 1)
        per_head = map_differences(forward.layer_weights[:, 0], out.attentions)
        logits = _logit_difference(forward, model, ids, getattr(out, "logits", None))
    finally:
        del reference
        gc.collect()
    return CheckReport(per_head, logits, forward.key, ids.shape[1], time.perf_counter() - started)


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
    float32, every layer's attention maps (kept by output_attentions, one more in the making), the logits, and a
    margin. A GGUF file's parameters count twice, and the file once: transformers' loader holds every tensor
    dequantised in NumPy while it builds the model, reading the file's pages (measured: Gemma 3 270M, 1.07 GB
    of float32 from a 253 MB file, peaked 2.63 GiB above the run; this counts 2.6 GiB for 122 tokens)."""
    from attnviz.models.folder import parameter_bytes

    params = parameter_bytes(folder) * (2 if folder.gguf else 1) + (folder.gguf.stat().st_size if folder.gguf else 0)
    maps = (info.layers + 1) * info.heads * length * length * 4
    logits = length * info.vocab_size * 4
    tokens = info.layers * length * info.d_model * 4 * 8
    return params + maps + logits + tokens + LOAD_OVERHEAD


def load_reference(folder, cls: type) -> torch.nn.Module:
    """transformers' own model of the folder (or GGUF file), float32, eager attention, local files only, no remote
    code: the reference attnviz's maps are checked against (`cls`: the architecture attnviz runs it as)."""
    from attnviz.models.hf_attention import transformers

    transformers()  # imported, offline, quiet (as attnviz's own loading does)
    source = {"gguf_file": folder.gguf.name} if folder.gguf else {}
    try:
        model = cls.from_pretrained(str(folder.path), dtype=torch.float32, attn_implementation="eager",
                                    local_files_only=True, trust_remote_code=False, **source)
    except Exception as exc:  # noqa: BLE001 - an architecture or a quantisation transformers' loader cannot read
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise NotChecked(f"not checked: transformers cannot load this model itself ({first})") from exc
    return model.eval()


def _reference_forward(model: torch.nn.Module, ids: torch.Tensor, cancel: Callable[[], bool],
                       layer_done: Callable[[int, int], None]):
    """transformers' forward with output_attentions; each layer reports itself done, and `cancel` stops it
    between two layers (Cancelled)."""
    layers = [m for name, m in model.named_modules() if LAYER_NAME.search(name)]
    done = [0]

    def after(*_) -> None:
        done[0] += 1
        layer_done(done[0], len(layers))
        _stop_if(cancel)

    hooks = [m.register_forward_hook(after) for m in layers]
    try:
        with torch.inference_mode():
            return model(input_ids=ids, output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()


def map_differences(ours: np.ndarray, theirs) -> np.ndarray:
    """(layers, heads) max |ours - theirs| of every layer's (heads, L, L) weights: `ours` (layers, H, L, L),
    `theirs` transformers' attentions (one (1, H, L, L) tensor per layer). NaN where either holds NaN."""
    if theirs is None or len(theirs) != len(ours):
        count = 0 if theirs is None else len(theirs)
        raise NotChecked(f"not checked: transformers returned {count} attention maps for {len(ours)} layers")
    out = np.empty(ours.shape[:2], dtype=np.float64)
    for layer, (a, b) in enumerate(zip(ours, theirs)):
        b = b[0].detach().float().cpu().numpy()
        if b.shape != a.shape:
            raise NotChecked(f"not checked: transformers' layer {layer} map is {b.shape}, attnviz's {a.shape}")
        out[layer] = np.abs(a - b).reshape(a.shape[0], -1).max(axis=1)
    return out


def _logit_difference(forward, model, ids: torch.Tensor, theirs: torch.Tensor | None) -> float | None:
    """max |attnviz's logits - transformers'| over every position, LOGIT_ROWS positions at a time; None where
    attnviz's model has no output head (or transformers' model gave no logits)."""
    outputs = forward.outputs
    if theirs is None or outputs is None or getattr(model, "logits", None) is None:
        return None
    hidden = outputs.hidden
    if hidden.shape[1] != ids.shape[1]:
        hidden = model.hidden(ids)
    worst = 0.0
    with torch.inference_mode():
        for r0 in range(0, ids.shape[1], LOGIT_ROWS):
            ours = model.logits(hidden[:, r0:r0 + LOGIT_ROWS])
            if ours is None:
                return None
            part = theirs[0, r0:r0 + LOGIT_ROWS].float()
            worst = max(worst, float((ours[0].cpu() - part).abs().max()))
    return worst


def _stop_if(cancel: Callable[[], bool]) -> None:
    if cancel():
        raise Cancelled
