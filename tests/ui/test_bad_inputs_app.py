"""Bad inputs in the app: a memory refusal of a padding run offers a fix that is valid for the mask;
replacing a read-only file asks first (saving a configuration and exporting)."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QMessageBox
from uihelpers import wait_shown

from attnviz.core import RunConfig

YES, NO = QMessageBox.StandardButton.Yes, QMessageBox.StandardButton.No


def answer_with(monkeypatch, answer) -> list:
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a[2]) or answer)
    return asked


def test_memory_quick_fix_of_a_padding_run_gives_a_valid_config(window, qtbot, monkeypatch):
    from attnviz.core.runs import device

    monkeypatch.setattr(device, "available_memory", lambda device: 64 << 20)
    config = RunConfig.for_variant("cross", mask="padding", kv_lengths=(3000, 2000), seq_q=3072, seq_kv=3072,
                                   pool="never",
                                   heads=8, batch=2)
    window.panel.set_config(config)
    qtbot.waitUntil(lambda: window.failed_id == window.latest_id, timeout=30000)
    assert "memory" in window.last_error and not window.last_error.startswith("kv_lengths")  # memory is to blame
    buttons = [window.panel.fixButtons.itemAt(i).widget() for i in range(window.panel.fixButtons.count())]
    assert buttons, "a quick fix is offered"
    buttons[0].click()
    wait_shown(qtbot, window, timeout=60000)
    fixed = window.result.config
    assert fixed.seq_q < 3072 and max(fixed.kv_lengths) <= fixed.seq_kv and window.last_error is None


@pytest.mark.parametrize("answer", [NO, YES])
def test_saving_over_a_read_only_file_asks_first(window, qtbot, tmp_path, monkeypatch, answer):
    target = tmp_path / "protected.json"
    target.write_text("old")
    target.chmod(0o444)
    asked = answer_with(monkeypatch, answer)
    monkeypatch.setattr("attnviz.ui.window.files.QFileDialog.getSaveFileName", lambda *a, **k: (str(target), ""))
    window.save_dialog()
    assert asked and "read-only" in asked[0]
    if answer == YES:
        qtbot.waitUntil(lambda: window.statusBar().currentMessage() == f"Saved {target}", timeout=20000)
        assert RunConfig.from_json(target.read_text()) == window.panel.config()
    else:
        assert target.read_text() == "old"


@pytest.mark.parametrize("answer", [NO, YES])
def test_exporting_over_a_read_only_file_asks_first(window, qtbot, tmp_path, monkeypatch, answer):
    target = tmp_path / "protected.png"
    target.write_bytes(b"old")
    target.chmod(0o444)
    asked = answer_with(monkeypatch, answer)
    window.exportAction.trigger()
    dialog = window.exportDialog
    dialog.pathEdit.setText(str(target))
    with qtbot.waitSignal(dialog.sigFinished, timeout=20000) as blocker:
        dialog.exportButton.click()
    ok, message = blocker.args
    assert asked and "read-only" in asked[0]
    assert ok == (answer == YES)
    if answer == YES:
        assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert target.read_bytes() == b"old" and "read-only" in message


@pytest.mark.parametrize("text, words", [
    ('{"format": "attnviz-config", "config": {"dropout": NaN}}', ("dropout", "finite")),
    (" ", ("is empty",)),
])
def test_opening_a_bad_configuration_names_the_file_and_keeps_the_panel(window, tmp_path, monkeypatch, text, words):
    path = tmp_path / "bad.json"
    path.write_text(text)
    before = window.panel.config()
    warned = []
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: warned.append(a[2]))
    monkeypatch.setattr("attnviz.ui.window.files.QFileDialog.getOpenFileName", lambda *a, **k: (str(path), ""))
    window.open_dialog()
    assert len(warned) == 1 and str(path) in warned[0] and all(w in warned[0] for w in words)
    assert window.panel.config() == before


def test_the_quick_fix_buttons_show_under_the_marked_field_in_the_scrolled_panel(window, qtbot):
    window.resize(1280, 800)
    window.panel.set_config(RunConfig.for_variant("causal"))
    wait_shown(qtbot, window)
    heads = window.panel.widgets["heads"]
    heads.setValue(5)  # 5 heads do not divide 64: "Use Heads = 4" and "= 8"
    qtbot.waitUntil(lambda: window.panel.fixButtons.count() == 2)
    buttons = [window.panel.fixButtons.itemAt(i).widget() for i in range(2)]
    qtbot.waitUntil(lambda: all(not b.visibleRegion().isEmpty() for b in buttons))  # scrolled into view, whole
    assert all(b.visibleRegion().boundingRect() == b.rect() for b in buttons)
    assert not heads.visibleRegion().isEmpty()  # the red field they fix is in view with them
    box = window.panel.errorBox.mapTo(window.panel, window.panel.errorBox.rect().topLeft()).y()
    field = heads.mapTo(window.panel, heads.rect().bottomLeft()).y()
    assert 0 <= box - field < 20 and not window.panel.errorLabel.visibleRegion().isEmpty()  # the message under it
    buttons[0].click()
    wait_shown(qtbot, window)
    assert window.result.config.heads == 4 and not window.panel.errorBox.isVisible()
