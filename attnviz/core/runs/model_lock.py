"""One computation at a time on a loaded model.

The model cache hands the same torch module to the app's map worker and to every panel's thread. A plain forward
keeps its state in its own ForwardContext, but the analyses (logit attribution, circuits, patching) hook the shared
modules for the length of their forwards, and moving a model to another device changes it for everyone: a forward
on another thread meanwhile runs through those hooks, which record its tensors or replace its inputs (a 14-token
text met a 2-token probe's tensors; a post-norm check read another text's norms). So every entry point that runs a
model's modules, and every analysis for as long as its hooks are on, holds the model's lock. It is re-entrant: an
analysis holding it runs its forwards through the model's own locking methods.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

_locks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # torch module (or model object) -> its RLock
_guard = threading.Lock()


def model_lock(model) -> contextlib.AbstractContextManager:
    """The lock of the torch module a model object runs (`model.shared_module` where the object keeps it apart from
    `.module`, else `model.module`, else the object itself); a no-op for None (a variant whose module is built afresh
    per run shares nothing)."""
    if model is None:
        return contextlib.nullcontext()
    key = next((m for m in (getattr(model, "shared_module", None), getattr(model, "module", None)) if m is not None),
               model)
    with _guard:
        lock = _locks.get(key)
        if lock is None:
            lock = _locks[key] = threading.RLock()
    return lock
