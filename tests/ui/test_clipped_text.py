"""Text that must be read whole at 1280 x 800: a model's, a maps file's and a variant's name in the side panel, the
status line and a passing message (elided in the middle, whole in the tooltip), the tensor dock's note, the
statistics' column headers (the table's and the exported figure's), and token focus's hint before a query is
picked."""

from __future__ import annotations

import dataclasses

import pytest
from PySide6.QtCore import QEvent, QPoint, QRect, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtWidgets import QApplication, QLabel, QStyle, QStyleOptionComboBox, QToolTip
from uihelpers import CountingRun, open_dock, wait_shown

from attnviz.cli import main as cli_main
from attnviz.core import load_preset
from attnviz.core.analysis.stats import stat_label
from attnviz.export.items import Text
from attnviz.export.panels import stats_figure
from attnviz.export.qt import Metrics
from attnviz.ui import MainWindow
from attnviz.ui.panels.stats_view import SORT_MARK_PX

SIZE = (1280, 800)


def small_window(qtbot, path=None) -> MainWindow:
    w = MainWindow(compute=CountingRun(), open_path=None if path is None else str(path))
    qtbot.addWidget(w)
    w.resize(*SIZE)
    w.show()
    wait_shown(qtbot, w)
    return w


@pytest.fixture(scope="module")
def saved_maps(tmp_path_factory):
    """Every layer's maps of the induction toy, and its output for the layer it ran (layer 1)."""
    path = tmp_path_factory.mktemp("maps") / "toy-induction-maps.npz"
    assert cli_main(["render", "--variant", "toy-induction", "--all-layers", "-o", str(path)]) == 0
    return path


def edit_width(combo) -> int:
    option = QStyleOptionComboBox()
    combo.initStyleOption(option)
    return combo.style().subControlRect(QStyle.CC_ComboBox, option, QStyle.SC_ComboBoxEditField, combo).width()


def test_a_model_files_name_is_read_whole_in_the_model_folder_combo(qtbot, tmp_path):
    w = small_window(qtbot)
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"  # the model's name; the chooser never reads the file
    panel = w.panel
    panel.widgets["variant"].setCurrentIndex(panel.widgets["variant"].findData("pretrained"))
    chooser = panel.widgets["model"]
    chooser.set_folder(str(tmp_path / name), emit=False)
    qtbot.waitUntil(chooser.combo.isVisible)
    combo = chooser.combo
    assert combo.currentText() == name
    assert combo.fontMetrics().horizontalAdvance(name) <= edit_width(combo)  # room for the whole name (was ~95 px)
    assert combo.shown_text() == name and str(tmp_path / name) in combo.toolTip()
    assert chooser.openButton.isVisible() and panel.heads["model"].isVisible()  # Open… on the label's row
    panel.widgets["variant"].setCurrentIndex(panel.widgets["variant"].findData("causal"))
    qtbot.waitUntil(lambda: not combo.isVisible())
    assert not chooser.openButton.isVisible()  # the row's buttons hide with it
    w.close()


def test_the_maps_file_field_shows_the_files_name(qtbot, saved_maps):
    w = small_window(qtbot, saved_maps)
    label = w.panel.widgets["maps"].fileLabel
    assert label.isVisible() and label.text() == saved_maps.name
    assert QLabel.text(label) == saved_maps.name  # painted whole (it read "to…pz", and "m…z" before that)
    assert label.toolTip() == str(saved_maps)
    w.close()


def test_every_variants_name_is_read_whole_in_the_variant_combo(qtbot):
    w = small_window(qtbot)
    combo = w.panel.widgets["variant"]
    assert w.panel.labels["variant"].isVisible()
    for i in range(combo.count()):  # "Pretrained model (folder or .gguf)", "Maps from a file (.npz)", ...
        assert combo.fontMetrics().horizontalAdvance(combo.itemText(i)) <= edit_width(combo), combo.itemText(i)
    w.close()


