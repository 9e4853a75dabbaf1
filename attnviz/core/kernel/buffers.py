"""Large CPU map buffers handed out again once nothing uses them.

A fresh tensor's memory is mapped page by page as it is first written: a 48 MB map (12 heads, 1,024 tokens)
costs about 12,000 page faults, tens of milliseconds (more in a virtual machine), on every run, since the
allocator returns blocks this large to the system when they are freed. A run that replaces the one before
can write into that run's buffer instead once the result it belonged to is gone. A buffer is free when its
storage has no user but this pool (torch's storage use count), so a result still on screen, in a cache or
being exported is never written over.

Scratch: one block-sized temporary a loop over blocks writes again and again (a long forward's blocks, each
thread's blocks of a whole map), for ops run without autograd (`reusable`).
"""

from __future__ import annotations

import math
import threading

import torch
from torch import Tensor

MIN_BYTES = 8 << 20  # smaller buffers come from the allocator's own free lists, already mapped
HELD_BYTES = 2 << 30  # buffers tracked at most, in use or free (past this a buffer is the allocator's alone)

_lock = threading.Lock()
_buffers: list[Tensor] = []  # every buffer handed out and not yet dropped, oldest first
_use_count = getattr(torch._C, "_storage_Use_Count", None)  # None: a torch without it recycles nothing


def _free(t: Tensor) -> bool:
    """No user of the storage but the pool (its tensor, and the storage object made to ask)."""
    return _use_count(t.untyped_storage()._cdata) <= 2


def empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str = "cpu") -> Tensor:
    """torch.empty(shape), from a free buffer of the same size and dtype where there is one."""
    device = torch.device(device)
    numel = 1
    for n in shape:
        numel *= n
    nbytes = numel * torch.empty((), dtype=dtype).element_size()
    if _use_count is None or device.type != "cpu" or nbytes < MIN_BYTES:
        return torch.empty(shape, dtype=dtype, device=device)
    with _lock:
        inference = torch.is_inference_mode_enabled()  # a buffer made in inference mode is written only there
        for i, t in enumerate(_buffers):
            if t.dtype == dtype and t.numel() == numel and t.is_inference() == inference and _free(t):
                _buffers.append(_buffers.pop(i))  # the newest now
                return t.view(shape)
        _drop_free()  # they fit no map of this run: their memory goes back before a new buffer takes more
        t = torch.empty(numel, dtype=dtype)
        _buffers.append(t)
        if sum(b.numel() * b.element_size() for b in _buffers) > HELD_BYTES:
            _buffers.pop()  # not kept for later: the pool holds enough already
        return t.view(shape)


def _drop_free(keep_bytes: int = 0) -> int:
    """Let go of the oldest free buffers until at most keep_bytes of free ones remain (the lock held);
    returns the bytes let go."""
    idle = [t for t in _buffers if _free(t)]
    extra = sum(t.numel() * t.element_size() for t in idle) - keep_bytes
    gone = []
    for t in idle:  # oldest first
        if extra <= 0:
            break
        gone.append(t)
        extra -= t.numel() * t.element_size()
    _buffers[:] = [t for t in _buffers if all(t is not g for g in gone)]  # by identity: == compares values
    return sum(t.numel() * t.element_size() for t in gone)


def release(keep_bytes: int = 0) -> int:
    """Give free buffers back to the system, the oldest first, keeping at most keep_bytes of them (a
    pause in the edits keeps the next run's maps; a flush keeps none); returns the bytes given back."""
    with _lock:
        return _drop_free(keep_bytes)


def idle_bytes() -> int:
    """Bytes held in free buffers (memory a run may count as available)."""
    with _lock:
        return sum(t.numel() * t.element_size() for t in _buffers if _free(t))


class Scratch:
    """A block-sized temporary, the same memory for every block (and every call, where it is shared): a fresh
    one each time is mapped page by page (a 16 MB block: thousands of page faults, as long as the arithmetic)."""

    def __init__(self):
        self._t: torch.Tensor | None = None

    def like(self, t: torch.Tensor) -> torch.Tensor:
        return self.empty(t.shape, t.dtype, t.device)

    def empty(self, shape, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
        n = math.prod(shape)
        return self.reserve(n, dtype, device)[:n].view(shape)

    def reserve(self, n: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
        """The memory for n values at least (made once for the largest block, it serves every smaller one)."""
        held = self._t
        if held is None or held.numel() < n or held.dtype != dtype or held.device != torch.device(device) \
                or held.is_inference() != torch.is_inference_mode_enabled():  # one made there stays there
            held = self._t = torch.empty(n, dtype=dtype, device=device)
        return held

    def release(self) -> None:
        self._t = None


class Into:
    """Scratch's face for one given place: an op's out= is then the memory its result is kept in (a block of
    whole heads in the whole map), where the shape, dtype and device agree; else fresh memory."""

    def __init__(self, place: torch.Tensor):
        self.place = place

    def empty(self, shape, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
        p = self.place
        if p.dtype == dtype and p.device == torch.device(device) and p.numel() == math.prod(shape) \
                and p.is_contiguous():
            return p.view(shape)
        return torch.empty(shape, dtype=dtype, device=device)


def reusable() -> bool:
    """Whether ops may write into reused memory (out=): autograd writes no out= tensor, so a forward that
    records gradients makes its own."""
    return not torch.is_grad_enabled()
