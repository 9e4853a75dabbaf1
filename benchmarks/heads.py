"""What heads do: head_effects against one eager forward per head, in the same process.

    python -m benchmarks.heads            # benchmarks/results-heads.json and a table on stdout
    python -m benchmarks.heads --quick    # 3 rounds of the eager baseline's per-forward time, fewer heads timed
    python -m benchmarks.heads --tiny     # the smoke test's size

`head_effects`: attnviz.core.head_effects on a SmolLM2-135M-shaped llama (30 layers x 9 heads = 270 heads,
3 KV heads, width 576, vocab 49152, random float32 weights written with transformers) at 64 tokens: the drop
of every target's log-probability with each head zero-ablated. The anchor is what an ablation loop does
without batching: 270 plain forwards of transformers' eager AutoModelForCausalLM (attn_implementation="eager",
inference mode, logits of every position) on the same ids, each head's slice zeroed by a forward pre-hook on
its layer's o_proj. Target: head_effects / 270 eager forwards <= 1.2. Rounds alternate the two, at the same
torch thread count. With --quick the eager loop runs a tenth of the heads and its time is scaled by 10 (the
forwards are identical in cost); the entry says so.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .common import BENCH_DIR, code_state, load_average, log, machine_info, median
from .models import HfShape, text_of, written_model

TARGET_RATIO = 1.2
TOKENS = 64


def _eager_ablation_loop(model, ids, pairs, head_dim: int) -> float:
    """Seconds for one eager forward per (layer, head), that head's o_proj input slice zeroed."""
    import torch

    t0 = time.perf_counter()
    for layer, head in pairs:
        def zero(module, args, h=head):
            x = args[0].clone()
            x[..., h * head_dim:(h + 1) * head_dim] = 0
            return (x,)
        handle = model.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zero)
        with torch.inference_mode():
            model(input_ids=ids).logits  # noqa: B018 - the forward is the measurement
        handle.remove()
    return time.perf_counter() - t0


def bench_head_effects(folder: Path, shape: HfShape, rounds: int, fraction: float) -> dict:
    import torch
    import transformers

    from attnviz.core import RunConfig, head_effects
    from attnviz.models import load_model

    config = RunConfig.for_variant("pretrained", model=str(folder), text=text_of(shape))
    model = load_model(folder)
    ids = torch.tensor([model.encode(config.text).ids])
    eager = transformers.AutoModelForCausalLM.from_pretrained(
        str(folder), attn_implementation="eager", dtype=torch.float32, local_files_only=True).eval()
    pairs = [(layer, head) for layer in range(shape.layers) for head in range(shape.heads)]
    timed = pairs[::round(1 / fraction)] if fraction < 1 else pairs
    head_effects(config)  # warm-up: the model's first batched forward
    ours, theirs, loads = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        head_effects(config)
        ours.append(time.perf_counter() - t0)
        theirs.append(_eager_ablation_loop(eager, ids, timed, shape.width // shape.heads) * len(pairs) / len(timed))
        loads.append(load_average())
    ratio = median(ours) / median(theirs)
    return {"heads": len(pairs), "tokens": int(ids.shape[1]), "rounds": rounds, "threads": torch.get_num_threads(),
            "head_effects_s": ours, "eager_270_s": theirs, "eager_heads_timed": len(timed),
            "eager_extrapolated": len(timed) < len(pairs), "ratio": ratio, "target": TARGET_RATIO,
            "pass": ratio <= TARGET_RATIO, "load_average": loads}


def table(result: dict) -> str:
    e = result["head_effects"]
    scaled = f" (eager: {e['eager_heads_timed']} heads timed, scaled)" if e["eager_extrapolated"] else ""
    return "\n".join([
        f"head_effects, {e['heads']} heads at {e['tokens']} tokens, {e['threads']} threads{scaled}",
        f"  head_effects        {median(e['head_effects_s']):8.2f} s",
        f"  eager, one per head {median(e['eager_270_s']):8.2f} s",
        f"  ratio {e['ratio']:.3f} (target <= {e['target']}) {'PASS' if e['pass'] else 'FAIL'}",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.heads", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer rounds; the eager loop over a tenth of the heads")
    p.add_argument("--tiny", action="store_true", help="a tiny model (the smoke test)")
    p.add_argument("--output", default=str(BENCH_DIR / "results-heads.json"))
    args = p.parse_args(argv)
    with written_model(args.tiny, TOKENS, "attnviz-heads-") as (folder, shape):
        log(f"head_effects on {shape.name} at {shape.tokens} tokens")
        result = {"schema": "attnviz-benchmarks-heads/1", "machine": machine_info(), "code": code_state(),
                  "head_effects": bench_head_effects(folder, shape, 1 if args.tiny else 3 if args.quick else 5,
                                                     0.1 if args.quick else 1.0)}
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