def test_the_tensor_docks_note_wraps_inside_the_dock(qtbot, saved_maps):
    w = small_window(qtbot, saved_maps)
    w.panel.widgets["layer"].setValue(0)  # the file holds this layer's maps only: no output tensor
    qtbot.waitUntil(lambda: w.is_settled() and w.result.config.layer == 0)
    view, note = w.outputView, w.outputView.note
    qtbot.waitUntil(note.isVisible)
    assert "no output" in note.text() and "open the model itself to see it" in note.text()
    assert note.wordWrap() and note.geometry().right() <= view.width() and note.height() >= note.heightForWidth(
        note.width())  # every line inside the view (as a one-line title its end was cut at the dock's edge)
    w.panel.widgets["layer"].setValue(1)  # the layer it ran: its output, no note
    qtbot.waitUntil(lambda: w.is_settled() and w.result.config.layer == 1)
    assert not note.isVisible() and w.frames.tensor is not None
    w.close()


def tooltip_at(widget, pos: QPoint) -> str:
    QApplication.sendEvent(widget, QHelpEvent(QEvent.ToolTip, pos, widget.mapToGlobal(pos)))
    return QToolTip.text() if QToolTip.isVisible() else ""


class NotedRun(CountingRun):
    """The real engine, its results carrying long notes (as a GGUF's run says how its weights were read)."""

    NOTES = ("gguf Q4_1 weights dequantised to float32", "the tokenizer's chat template was not applied to this text",
             "maps max-pooled 8,192 → 1,024 inside the kernel (statistics exact)")

    def __call__(self, config, cancel=None, **kwargs):
        return dataclasses.replace(super().__call__(config, cancel, **kwargs), notes=self.NOTES)


def test_a_long_status_line_keeps_its_start_and_end_and_its_tooltip_holds_it_whole(qtbot):
    w = MainWindow(compute=NotedRun())
    qtbot.addWidget(w)
    w.resize(*SIZE)
    w.show()
    wait_shown(qtbot, w)
    label = w.statusLabel
    whole = label.text()
    assert whole.endswith(NotedRun.NOTES[1]) and label.fontMetrics().horizontalAdvance(whole) > label.width()
    assert w.width() == SIZE[0]  # the long line never widened the window
    shown = QLabel.text(label)  # what is painted; text() is the whole line
    head, cut, tail = shown.partition("…")
    assert cut and head and tail and whole.startswith(head) and whole.endswith(tail)  # its end stays in sight
    assert label.fontMetrics().horizontalAdvance(shown) <= label.width()
    assert label.toolTip() == whole == tooltip_at(label, QPoint(5, 5))
    w.close()


