"""transformers' own forward of a model, the reference Check against transformers compares with (check.py).

`reference_outputs(path, gguf, cls, ids)` loads the folder (or GGUF file) with transformers' own loader (float32,
`attn_implementation="eager"`, `local_files_only=True`, no remote code; a GGUF dequantised by transformers) and
runs it once with `output_attentions=True`. By default in a child process of its own: transformers' GGUF
loading holds the GIL for long stretches (the window stalled up to 0.5 s while it ran on a thread), its peak
memory is given back whole when the child ends, and Cancel ends it at once, even while it loads. The child
writes the maps and logits as .npy files into a temporary folder and reports each layer on its stdout.

    python -m attnviz.models.reference FOLDER GGUF_NAME MODULE:CLASS WORKDIR THREADS   (the child)
"""

from __future__ import annotations

import importlib
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from attnviz.core.kernel.progress import Cancelled

LAYER_NAME = re.compile(r"(?:^|\.)(?:layers|layer|h|block|blocks)\.\d+$")  # a family's container of layers
POLL_S = 0.1  # how often the parent looks at cancel while the child runs


class NotChecked(Exception):
    """The check cannot run: one line that says why (and what would let it run)."""


@dataclass
class Reference:
    """transformers' outputs for one text: every layer's weights, and the logits (None: no output head)."""

    attentions: list[np.ndarray]  # per layer (H, L, L) float32
    logits: np.ndarray | None  # (L, vocab) float32


def reference_outputs(path: Path, gguf: str | None, cls: type, ids: list[int], *, isolated: bool = True,
                      cancel: Callable[[], bool] = lambda: False,
                      layer_done: Callable[[int, int], None] = lambda n, total: None) -> Reference:
    """transformers' `cls` loaded from the folder `path` (its GGUF file `gguf`, if any) and run on `ids`: in a
    child process (isolated) or in this one. NotChecked where transformers cannot load it; Cancelled."""
    if not isolated:
        model = load_reference(path, gguf, cls)
        try:
            return _forward(model, ids, cancel, layer_done)
        finally:
            del model
    with tempfile.TemporaryDirectory(prefix="attnviz-check-") as work:
        np.save(Path(work) / "ids.npy", np.asarray(ids, dtype=np.int64))
        _run_child([str(path), gguf or "", f"{cls.__module__}:{cls.__qualname__}", work,
                    str(torch.get_num_threads())], Path(work), cancel, layer_done)
        logits = Path(work) / "logits.npy"
        stacked = np.load(Path(work) / "attentions.npy")
        return Reference(list(stacked), np.load(logits) if logits.exists() else None)


def load_reference(path: Path, gguf: str | None, cls: type) -> torch.nn.Module:
    """transformers' own model of the folder (or its GGUF file), float32, eager attention, local files only, no
    remote code (`cls`: the architecture attnviz runs it as)."""
    from attnviz.models.hf_attention import transformers

    transformers()  # imported offline and quiet, as attnviz's own loading does
    source = {"gguf_file": gguf} if gguf else {}
    try:
        model = cls.from_pretrained(str(path), dtype=torch.float32, attn_implementation="eager",
                                    local_files_only=True, trust_remote_code=False, **source)
    except Exception as exc:  # noqa: BLE001 - an architecture or a quantisation transformers' loader cannot read
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise NotChecked(f"not checked: transformers cannot load this model itself ({first})") from exc
    return model.eval()


def _forward(model: torch.nn.Module, ids: list[int], cancel: Callable[[], bool],
             layer_done: Callable[[int, int], None]) -> Reference:
    """The forward with output_attentions; each layer reports itself done, and `cancel` stops it between two
    layers (Cancelled)."""
    layers = [m for name, m in model.named_modules() if LAYER_NAME.search(name)]
    done = [0]

    def after(*_) -> None:
        done[0] += 1
        layer_done(done[0], len(layers))
        if cancel():
            raise Cancelled

    hooks = [m.register_forward_hook(after) for m in layers]
    try:
        with torch.inference_mode():
            out = model(input_ids=torch.tensor([ids], dtype=torch.long), output_attentions=True)
    finally:
        for hook in hooks:
            hook.remove()
    logits = getattr(out, "logits", None)
    return Reference([a[0].float().numpy() for a in out.attentions or ()],
                     None if logits is None else logits[0].float().numpy())


def _run_child(args: list[str], work: Path, cancel: Callable[[], bool],
               layer_done: Callable[[int, int], None]) -> None:
    """Run the child, hearing its layers on stdout; kill it on cancel (Cancelled); NotChecked where it fails."""
    root = str(Path(__file__).resolve().parents[2])  # the folder attnviz is imported from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    errors = work / "stderr.txt"
    with open(errors, "wb") as err:
        child = subprocess.Popen([sys.executable, "-m", "attnviz.models.reference", *args], stdout=subprocess.PIPE,
                                 stderr=err, stdin=subprocess.DEVNULL, env=env, text=True)
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in child.stdout] + [lines.put(None)], daemon=True,
                     name="attnviz-check-child").start()
    said = None
    try:
        while True:
            if cancel():
                raise Cancelled
            try:
                line = lines.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if line is None:
                break
            kind, _, rest = line.strip().partition(" ")
            if kind == "layers":
                layer_done(*(int(x) for x in rest.split()))
            elif kind == "error":
                said = rest
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode or said:
        last = (errors.read_text(errors="replace").strip().splitlines() or ["no message"])[-1][:160]
        raise NotChecked(said or f"not checked: transformers' process ended with code {child.returncode} ({last})")


def _end_with_parent(work: Path) -> None:
    """An app that quits (or dies) mid-check leaves no transformers process behind: the child ends itself, and
    removes its folder, once its parent is gone."""
    import shutil
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        shutil.rmtree(work, ignore_errors=True)
        os._exit(3)

    threading.Thread(target=watch, daemon=True, name="attnviz-check-parent").start()


def main(argv: list[str]) -> int:
    """The child: load, run, write attentions.npy (layers, H, L, L) and logits.npy into WORKDIR."""
    from attnviz.system import lower_priority

    folder, gguf, cls_path, work, threads = argv
    lower_priority()  # the window's process wins the CPU
    _end_with_parent(Path(work))
    torch.set_num_threads(max(int(threads), 1))
    module, _, name = cls_path.partition(":")
    if not module.startswith("transformers."):  # only transformers' own architectures, never another module
        print(f"error not checked: {module} is not a transformers architecture", flush=True)
        return 2
    try:
        cls = getattr(importlib.import_module(module), name)
        ids = np.load(Path(work) / "ids.npy").tolist()
        out = _forward(load_reference(Path(folder), gguf or None, cls), ids, lambda: False,
                       lambda n, total: print(f"layers {n} {total}", flush=True))
    except NotChecked as exc:
        print(f"error {exc}", flush=True)
        return 2
    np.save(Path(work) / "attentions.npy", np.stack(out.attentions) if out.attentions else np.empty((0,)))
    if out.logits is not None:
        np.save(Path(work) / "logits.npy", out.logits)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
