"""config -> result: seeding, device, dtype, memory check, the traced forward, timings."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from torch import Tensor

from .config import ConfigError, RunConfig
from .masks import causal_mask, padding_mask, window_mask


class Cancelled(Exception):
    """Raised by run() when its `cancel` callback says the result is no longer wanted."""


MEMORY_FRACTION = 0.5  # default budget: this share of the free RAM (or free GPU memory)
SLOW_CPU_DTYPES = ("float16", "bfloat16")


@dataclass
class RunResult:
    """Every trace array as float32 NumPy on the CPU (mask and row flags bool).

    B batch, H heads, Lq/Lkv lengths, dh head width, d model width, d_out output width.
    """

    config: RunConfig
    output: np.ndarray  # (B, Lq, d_out)
    q: np.ndarray  # (B, H, Lq, dh)
    k: np.ndarray  # (B, H, Lkv, dh)
    v: np.ndarray  # (B, H, Lkv, dh)
    scores: np.ndarray  # (B, H, Lq, Lkv) scaled, masked to -inf, pre-softmax
    weights: np.ndarray  # (B, H, Lq, Lkv) softmax, pre-dropout
    dropped: np.ndarray  # (B, H, Lq, Lkv) what multiplied V (shares memory with weights in eval)
    context: np.ndarray  # (B, Lq, d) before the output projection
    mask: np.ndarray  # bool, True = may attend, broadcastable to (B, H, Lq, Lkv)
    fully_masked_rows: np.ndarray  # (B, H, Lq) bool: no key to attend to (NaN unless safe softmax)
    device: str  # the device actually used, e.g. "cpu" or "cuda:0"
    compute_time_s: float  # the forward pass alone
    total_time_s: float  # build, inputs, transfer and forward
    notes: tuple[str, ...] = field(default=())

    ARRAYS = ("output", "q", "k", "v", "scores", "weights", "dropped", "context", "mask",
              "fully_masked_rows")

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.ARRAYS}


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


def build_mask(config: RunConfig, device: torch.device | None = None) -> Tensor | None:
    """The config's mask as bool (True = may attend), broadcastable to (B, H, Lq, Lkv)."""
    lq, lkv, kind = config.seq_q, config.lkv, config.mask
    if kind == "none":
        return None
    if kind == "padding":
        return padding_mask(config.kv_lengths_per_item(), lkv, device=device)
    if kind in ("causal", "causal-bottom-right"):
        align = "bottom-right" if kind == "causal-bottom-right" else "top-left"
        return causal_mask(lq, lkv, align, device=device)
    return window_mask(lq, lkv, config.window, causal=kind == "window", device=device)


def estimate_memory(config: RunConfig) -> int:
    """Bytes the run needs at its peak, counted generously (attention maps dominate)."""
    elem = torch.empty((), dtype=getattr(torch, config.dtype)).element_size()
    b, h, lq, lkv = config.batch, config.heads, config.seq_q, config.lkv
    maps = b * h * lq * lkv
    live = 2 + (2 if config.dropout_active else 0)  # scores, weights (+ noise, dropped)
    to_float32 = 3 * 4 if elem != 4 else 0  # the result is converted to float32 NumPy
    widths = config.d_model + sum(getattr(config, w) for w in ("d_out", "d_cross") if config.applies(w))
    tokens = b * (lq + lkv) * widths * 8 * max(elem, 4)
    params = 4 * widths * widths * 4
    return maps * (live * elem + to_float32) + tokens + params


def available_memory(device: torch.device) -> int:
    if device.type == "cuda":  # free, plus what torch's caching allocator holds but does not use
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return torch.cuda.mem_get_info(device)[0] + cached
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):  # not Linux: assume 8 GiB free
        return 8 << 30


def _gib(n: float) -> str:
    if n >= 2**28:
        return f"{n / 2**30:.2f} GiB"
    if n >= 2**20:
        return f"{n / 2**20:.0f} MiB"
    return f"{n / 2**10:.0f} KiB" if n >= 2**10 else f"{n:.0f} bytes"  # small budgets are not "0 MiB"


def result_memory(config: RunConfig) -> int:
    """Bytes of the float32 RunResult in host memory: a CUDA run copies every trace array back."""
    b, h, lq, lkv = config.batch, config.heads, config.seq_q, config.lkv
    maps = b * h * lq * lkv * (3 if config.dropout_active else 2)  # scores, weights (+ dropped)
    widths = config.d_model + sum(getattr(config, w) for w in ("d_out", "d_cross") if config.applies(w))
    tokens = b * (lq + lkv) * widths * 4  # q, k, v, context and output, generously
    return (maps + tokens) * 4 + b * lq * lkv + b * h * lq  # + the bool mask and row flags


