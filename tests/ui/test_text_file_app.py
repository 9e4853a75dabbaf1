"""File > Open text file…: a long UTF-8 text into the text box, the run following as for typing; the text
the CLI's --text-file reads; other files refused in one line with the box unchanged."""

from __future__ import annotations

import pytest
from uihelpers import wait_shown

from attnviz.cli_flags import text_file
from attnviz.core import RunConfig


@pytest.fixture
def toy(window, qtbot):
    window.panel.set_config(RunConfig.for_variant("toy-induction"))
    wait_shown(qtbot, window)
    return window


def test_opening_a_50000_character_text_file_puts_it_in_the_box(toy, qtbot, tmp_path, monkeypatch):
    text = ("abcdefgh" * 6250)[:49_999] + "\n"  # 50,000 characters of the toy's letters
    path = tmp_path / "long.txt"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setattr("attnviz.ui.window.files.QFileDialog.getOpenFileName", lambda *a, **k: (str(path), ""))
    file_menu = toy.menuBar().actions()[0].menu()
    assert toy.openTextAction.text() == "Open text file…" and toy.openTextAction in file_menu.actions()
    toy.openTextAction.trigger()
    field = toy.panel.widgets["text"]
    assert len(field.text()) == 50_000 and field.text() == text_file(str(path))  # what the CLI reads, whole
    assert toy.panel.config().text == text
    assert "50,000 characters" in toy.statusBar().currentMessage()
    qtbot.waitUntil(toy.is_settled, timeout=60000)  # the run follows as for typing: this toy reads 32 at most
    assert toy.failed_id == toy.latest_id and "1 to 32 characters" in toy.last_error
    assert toy.staleLabel.isVisibleTo(toy)  # the last maps stay, marked stale


@pytest.mark.parametrize("data, words", [(b"caf\xe9", "not UTF-8"), (None, "no such file")])
def test_a_file_that_is_not_utf8_text_is_refused_in_one_line(toy, tmp_path, data, words):
    path = tmp_path / "bad.txt"
    if data is not None:
        path.write_bytes(data)
    before = toy.panel.widgets["text"].text()
    assert not toy.open_text(str(path))
    message = toy.statusBar().currentMessage()
    assert words in message and str(path) in message and "\n" not in message
    assert toy.panel.widgets["text"].text() == before


def test_a_variant_without_text_says_so(window, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("hello", encoding="utf-8")
    assert not window.panel.config_applies("text")  # the default seed variant reads no text
    assert not window.open_text(str(path)) and "choose one first" in window.statusBar().currentMessage()
