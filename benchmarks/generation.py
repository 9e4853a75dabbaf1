"""Generation speed: tokens per second while every step's attention is recorded, against transformers' own
`generate` in the same process, with the machine as it is ("idle") and with one more CPU-bound program
running ("busy").

    python -m benchmarks.generation                      # the SmolLM2-135M-shaped model below
    python -m benchmarks.generation --model SmolLM2.gguf --model gemma-3-270m.gguf   # real models
    python -m benchmarks.generation --quick              # 2 rounds a condition
    python -m benchmarks.generation --tiny               # the smoke test's size

Without --model: a SmolLM2-135M-shaped llama (30 layers, 9 heads, 3 KV heads, width 576, vocab 49152, random
float32 weights written with transformers) and a 32-token prompt. --model: a local folder or .gguf file (a
GGUF is read by both sides through transformers' GGUF support, dequantised to float32) and a short English
prompt. 30 tokens generated greedily. attnviz: core.run() with config.generate = 30 (every step's weights and
scores recorded through attnviz's kernel, then put together into every layer's maps). The anchor:
transformers' AutoModelForCausalLM.generate(do_sample=False, min_new_tokens=max_new_tokens=30) with its
default attention (sdpa), no attention returned. Both at the process's torch thread count (torch's default:
one per core). Rounds alternate which runs first; each condition records the load average and the cores
other programs used (/proc/stat). Target: attnviz tokens/s / transformers tokens/s >= 0.9 in both.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import BENCH_DIR, code_state, interleaved, load_average, log, machine_info, median, paired_ratios
from .models import SMOLLM2, TINY_LLAMA, HfShape, text_of, write_hf_model

TARGET_RATIO = 0.9
PROMPT_TOKENS = 32
NEW_TOKENS = 30
PROMPT = "The old lighthouse keeper climbed the stairs every evening, and on the last night of the year he saw"
BUSY_CODE = "while True: pass"


def _reference(path: Path):
    import torch
    import transformers

    source = (dict(pretrained_model_name_or_path=str(path.parent), gguf_file=path.name) if path.is_file()
              else dict(pretrained_model_name_or_path=str(path)))
    return transformers.AutoModelForCausalLM.from_pretrained(**source, dtype=torch.float32,
                                                             local_files_only=True).eval()


def _condition(contenders: dict, rounds: int, busy: bool, new_tokens: int) -> dict:
    """The contenders' rounds, with or without one more CPU-bound process running."""
    from attnviz.system import cpu_sample, others_cores

    proc = subprocess.Popen([sys.executable, "-c", BUSY_CODE]) if busy else None
    try:
        if proc is not None:
            time.sleep(0.5)
        load, before = load_average(), cpu_sample()
        times = interleaved(contenders, rounds, warmup=0)
        others = others_cores(before, cpu_sample())
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
    ours, theirs = times["attnviz"], times["transformers"]
    ratio = median(theirs) / median(ours)
    return {"attnviz_s": ours, "transformers_s": theirs, "attnviz_tokens_per_s": new_tokens / median(ours),
            "transformers_tokens_per_s": new_tokens / median(theirs), "ratio": ratio,
            "paired_ratios": paired_ratios(theirs, ours), "pass": ratio >= TARGET_RATIO,
            "load_average_before": load, "load_average_after": load_average(), "other_programs_cores": others}


def bench_generation(path: Path, text: str, new_tokens: int, rounds: int) -> dict:
    import torch

    from attnviz.core import RunConfig, run

    config = RunConfig.for_variant("pretrained", model=str(path), text=text, generate=new_tokens)
    reference = _reference(path)
    result = run(config)  # warm-up, and the prompt's ids for the reference
    prompt = torch.tensor([result.token_ids[:result.prompt_length].tolist()])

    def theirs():
        with torch.inference_mode():
            return reference.generate(prompt, do_sample=False, max_new_tokens=new_tokens,
                                      min_new_tokens=new_tokens, pad_token_id=0)

    contenders = {"attnviz": lambda: run(config), "transformers": theirs}
    same = theirs()[0].tolist() == result.token_ids.tolist()
    conditions = {name: _condition(contenders, rounds, name == "busy", new_tokens) for name in ("idle", "busy")}
    return {"model": path.name, "prompt_tokens": int(result.prompt_length), "new_tokens": new_tokens,
            "rounds": rounds, "threads": torch.get_num_threads(), "same_tokens": same,
            "reference_attention": reference.config._attn_implementation, **conditions}


def table(result: dict) -> str:
    g = result["generation"]
    lines = [f"generation: {g['new_tokens']} tokens greedily, every step recorded; target >= {g['target']}"]
    for run_ in g["runs"]:
        lines.append(f"  {run_['model']} ({run_['prompt_tokens']}-token prompt, {run_['threads']} threads, "
                     f"same tokens: {run_['same_tokens']})")
        for name in ("idle", "busy"):
            c = run_[name]
            lines.append(f"    {name:4}  attnviz {c['attnviz_tokens_per_s']:6.1f} tokens/s  transformers "
                         f"{c['transformers_tokens_per_s']:6.1f}  ratio {c['ratio']:.2f} "
                         f"{'PASS' if c['pass'] else 'FAIL'}  (load {c['load_average_before']}, other programs "
                         f"{c['other_programs_cores'] or 0:.1f} cores)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.generation", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", action="append", default=[], help="a local model folder or .gguf file (repeatable)")
    p.add_argument("--quick", action="store_true", help="2 rounds a condition instead of 5")
    p.add_argument("--tiny", action="store_true", help="a tiny model (the smoke test)")
    p.add_argument("--output", default=str(BENCH_DIR / "results-generation.json"))
    args = p.parse_args(argv)
    rounds = 1 if args.tiny else 2 if args.quick else 5
    new_tokens = 4 if args.tiny else NEW_TOKENS
    with tempfile.TemporaryDirectory(prefix="attnviz-generation-") as tmp:
        if args.model:
            models = [(Path(m), PROMPT) for m in args.model]
        else:
            shape = HfShape(**{**(TINY_LLAMA if args.tiny else SMOLLM2).__dict__,
                               "tokens": 8 if args.tiny else PROMPT_TOKENS})
            models = [(write_hf_model(shape, Path(tmp) / shape.name), text_of(shape))]
        runs = []
        for path, text in models:
            log(f"generation on {path.name}: {new_tokens} tokens, {rounds} rounds idle and busy")
            runs.append(bench_generation(path, text, new_tokens, rounds))
    ratios = [r[c]["ratio"] for r in runs for c in ("idle", "busy")]
    result = {"schema": "attnviz-benchmarks-generation/2", "machine": machine_info(), "code": code_state(),
              "generation": {"new_tokens": new_tokens, "target": TARGET_RATIO, "ratio": min(ratios),
                             "pass": min(ratios) >= TARGET_RATIO, "runs": runs}}
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
