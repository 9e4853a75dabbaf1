"""Export, clipboard and configuration files, driven through the real window."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PySide6.QtCore import QEvent, QKeyCombination, QObject, Qt
from PySide6.QtGui import QGuiApplication, QImage
from uihelpers import wait_shown

from attnviz import colormaps
from attnviz.core import RunConfig, load_config
from attnviz.ui.window.export_dialog import ExportDialog


def open_dialog(window, qtbot) -> ExportDialog:
    window.exportAction.trigger()  # the toolbar button, the File menu and Ctrl+E
    dialog = window.exportDialog
    assert dialog is not None and dialog.isVisible()
    return dialog


def run_export(dialog, qtbot, path, what="grid", scale=0):
    dialog.whatCombo.setCurrentIndex(dialog.whatCombo.findData(what))
    dialog.scaleSpin.setValue(scale)
    dialog.pathEdit.setText(str(path))
    with qtbot.waitSignal(dialog.sigFinished, timeout=20000) as blocker:
        dialog.exportButton.click()
    return blocker.args


def test_export_png_from_the_app(window, qtbot, tmp_path):
    qtbot.keyClick(window, Qt.Key_E, Qt.ControlModifier)
    dialog = window.exportDialog
    assert isinstance(dialog, ExportDialog) and dialog.isVisible()
    ok, path = run_export(dialog, qtbot, tmp_path / "grid.png", scale=10)
    assert ok, path
    image = QImage(path)
    assert not image.isNull() and image.width() > 2 * 16 * 10
    assert "Exported" in window.statusBar().currentMessage()


def test_export_one_head_png_has_the_masked_triangle(window, qtbot, tmp_path):
    dialog = open_dialog(window, qtbot)
    dialog.titleCheck.setChecked(False)
    dialog.barCheck.setChecked(False)
    dialog.labelsCheck.setChecked(False)
    dialog.headSpin.setValue(1)
    ok, path = run_export(dialog, qtbot, tmp_path / "head.png", what="head", scale=5)
    assert ok, path
    image = QImage(path).convertToFormat(QImage.Format_RGB888)
    assert (image.width(), image.height()) == (16 * 5, 16 * 5)
    masked = colormaps.lut("viridis")[colormaps.MASKED_INDEX][:3]
    for i in range(16):
        for j in range(16):
            c = image.pixelColor(j * 5 + 2, i * 5 + 2)
            is_masked = (c.red(), c.green(), c.blue()) == tuple(int(v) for v in masked)
            assert is_masked == (j > i), (i, j)


def test_export_svg_and_npz_from_the_app(window, qtbot, tmp_path):
    import xml.etree.ElementTree as ET

    ok, path = run_export(open_dialog(window, qtbot), qtbot, tmp_path / "grid.svg")
    assert ok, path
    root = ET.parse(path).getroot()
    images = [e for e in root.iter() if e.tag.endswith("image")]
    assert len(images) >= window.result.config.heads
    ok, path = run_export(open_dialog(window, qtbot), qtbot, tmp_path / "run.npz")
    assert ok, path
    data = np.load(path)
    np.testing.assert_array_equal(data["weights"], window.result.weights)
    np.testing.assert_array_equal(data["output"], window.result.output)
    assert RunConfig.from_json(str(data["config"])) == window.result.config


def test_export_failure_is_reported_and_keeps_the_old_file(window, qtbot, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    dialog = open_dialog(window, qtbot)
    ok, message = run_export(dialog, qtbot, blocker / "grid.png")
    assert not ok and "cannot write" in message
    assert dialog.isVisible() and message in dialog.messageLabel.text()
    ok, message = run_export(dialog, qtbot, tmp_path / "grid.bmp")
    assert not ok and ".bmp" in message
    assert not (tmp_path / "grid.bmp").exists()


def test_copy_image_to_clipboard(window, qtbot):
    QGuiApplication.clipboard().clear()
    qtbot.keyClick(window, Qt.Key_C, Qt.ControlModifier | Qt.ShiftModifier)
    qtbot.waitUntil(lambda: "Copied" in window.statusBar().currentMessage(), timeout=10000)
    image = QGuiApplication.clipboard().image()
    if image.isNull():
        pytest.skip("the offscreen platform keeps no clipboard image here")
    assert image.width() > 100 and image.height() > 100


def test_save_and_open_configuration(window, qtbot, tmp_path):
    window.panel.widgets["heads"].setValue(2)
    window.panel.widgets["seq_q"].setValue(9)
    wait_shown(qtbot, window)
    path = tmp_path / "run.json"
    window.save_config(str(path))
    doc = json.loads(path.read_text())
    assert doc["format"] == "attnviz-config"
    assert load_config(path) == window.result.config
    window.panel.set_config(RunConfig())
    wait_shown(qtbot, window)
    window.open_config(str(path))
    wait_shown(qtbot, window)
    assert window.result.config.heads == 2 and window.result.config.seq_q == 9


def test_a_scores_image_from_a_window_that_left_the_scores_out(window, qtbot, tmp_path):
    """The window's run keeps no scores unless a view draws them; the dialog's scores grid runs again for them
    (the same numbers as a run that kept them) instead of failing."""
    from attnviz.core import run
    from attnviz.export import ExportOptions, png_bytes

    assert "scores" not in window.result.stages
    ok, path = run_export(open_dialog(window, qtbot), qtbot, tmp_path / "scores.png", what="scores", scale=4)
    assert ok, path
    expected = png_bytes(run(window.result.config), ExportOptions.from_view(
        window.frames.options, what="scores", scale=4))
    assert (tmp_path / "scores.png").read_bytes() == expected


class ClaimsCtrlE(QObject):
    """What a line edit does on X11, where Ctrl+E is "end of line": it claims the key (accepts its
    ShortcutOverride), so no action of the window fires. Offscreen it does not: the claim is made here."""

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.ShortcutOverride and event.keyCombination() == QKeyCombination(
                Qt.ControlModifier, Qt.Key_E):
            event.accept()
        return False


def test_ctrl_e_exports_while_the_text_box_has_focus(window, qtbot):
    from attnviz.core import load_preset

    window.panel.set_config(load_preset("toy-induction"))
    wait_shown(qtbot, window)
    window.activateWindow()
    text = window.panel.widgets["text"]
    claim = ClaimsCtrlE(text)
    text.installEventFilter(claim)
    text.setFocus()
    text.setCursorPosition(0)
    qtbot.waitUntil(text.hasFocus, timeout=5000)
    qtbot.keyClick(text, Qt.Key_E, Qt.ControlModifier)
    qtbot.waitUntil(lambda: getattr(window, "exportDialog", None) is not None and window.exportDialog.isVisible(),
                    timeout=5000)
    window.exportDialog.close()
    text.selectAll()
    qtbot.keyClick(text, Qt.Key_C, Qt.ControlModifier)  # the edit keys stay the box's: copy copies the text
    assert QGuiApplication.clipboard().text() == text.text()
