"""Opening a GGUF says how far it got on the busy bar: its tensors n / N, then its tokenizer, as the worker hears
them from the reader (core/progress.stage), for the newest request only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # the tiny checkpoints' writers
from tiny import SENTENCE, make_llama, write_llama_gguf  # noqa: E402

from attnviz.core import RunConfig  # noqa: E402


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    pytest.importorskip("gguf")
    folder = tmp_path_factory.mktemp("llama")
    make_llama(folder)
    path = folder / "tiny.gguf"
    write_llama_gguf(folder, path)
    return path


def test_a_gguf_s_tensors_and_tokenizer_show_on_the_busy_bar(window, qtbot, gguf_file):
    heard, shown = [], []
    window.worker.sigOpening.connect(lambda rid, step, done, total: heard.append((step, done, total)))
    real = window.busyIndicator.setFormat
    window.busyIndicator.setFormat = lambda text: shown.append(text) or real(text)
    window.panel.set_config(RunConfig(variant="pretrained", model=str(gguf_file), text=SENTENCE))
    qtbot.waitUntil(lambda: window.shown_id == window.latest_id and window.result.source is not None, timeout=60000)
    tensors = [(done, total) for step, done, total in heard if step == "tensors"]
    assert tensors and tensors[-1][0] == tensors[-1][1] > 1  # every tensor, the last one said
    assert any(text.startswith("opening: tensors ") for text in shown)
