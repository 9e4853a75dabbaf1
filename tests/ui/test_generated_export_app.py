"""The window's Export of a generation marks what the model wrote as the window's maps do (blue labels, a dashed
line at the prompt's end, "14 prompt + 4 generated tokens"), and its NPZ opened again is marked in the window and
in its exports the same. At a step of the Step slider, Export and Copy image draw what the window shows (the later
rows faded, the step's row framed, the step in the title); with nothing to step through the slider hides. The
trained induction toy writes "ackm" after "pophijackmehij"."""

from __future__ import annotations

import re

from PySide6.QtGui import QGuiApplication, QImage
from PySide6.QtWidgets import QLabel
from uihelpers import wait_shown

from attnviz.core import load_preset
from attnviz.core.runs.generation import at_step
from attnviz.core.runs.saved import read_maps
from attnviz.export import ExportOptions, compose_image, export, layout
from attnviz.style import GENERATED_INK, ROW_MARK
from attnviz.ui import MainWindow

PROMPT = "pophijackmehij"


def export_from_dialog(window, qtbot, path) -> None:
    window.exportAction.trigger()
    dialog = window.exportDialog
    dialog.pathEdit.setText(str(path))
    with qtbot.waitSignal(dialog.sigFinished, timeout=20000) as blocker:
        dialog.exportButton.click()
    assert blocker.args[0], blocker.args


def marks(svg: str) -> tuple[list[str], int]:
    """(the labels drawn in blue, the number of dashed blue lines) of an exported SVG."""
    blue = re.findall(rf'<text [^>]*fill="{GENERATED_INK}"[^>]*>([^<]*)</text>', svg)
    return sorted(blue), len(re.findall(rf'<line [^>]*stroke="{GENERATED_INK}"[^>]*stroke-dasharray=', svg))


def test_the_export_of_a_generation_and_its_npz_opened_again_mark_the_generated_tokens(qtbot, tmp_path):
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(1200, 800)
    w.show()
    wait_shown(qtbot, w)
    w.panel.set_config(load_preset("toy-induction").replace(text=PROMPT))
    wait_shown(qtbot, w)
    w.panel.widgets["generate"].setValue(4)
    wait_shown(qtbot, w)
    assert w.result.prompt_length == 14 and w.headGrid.mosaic.prompt_length == 14
    assert w.statusLabel.text().startswith("14 prompt + 4 generated tokens · ")

    export_from_dialog(w, qtbot, tmp_path / "gen.svg")
    export_from_dialog(w, qtbot, tmp_path / "gen.npz")
    svg = (tmp_path / "gen.svg").read_text()
    heads = w.result.config.heads
    assert marks(svg) == (sorted("ackm" * 2 * heads), 2 * heads)  # every head's labels, both axes, and lines
    assert "14 prompt + 4 generated tokens" in svg

    assert w.open_path(str(tmp_path / "gen.npz"))
    wait_shown(qtbot, w)
    assert w.result.opened and w.result.prompt_length == 14
    assert w.headGrid.mosaic.prompt_length == 14  # the window marks the opened file's generated tokens
    export_from_dialog(w, qtbot, tmp_path / "again.svg")
    again = (tmp_path / "again.svg").read_text()
    assert marks(again) == marks(svg) and "14 prompt + 4 generated tokens" in again
    w.close()


def shown_generation(qtbot, count: int = 4) -> MainWindow:
    w = MainWindow()
    qtbot.addWidget(w)
    w.resize(1200, 800)
    w.show()
    wait_shown(qtbot, w)
    w.panel.set_config(load_preset("toy-induction").replace(text=PROMPT, generate=count))
    wait_shown(qtbot, w)
    return w


def window_cell(w, image: QImage, head: int, row: int, col: int) -> tuple[int, int, int]:
    """The colour at the centre of a cell of a head's map in a grab of the window's head grid."""
    grid, mosaic = w.headGrid, w.headGrid.mosaic
    rows, cols = mosaic.map_shape
    box = grid.mapFromScene(mosaic.mapRectToScene(mosaic.rects[grid.tile_heads.index(head)])).boundingRect()
    x = box.left() + (col + 0.5) * box.width() / cols
    y = box.top() + (row + 0.5) * box.height() / rows
    c = image.pixelColor(round(x * image.devicePixelRatio()), round(y * image.devicePixelRatio()))
    return c.red(), c.green(), c.blue()


