"""Train a toy on the CPU, measure it, and write its weights (safetensors) and JSON card.

Reproducible: the seed fixes the initial weights (torch's global RNG, restored afterwards) and,
through its own torch.Generator, every training batch. Held-out sets use other seeds.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import save as safetensors_bytes
from torch import Tensor, nn

from attnviz.toys import tasks
from attnviz.toys.models import build
from attnviz.toys.specs import ToySpec

HELD_OUT_SEED = 1_000_003  # the card's held-out set: torch.Generator().manual_seed(this)
HELD_OUT_EXAMPLES = 1000
# One thread: as fast as two here for these tiny models, robust when another program holds a
# core, and the same bits on any machine (the reduction order does not depend on the core count).
TRAIN_THREADS = 1
METRICS = {False: "sequence accuracy", True: "next-token accuracy in the repeat (unambiguous positions)"}


def batch(spec: ToySpec, gen: torch.Generator, size: int) -> tuple[Tensor, Tensor, Tensor]:
    """Inputs (B, L), targets (B, L) and a bool (B, L) of the positions the loss counts."""
    if spec.task == "induction":
        x, _, _, scored = tasks.induction_batch(gen, size)
        y = torch.roll(x, -1, dims=1)  # next token; the wrapped last column is never scored
        return x, y, scored
    x, y = tasks.digits_batch(gen, size, spec.task)
    return x, y, torch.ones_like(x, dtype=torch.bool)


def new_model(spec: ToySpec, seed: int) -> nn.Module:
    """The untrained network, its initial weights fixed by `seed`."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return build(spec.architecture)


def train(
    spec: ToySpec, steps: int | None = None, seed: int | None = None,
    log: Callable[[int, float], None] | None = None,
) -> tuple[nn.Module, list[float]]:
    """Adam at a constant learning rate on fresh random batches; returns the model and the losses."""
    steps = spec.steps if steps is None else steps
    seed = spec.seed if seed is None else seed
    model = new_model(spec, seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr)
    losses = []
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(TRAIN_THREADS)
    try:
        for step in range(steps):
            losses.append(_step(spec, model, opt, gen))
            if log is not None and (step % 100 == 0 or step == steps - 1):
                log(step, losses[-1])
    finally:
        torch.set_num_threads(threads)
    model.eval()
    return model, losses


def _step(spec: ToySpec, model: nn.Module, opt: torch.optim.Optimizer, gen: torch.Generator) -> float:
    """One optimisation step on a fresh batch; returns its loss."""
    x, y, scored = batch(spec, gen, spec.batch_size)
    loss = F.cross_entropy(model(x)[scored], y[scored])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


def held_out(spec: ToySpec, seed: int = HELD_OUT_SEED, n: int = HELD_OUT_EXAMPLES):
    """A held-out set, freshly generated from `seed` (never a training seed)."""
    return batch(spec, torch.Generator().manual_seed(seed), n)


@torch.no_grad()
def accuracy(spec: ToySpec, model: nn.Module, seed: int = HELD_OUT_SEED, n: int = HELD_OUT_EXAMPLES) -> float:
    """reverse / sort: whole sequences right; induction: next tokens in the repeat right, where
    the current token occurs once before (so the answer is unique)."""
    x, y, scored = held_out(spec, seed, n)
    right = model(x).argmax(-1) == y
    if spec.task == "induction":
        return right[tasks.unambiguous(x, scored)].float().mean().item()
    return right.all(dim=1).float().mean().item()