def test_a_long_passing_message_is_elided_in_the_middle_and_whole_in_the_tooltip(qtbot, tmp_path):
    w = small_window(qtbot)
    w.panel.widgets["variant"].setCurrentIndex(w.panel.widgets["variant"].findData("toy-induction"))  # reads text
    wait_shown(qtbot, w)
    folder = tmp_path.joinpath(*(f"a-folder-with-a-long-name-{i}" for i in range(6)))
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_bytes(b"\xff\xfe not UTF-8")
    assert not w.open_text(str(folder / "notes.txt"))  # "Not opened: PATH: not UTF-8 text ... Fix: ..."
    bar = w.statusBar()
    message = bar.currentMessage()
    assert message.startswith("Not opened:") and message.endswith("Fix: save it as UTF-8")
    shown = bar.shown_message()
    head, cut, tail = shown.partition("…")
    assert cut and message.startswith(head) and message.endswith(tail) and "Fix:" in tail  # the fix stays in sight
    assert bar.fontMetrics().horizontalAdvance(shown) <= bar.message_rect().width()
    assert tooltip_at(bar, QPoint(10, bar.height() // 2)) == message
    w.close()


def test_a_message_said_before_the_window_showed_is_not_drawn_over_the_status_text(qtbot, saved_maps):
    w = small_window(qtbot, saved_maps)  # "Opened FILE: ..." is said while the window is built, before it shows
    bar = w.statusBar()
    assert bar.currentMessage().startswith(f"Opened {saved_maps.name}")
    assert not w.statusLabel.isVisible()  # the message alone on the line (both were drawn, one over the other)
    bar.clearMessage()
    assert w.statusLabel.isVisible() and w.statusLabel.text()
    w.close()


def probe_statistics(qtbot) -> MainWindow:
    """The window at 1280 x 800 with the induction toy's statistics open: 2 layers (the overview beside the
    table) and the probe's head types as two more columns."""
    w = small_window(qtbot)
    w.panel.set_config(load_preset("toy-induction"))
    wait_shown(qtbot, w)
    open_dock(w, qtbot, "statsDock")
    qtbot.waitUntil(lambda: w.explain.stats.frames is not None and "induction" in w.explain.stats.frames.columns)
    return w


def test_the_statistics_figure_writes_the_probe_column_headers_whole(qtbot):
    w = probe_statistics(qtbot)
    frames = w.explain.stats.frames
    lay = stats_figure(w.result, frames)
    headers = [item for item in lay.items if isinstance(item, Text) and item.rotated]
    assert [h.text for h in headers] == [stat_label(n) for n in frames.columns]
    assert {"duplicate token", "induction", "previous token"} <= {h.text for h in headers}  # was "duplicate tok…"
    m = Metrics()
    assert all(h.y - m.width(h.text, h.px) >= 0 for h in headers)  # each stands inside the figure, under the title
    w.close()


def test_the_statistics_table_shows_every_column_and_its_whole_header(qtbot):
    w = probe_statistics(qtbot)
    stats = w.explain.stats
    table, header = stats.table, stats.table.horizontalHeader()
    texts = [stats.model.horizontalHeaderItem(c).text() for c in range(stats.model.columnCount())]
    assert {"duplicate token", "induction"} <= set(texts)  # named as the overview's list and the figure name them
    assert "earlier copies" in stats.model.horizontalHeaderItem(texts.index("duplicate token")).toolTip()
    assert stats.overview.isVisible() and header.length() <= table.viewport().width()  # every column in sight
    margin = header.style().pixelMetric(QStyle.PM_HeaderMargin, None, header)
    fm = header.fontMetrics()
    for c, text in enumerate(texts):  # painted word-wrapped in the section: at most its two lines, none cut
        room = QRect(0, 0, header.sectionSize(c) - 2 * margin - SORT_MARK_PX, 1000)
        used = fm.boundingRect(room, Qt.AlignCenter | Qt.TextWordWrap, text)
        assert used.width() <= room.width() and used.height() <= header.height() - 2 * margin, text
    w.close()


def test_token_focus_shows_a_hint_and_no_axes_before_a_query_is_picked(qtbot):
    w = small_window(qtbot)
    open_dock(w, qtbot, "focusDock")
    focus = w.explain.focus
    plot = focus.plot.getPlotItem()
    qtbot.waitUntil(focus.hint.isVisible)
    assert focus.hint.text().startswith("Click a query token") and focus.hint.wordWrap()
    assert focus.hint.width() == focus.plot.width() and focus.hint.height() >= focus.hint.heightForWidth(
        focus.hint.width())  # every line of it inside the plot
    assert not plot.getAxis("left").isVisible() and not plot.getAxis("bottom").isVisible()
    assert not focus.legend.isVisible()
    focus.toggle(2)  # a query: its lines over the keys, on axes, and no hint
    qtbot.waitUntil(lambda: focus.frames is not None and focus.frames.row == 2)
    assert not focus.hint.isVisible() and plot.getAxis("left").isVisible() and plot.getAxis("bottom").isVisible()
    assert focus.legend.isVisible() and all(c.isVisible() for c in focus.curves)
    focus.toggle(2)  # cleared: the hint again
    assert focus.hint.isVisible() and not plot.getAxis("bottom").isVisible()
    assert not any(c.isVisible() for c in focus.curves)
    w.close()