def export_cell(image: QImage, lay, head: int, row: int, col: int) -> tuple[int, int, int]:
    ix, iy, _, _ = lay.tiles[head]
    c = image.pixelColor(int(ix + (col + 0.5) * lay.scale), int(iy + (row + 0.5) * lay.scale))
    return c.red(), c.green(), c.blue()


def test_exports_at_a_step_draw_what_the_window_shows_at_it(qtbot, tmp_path):
    w = shown_generation(qtbot)
    w.stepSlider.setValue(2)  # 'c' at 15: rows 16 and 17 faded in the window
    assert w.headGrid.mosaic.step_row == 15
    export_from_dialog(w, qtbot, tmp_path / "step.svg")
    svg = (tmp_path / "step.svg").read_text()
    assert "14 prompt + 2 of 4 generated tokens · step 2" in svg
    assert len(re.findall(rf'<line [^>]*stroke="{ROW_MARK}"', svg)) == 4 * w.result.config.heads

    export_from_dialog(w, qtbot, tmp_path / "step.png")
    exported = QImage(str(tmp_path / "step.png"))
    options = ExportOptions.from_view(w.frames.options, step=2)
    assert exported == compose_image(w.result, options).convertToFormat(exported.format())
    grab = w.headGrid.grab().toImage()
    lay, plain = layout(w.result, options), compose_image(w.result, ExportOptions.from_view(w.frames.options))
    for head in range(w.result.config.heads):
        for row, col in [(5, 2), (13, 12), (15, 3), (16, 1), (17, 3), (17, 16)]:  # before, at and after the step
            shown, drawn = window_cell(w, grab, head, row, col), export_cell(exported, lay, head, row, col)
            assert max(abs(a - b) for a, b in zip(shown, drawn)) <= 2, (head, row, col, shown, drawn)
        assert export_cell(exported, lay, head, 17, 3) != export_cell(plain, lay, head, 17, 3)  # faded
    grab.save(str(tmp_path / "window-step2.png"))

    QGuiApplication.clipboard().clear()
    w.copyAction.trigger()  # Copy image: the same figure
    qtbot.waitUntil(lambda: "Copied" in w.statusBar().currentMessage(), timeout=20000)
    copied = QGuiApplication.clipboard().image()
    if not copied.isNull():  # the offscreen platform may keep no clipboard image
        assert copied.convertToFormat(exported.format()) == exported
    w.close()


def test_the_export_dialog_says_what_the_step_does_and_names_the_file_by_it(qtbot, tmp_path):
    w = shown_generation(qtbot)
    w.exportAction.trigger()
    assert w.exportDialog.findChild(QLabel, "exportStepLabel") is None  # every token: no step
    w.exportDialog.reject()
    w.stepSlider.setValue(3)
    w.exportAction.trigger()
    dialog = w.exportDialog
    note = dialog.findChild(QLabel, "exportStepLabel")
    assert "3 of 4 generated tokens" in note.text() and "first 17 tokens" in note.text()
    assert dialog.pathEdit.text().endswith("-step3.png") and dialog.options().step == 3
    dialog.pathEdit.setText(str(tmp_path / "step.npz"))
    with qtbot.waitSignal(dialog.sigFinished, timeout=20000) as blocker:
        dialog.exportButton.click()
    assert blocker.args[0], blocker.args
    assert read_maps(tmp_path / "step.npz").generated_count == 3  # the maps as they stood
    w.close()


def test_the_step_slider_hides_where_there_is_nothing_to_step_through(qtbot, tmp_path):
    w = shown_generation(qtbot)
    assert w.stepSlider.isVisible() and w.steps.label.isVisible()
    export(at_step(w.result, 0), tmp_path / "prompt.npz")  # cut back to its prompt: 0 generated
    row_width = w.stepSlider.parentWidget().width()
    assert w.open_path(str(tmp_path / "prompt.npz"))
    wait_shown(qtbot, w)
    assert w.result.prompt_length == 14 and w.result.generated_count == 0
    assert not w.stepSlider.isVisible() and not w.steps.label.isVisible() and not w.steps.caption.isVisible()
    assert w.stepSlider.parentWidget().width() == row_width
    w.panel.set_config(load_preset("toy-induction").replace(text=PROMPT, generate=2))
    wait_shown(qtbot, w)
    assert w.stepSlider.isVisible() and w.stepSlider.isEnabled() and w.stepSlider.maximum() == 2
    w.close()