@torch.no_grad()
def target_weight(spec: ToySpec, model: nn.Module, layer: int, seed: int = HELD_OUT_SEED, n: int = 200) -> Tensor:
    """(H,) mean attention weight each head of `layer` puts on its expected key.

    Encoder-decoder cross-attention: the input the output copies (inputs with distinct digits, so
    that input is unique). Induction layer 0: the previous token. Induction layer 1: the token after
    the current token's earlier copy, at repeat positions where that copy is the only one.
    """
    gen = torch.Generator().manual_seed(seed)
    if spec.task == "induction":
        x, offsets, blocks, scored = tasks.induction_batch(gen, n)
        pos = torch.arange(x.shape[1]).expand_as(x)
        target = tasks.induction_targets(offsets, blocks, x.shape[1]) if layer else torch.where(pos > 0, pos - 1, -1)
        target = torch.where(tasks.unambiguous(x, scored) | (layer == 0), target, -1)
    else:
        x = tasks.distinct_digits(gen, n)
        target = tasks.source_positions(x, spec.task)
    _, traces = model(x, return_trace=True)
    w = traces[layer]["weights"]  # (B, H, Lq, Lkv)
    valid = target >= 0  # (B, Lq)
    picked = w.gather(-1, target.clamp(min=0)[:, None, :, None].expand(-1, w.shape[1], -1, 1)).squeeze(-1)
    return (picked * valid[:, None]).sum(dim=(0, 2)) / valid.sum()  # (H,)


def head_findings(spec: ToySpec, model: nn.Module) -> list[dict[str, Any]]:
    """The best head for each known role, with its score (mean weight on the expected key)."""
    if spec.task == "induction":
        roles = [(0, "previous-token", "weight on the previous token"),
                 (1, "induction", "weight on the token after the earlier copy of the current token "
                  "(repeat positions whose token occurs once before)")]
    else:
        what = "anti-diagonal alignment" if spec.task == "reverse" else "sorted picking order"
        roles = [(spec.focus_layer, what, "weight on the input the output copies (distinct digits)")]
    found = []
    for layer, role, measure in roles:
        scores = target_weight(spec, model, layer)
        head = int(scores.argmax())
        found.append({"layer": layer, "head": head, "role": role, "score": round(float(scores[head]), 4),
                      "all_heads": [round(float(s), 4) for s in scores], "score_is": measure})
    return found


def card(spec: ToySpec, model: nn.Module, losses: list[float], steps: int, seed: int, seconds: float) -> dict:
    """The JSON card written beside the weights."""
    return {
        "name": spec.name,
        "task": spec.description,
        "caption": spec.caption,
        "vocabulary": spec.vocabulary,
        "architecture": spec.architecture,
        "layers": list(spec.layer_names),
        "training": {"steps": steps, "seed": seed, "batch_size": spec.batch_size, "optimizer": "Adam",
                     "lr": spec.lr, "final_loss": round(sum(losses[-50:]) / len(losses[-50:]), 5),
                     "seconds": round(seconds, 1), "torch": torch.__version__,
                     "torch_threads": TRAIN_THREADS},
        "held_out": {"seed": HELD_OUT_SEED, "examples": HELD_OUT_EXAMPLES,
                     "metric": METRICS[spec.task == "induction"],
                     "accuracy": round(accuracy(spec, model), 4)},
        "heads": head_findings(spec, model),
        "retrain": f"python -m attnviz.toys train {spec.name} --steps {steps} --seed {seed}",
        "weights": f"{spec.name}.safetensors",
    }


def train_and_save(spec: ToySpec, out: Path, steps: int | None = None, seed: int | None = None,
                   log: Callable[[int, float], None] | None = None) -> dict:
    """Train, then write OUT/NAME.safetensors and OUT/NAME.json; returns the card."""
    steps = spec.steps if steps is None else steps
    seed = spec.seed if seed is None else seed
    start = time.perf_counter()
    model, losses = train(spec, steps, seed, log)
    info = card(spec, model, losses, steps, seed, time.perf_counter() - start)
    info["training"]["load_average"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    out.mkdir(parents=True, exist_ok=True)
    # written by Python, not safetensors' save_file: that creates its file 0600 whatever the umask says
    (out / info["weights"]).write_bytes(safetensors_bytes({k: v.contiguous() for k, v in model.state_dict().items()},
                                             metadata={"name": spec.name, "card": f"{spec.name}.json"}))
    (out / f"{spec.name}.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info
