"""The forward's memory estimate counts the float32 slice a compact weight makes per call (models/compact.py:
at most CHUNK_VALUES values, 64 MB), against a hand count on a tiny GGUF kept as its blocks, and against the
largest slice a run really made."""

from __future__ import annotations

import dataclasses

import pytest
from tiny import SENTENCE, write_llama_gguf

from attnviz.core import RunConfig, run
from attnviz.core.runs.memory import forward_bytes
from attnviz.models import compact
from attnviz.models.compact import storage_sizes
from attnviz.models.gguf_files import gguf_header
from attnviz.models.loader import clear_cache, load_model

pytest.importorskip("gguf")
KEEP = frozenset({"weights", "scores"})


@pytest.fixture(scope="module")
def q4_gguf(tiny_models, tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama-q4.gguf"
    write_llama_gguf(tiny_models("llama"), path, qtype="Q4_0")
    return path


def _opened(path, budget=None):
    clear_cache()  # a model opened under another budget (or chunk size) is not the one asked for
    return load_model(path, memory_budget=budget)


def _slices(monkeypatch) -> list[int]:
    """The float32 bytes of every slice compact weights make from now on."""
    made: list[int] = []
    rows = compact.CompactWeight.rows

    def counted(self, index):
        out = rows(self, index)
        made.append(out.numel() * out.element_size())
        return out

    monkeypatch.setattr(compact.CompactWeight, "rows", counted)
    return made


@pytest.mark.parametrize("chunk", [None, 1000])
def test_the_forward_estimate_counts_the_per_call_slice(q4_gguf, monkeypatch, chunk):
    # the tiny llama: width 32, MLP 48, 4 heads of 8 with 2 kv heads, an untied output head of the vocabulary
    if chunk is not None:
        monkeypatch.setattr(compact, "CHUNK_VALUES", chunk)
    model = _opened(q4_gguf, storage_sizes(gguf_header(q4_gguf))["blocks"])
    info = model.info
    vocab = info.vocab_size
    # every matrix in one slice: the largest is the output head, vocab x 32 floats; 1000 values a slice:
    # 1000 // 32 = 31 rows of 32 (q, o, gate, up, the head), k and v 16 rows of 32, down 20 rows of 48
    by_hand = vocab * 32 * 4 if chunk is None else max(31 * 32, 16 * 32, 20 * 48) * 4
    assert info.weight_piece == by_hand
    assert forward_bytes(info, 12, KEEP) - forward_bytes(dataclasses.replace(info, weight_piece=0), 12, KEEP) \
        == by_hand
    assert forward_bytes(info, 12, KEEP, pooled=True) - \
        forward_bytes(dataclasses.replace(info, weight_piece=0), 12, KEEP, pooled=True) == by_hand
    made = _slices(monkeypatch)
    result = run(RunConfig(variant="pretrained", model=str(q4_gguf), text=SENTENCE))
    assert result.source.outputs.predictions() is not None  # the output head ran too
    clear_cache()
    embedding = len(result.tokens) * 32 * 4  # the rows looked up: counted with the tokens
    assert max(m for m in made if m != embedding) == by_hand


def test_float32_weights_make_no_slice(q4_gguf):
    model = _opened(q4_gguf)
    clear_cache()
    assert model.info.weight_piece == 0
    assert not any(isinstance(m, compact.CompactLinear) for m in model.module.modules())


def test_a_budget_that_holds_the_forward_but_not_the_slice_is_refused(q4_gguf):
    from attnviz.core.runs.backed import check_forward_memory
    from attnviz.core.runs.device import MemoryBudgetError

    info = _opened(q4_gguf, storage_sizes(gguf_header(q4_gguf))["blocks"]).info
    clear_cache()
    config = RunConfig(variant="pretrained", model=str(q4_gguf), text=SENTENCE)
    without = dataclasses.replace(info, weight_piece=0)
    budget = forward_bytes(without, 12, KEEP) + info.weight_piece // 2
    check_forward_memory(config, without, 12, KEEP, budget)  # fits, were the slice not counted
    with pytest.raises(MemoryBudgetError, match="every layer's maps at 12 tokens need"):
        check_forward_memory(config, info, 12, KEEP, budget)
