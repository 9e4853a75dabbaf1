"""Where a run computes and how much memory is free there (the budget's share of it: memory.py), and tensors
to NumPy (a byte count in words is style.format_bytes, imported here for core)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from attnviz.core.kernel import buffers
from attnviz.core.runs.config import ConfigError
from attnviz.style import format_bytes  # noqa: F401 - core's modules take it from here
from attnviz.system import memory_bytes


def resolve_device(name: str) -> torch.device:
    """'cpu', 'cuda', 'cuda:N' or 'auto' -> a device that exists, else ConfigError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("device", name, "no CUDA device is available (torch.cuda.is_available() is False)",
                          "use device cpu, or auto to pick CUDA only where it exists")
    device = torch.device(name)
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ConfigError("device", name, f"only {count} CUDA device(s) exist",
                          f"use cuda:0 .. cuda:{count - 1}")
    return device


def available_memory(device: torch.device) -> int:
    if device.type == "cuda":  # free, plus what torch's caching allocator holds but does not use
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return torch.cuda.mem_get_info(device)[0] + cached
    free = memory_bytes("MemAvailable")
    # free map buffers (buffers.py) are memory a run gets back: first reused, else dropped before it allocates
    return (8 << 30 if free is None else free) + buffers.idle_bytes()  # not Linux: assume 8 GiB free


class MemoryBudgetError(ConfigError):
    """The run would not fit the memory budget (raised before anything big is allocated)."""


def to_numpy(t: Tensor) -> np.ndarray:
    """Float32 (or bool) NumPy on the CPU; zero-copy for CPU float32 tensors."""
    t = t.detach()
    if t.dtype != torch.bool:
        t = t.to(torch.float32)
    return t.cpu().numpy()


