"""Generation speed: tokens per second while every step's attention is recorded, against transformers' own
`generate` in the same process.

    python -m benchmarks.generation           # benchmarks/results-generation.json and a table on stdout
    python -m benchmarks.generation --quick   # 2 rounds
    python -m benchmarks.generation --tiny    # the smoke test's size

A SmolLM2-135M-shaped llama (30 layers, 9 heads, 3 KV heads, width 576, vocab 49152, random float32 weights
written with transformers), a prompt of 32 tokens, 64 tokens generated greedily. attnviz: core.run() with
config.generate = 64 (every step's weights and scores recorded through attnviz's kernel, then put together
into every layer's maps). The anchor: transformers' AutoModelForCausalLM.generate(do_sample=False,
min_new_tokens=max_new_tokens=64) with its default attention (sdpa), no attention returned. Rounds alternate
the two at the same torch thread count. Target: attnviz tokens/s / transformers tokens/s >= 0.6.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from .common import BENCH_DIR, code_state, load_average, log, machine_info, median
from .models import SMOLLM2, TINY_LLAMA, HfShape, text_of, write_hf_model

TARGET_RATIO = 0.6
PROMPT_TOKENS = 32
NEW_TOKENS = 64


def bench_generation(folder: Path, shape: HfShape, new_tokens: int, rounds: int) -> dict:
    import torch
    import transformers

    from attnviz.core import RunConfig, run

    config = RunConfig.for_variant("pretrained", model=str(folder), text=text_of(shape), generate=new_tokens)
    reference = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                                  local_files_only=True).eval()
    result = run(config)  # warm-up, and the prompt's ids for the reference
    prompt = torch.tensor([result.token_ids[:result.prompt_length].tolist()])

    def theirs() -> float:
        t0 = time.perf_counter()
        with torch.inference_mode():
            reference.generate(prompt, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                               pad_token_id=0)
        return time.perf_counter() - t0

    def ours() -> float:
        t0 = time.perf_counter()
        run(config)
        return time.perf_counter() - t0

    theirs()
    times: dict[str, list[float]] = {"attnviz_s": [], "transformers_s": []}
    loads = []
    for i in range(rounds):
        for name, measure in ((("attnviz_s", ours), ("transformers_s", theirs)) if i % 2 == 0 else
                              (("transformers_s", theirs), ("attnviz_s", ours))):
            times[name].append(measure())
        loads.append(load_average())
    ours_tps, theirs_tps = new_tokens / median(times["attnviz_s"]), new_tokens / median(times["transformers_s"])
    ratio = ours_tps / theirs_tps
    return {"prompt_tokens": int(result.prompt_length), "new_tokens": new_tokens, "rounds": rounds,
            "threads": torch.get_num_threads(), **times, "attnviz_tokens_per_s": ours_tps,
            "transformers_tokens_per_s": theirs_tps, "ratio": ratio, "target": TARGET_RATIO,
            "pass": ratio >= TARGET_RATIO, "load_average": loads,
            "reference_attention": reference.config._attn_implementation}


def table(result: dict) -> str:
    g = result["generation"]
    return "\n".join([
        f"generation: {g['new_tokens']} tokens after {g['prompt_tokens']}, {g['threads']} threads",
        f"  attnviz (every step recorded)  {g['attnviz_tokens_per_s']:7.1f} tokens/s",
        f"  transformers generate ({g['reference_attention']})  {g['transformers_tokens_per_s']:7.1f} tokens/s",
        f"  ratio {g['ratio']:.3f} (target >= {g['target']}) {'PASS' if g['pass'] else 'FAIL'}",
    ])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.generation", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 rounds instead of 5")
    p.add_argument("--tiny", action="store_true", help="a tiny model (the smoke test)")
    p.add_argument("--output", default=str(BENCH_DIR / "results-generation.json"))
    args = p.parse_args(argv)
    shape = HfShape(**{**(TINY_LLAMA if args.tiny else SMOLLM2).__dict__, "tokens": 8 if args.tiny else PROMPT_TOKENS})
    new_tokens = 4 if args.tiny else NEW_TOKENS
    with tempfile.TemporaryDirectory(prefix="attnviz-generation-") as tmp:
        folder = write_hf_model(shape, Path(tmp) / shape.name)
        log(f"generation on {shape.name}: {new_tokens} tokens after {shape.tokens}")
        result = {"schema": "attnviz-benchmarks-generation/1", "machine": machine_info(), "code": code_state(),
                  "generation": bench_generation(folder, shape, new_tokens, 1 if args.tiny else 2 if args.quick
                                                 else 5)}
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
