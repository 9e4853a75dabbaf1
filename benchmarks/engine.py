"""1. Engine: attnviz's traced forward and core.run() against seed 002's plain forward.

Same weights (load_state_dict), same input and mask, float32 on the CPU, all under
torch.inference_mode (run() uses it internally), interleaved round by round.

Contenders, timed side by side:
  seed_forward    seed module(x, mask)                                  the baseline
  traced_forward  attnviz CausalSelfAttention(x, mask, return_trace=True)
  run             attnviz.core.run(config): build + init + inputs + traced forward + NumPy views
  seed_script     what run() replaces: manual_seed, build the seed module, randn, generate_mask, forward
  variant_plain   the same module with GQA (kv_heads = heads / 4) and RoPE, untraced
  variant_traced  that module traced (return_trace=True): the default stages
"""

from __future__ import annotations

import torch

from .common import Size, interleaved, median, paired_ratios, summary
from .seeds_reference import CausalSelfAttention as SeedCausalSelfAttention
from .seeds_reference import generate_mask as seed_generate_mask

TARGET_RATIO = 1.15  # traced forward at most 1.15x the seed's plain forward (at M, L, XL)
VARIANT_TARGET = 1.15  # GQA + RoPE traced forward at most 1.15x the same module's plain forward (M, L)


def bench_engine(size: Size, repeats: int, warmup: int = 1) -> dict:
    from attnviz.core import CausalSelfAttention, run

    torch.manual_seed(0)
    seed = SeedCausalSelfAttention(size.width, size.heads).eval()
    ours = CausalSelfAttention(size.width, size.heads).eval()
    ours.load_state_dict(seed.state_dict())
    x = torch.randn(size.batch, size.seq, size.width)
    mask = seed_generate_mask(x, causal=True)
    config = size.config()

    with torch.inference_mode():  # parity: same weights and inputs give the same output
        ref = seed(x, mask)
        out, trace = ours(x, mask, return_trace=True)
        parity = float((ref - out).abs().max())
        weights_finite = bool(torch.isfinite(trace.weights).all())
        del out, trace, ref

    def seed_forward():
        with torch.inference_mode():
            return seed(x, mask)

    def traced_forward():
        with torch.inference_mode():
            return ours(x, mask, return_trace=True)

    def run_path():
        return run(config)

    from attnviz.core.kernel.mods import AttentionOptions

    variant = CausalSelfAttention(size.width, size.heads, kv_heads=max(size.heads // 4, 1),
                                  attn=AttentionOptions(position="rope")).eval()

    def variant_plain():
        with torch.inference_mode():
            return variant(x, mask)

    def variant_traced():
        with torch.inference_mode():
            return variant(x, mask, return_trace=True)

    def seed_script():
        with torch.inference_mode():
            torch.manual_seed(config.seed)
            model = SeedCausalSelfAttention(size.width, size.heads)
            xs = torch.randn(size.batch, size.seq, size.width)
            return model(xs, seed_generate_mask(xs, causal=True))

    times = interleaved({"seed_forward": seed_forward, "traced_forward": traced_forward,
                         "run": run_path, "seed_script": seed_script,
                         "variant_plain": variant_plain, "variant_traced": variant_traced}, repeats, warmup)
    variant_ratio = paired_ratios(times["variant_traced"], times["variant_plain"])
    traced_ratio = paired_ratios(times["traced_forward"], times["seed_forward"])
    run_vs_script = paired_ratios(times["run"], times["seed_script"])
    run_vs_forward = paired_ratios(times["run"], times["seed_forward"])
    result = {
        "status": "ok",
        "repeats": repeats,
        "warmup": warmup,
        "median_s": {name: median(ts) for name, ts in times.items()},
        "min_s": {name: min(ts) for name, ts in times.items()},  # robust to other load on the machine
        "samples_s": times,
        "ratio_traced_vs_seed": median(traced_ratio),
        "ratio_traced_vs_seed_summary": summary(traced_ratio),
        "ratio_run_vs_seed_script": median(run_vs_script),
        "ratio_run_vs_seed_forward": median(run_vs_forward),
        "ratio_variant_traced_vs_plain": median(variant_ratio),
        "ratio_variant_traced_vs_plain_summary": summary(variant_ratio),
        "variant_target": f"GQA (kv_heads = heads/4) + RoPE: traced / plain forward <= {VARIANT_TARGET} (at M, L)",
        "parity_max_abs_diff": parity,
        "weights_finite": weights_finite,
        "torch_threads": torch.get_num_threads(),
        "target": f"traced_forward / seed_forward <= {TARGET_RATIO} (at M, L, XL)",
    }
    if size.name in ("M", "L", "XL"):
        result["pass"] = result["ratio_traced_vs_seed"] <= TARGET_RATIO
    if size.name in ("M", "L"):
        result["variant_pass"] = result["ratio_variant_traced_vs_plain"] <= VARIANT_TARGET
    return result
