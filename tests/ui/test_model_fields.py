"""The panel shows only the fields the model that ran reads: a decoder-only model has no decoder text or stack to
choose, a text model no image; an encoder-decoder keeps its decoder text and stack."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attnviz.core import RunConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # the tiny checkpoints' writers
from tiny import SENTENCE, make_llama, make_seq2seq  # noqa: E402


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    llama, t5 = tmp_path_factory.mktemp("llama"), tmp_path_factory.mktemp("t5")
    make_llama(llama)
    make_seq2seq(t5, "t5")
    return {"llama": llama, "t5": t5}


def shows(window, name: str) -> bool:
    return window.panel.rows.get(name, window.panel.widgets[name]).isVisibleTo(window.panel)


def run_model(window, qtbot, folder) -> None:
    config = RunConfig(variant="pretrained", model=str(folder), text=SENTENCE)
    window.panel.set_config(config)
    qtbot.waitUntil(lambda: window.shown_id == window.latest_id and window.result.source is not None
                    and window.result.config.model == str(folder), timeout=60000)


def test_a_decoder_only_model_hides_decoder_text_stack_and_image(window, qtbot, folders):
    window.panel.set_config(RunConfig(variant="pretrained", model=str(folders["llama"]), text=SENTENCE))
    assert shows(window, "decoder_text") and shows(window, "image")  # not known before it has run
    run_model(window, qtbot, folders["llama"])
    assert not shows(window, "decoder_text") and not shows(window, "stack") and not shows(window, "image")
    assert shows(window, "text") and shows(window, "layer")
    run_model(window, qtbot, folders["t5"])
    assert shows(window, "decoder_text") and shows(window, "stack") and not shows(window, "image")