def shortened(config: RunConfig, length: int) -> RunConfig:
    """`config` with both lengths at most `length`, still valid for its mask: padding lengths are
    clipped to the new key length (what the quick fix in the app and the CLI's advice do)."""
    lq, lkv = min(config.seq_q, length), min(config.seq_kv, length)
    if config.mask != "padding":
        return replace(config, seq_q=lq, seq_kv=lkv)
    keys = lkv if config.spec.cross else lq
    return replace(config, seq_q=lq, seq_kv=lkv, kv_lengths=tuple(min(n, keys) for n in config.kv_lengths))


class MemoryBudgetError(ConfigError):
    """The run would not fit the memory budget (raised before anything big is allocated)."""


def check_memory(config: RunConfig, device: torch.device, budget: int | None = None) -> int:
    """Raise MemoryBudgetError when the run does not fit; return the estimate for `device`.

    On CUDA the float32 result is also copied to the CPU, so host memory must hold it too; an
    explicit `budget` then applies to both. The quick fix is the longest length that fits both.
    """
    limits = [(estimate_memory, device, "this run needs")]
    if device.type == "cuda":
        limits.append((result_memory, torch.device("cpu"), "its result, copied to the CPU, needs"))
    checks = []
    for estimate, where, what in limits:
        source = "the memory_budget given"
        allowed = budget
        if allowed is None:
            allowed = int(available_memory(where) * MEMORY_FRACTION)
            source = f"{MEMORY_FRACTION:.0%} of the free memory on {where}"
        checks.append((estimate, allowed, what, source))

    def fits(c: RunConfig) -> bool:
        return all(estimate(c) <= allowed for estimate, allowed, _, _ in checks)

    if fits(config):
        return estimate_memory(config)
    estimate, allowed, what, source = next(c for c in checks if c[0](config) > c[1])
    over = (f"not enough memory: {what} about {_gib(estimate(config))} ({config.shapes_text()}), over the budget of "
            f"{_gib(allowed)} ({source})")

    def at(length: int) -> RunConfig:
        return shortened(config, length)

    if not fits(at(1)):  # the widths alone are too big: shorter sequences cannot help
        raise MemoryBudgetError("d_model", config.d_model, over, "use smaller widths (d_model, d_out, d_cross)")
    lo, hi = 1, max(config.seq_q, config.lkv)  # the longest length that fits, by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(at(mid)) else (lo, mid - 1)
    clip = " (padding lengths clipped to match)" if config.mask == "padding" else ""
    raise MemoryBudgetError("seq_q", config.seq_q, over,
                            f"use lengths of {lo} or less{clip}, or fewer heads or batch items", suggestions=(lo,))


def _numpy(t: Tensor) -> np.ndarray:
    """Float32 (or bool) NumPy on the CPU; zero-copy for CPU float32 tensors."""
    t = t.detach()
    if t.dtype != torch.bool:
        t = t.to(torch.float32)
    return t.cpu().numpy()


def run(
    config: RunConfig, *, memory_budget: int | None = None, cancel: Callable[[], bool] | None = None
) -> RunResult:
    """Build the variant's module and inputs from the seed, run the traced forward, return NumPy.

    Same config -> bit-identical result on the CPU. Weights then inputs are drawn in the seed
    scripts' order (manual_seed, build the module, torch.randn for each input), on the CPU,
    then moved, so the CPU numbers do not depend on the device asked for.
    `cancel` is polled between stages (a single torch op cannot be interrupted); when it returns
    True the run stops with Cancelled.
    """

    def checkpoint() -> None:
        if cancel is not None and cancel():
            raise Cancelled

    started = time.perf_counter()
    device = resolve_device(config.device)
    check_memory(config, device, memory_budget)
    dtype = getattr(torch, config.dtype)
    notes = []
    if device.type == "cpu" and config.dtype in SLOW_CPU_DTYPES:
        notes.append(f"{config.dtype} on the CPU runs far slower than float32")
    cuda_devices = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices), torch.inference_mode():
        torch.manual_seed(config.seed)
        module = config.spec.build(config)
        inputs = [x.to(device=device, dtype=dtype) for x in config.spec.inputs(config)]
        module = module.to(device=device, dtype=dtype).train(config.train)
        mask = build_mask(config, device)
        checkpoint()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        output, trace = module(*inputs, mask=mask, safe_softmax=config.safe_softmax, return_trace=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        compute = time.perf_counter() - t0
        checkpoint()
        rows = ~trace.mask.any(dim=-1)
        rows = rows.expand(config.batch, config.heads, config.seq_q)
        arrays = {name: _numpy(getattr(trace, name))
                  for name in ("q", "k", "v", "scores", "weights", "context", "mask")}
        # eval mode: dropped *is* weights, so share the array instead of copying it
        arrays["dropped"] = arrays["weights"] if trace.dropped is trace.weights else _numpy(trace.dropped)
        result = RunResult(
            config=config, output=_numpy(output), fully_masked_rows=_numpy(rows).copy(),
            device=str(device if device.type == "cpu" else torch.device("cuda", device.index or 0)),
            compute_time_s=compute, total_time_s=time.perf_counter() - started,
            notes=tuple(notes), **arrays,
        )
    return result
