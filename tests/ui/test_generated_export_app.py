"""The window's Export of a generation marks what the model wrote as the window's maps do (blue labels, a dashed
line at the prompt's end, "14 prompt + 4 generated tokens"), and its NPZ opened again is marked in the window and
in its exports the same. The trained induction toy writes "ackm" after "pophijackmehij"."""

from __future__ import annotations

import re

from uihelpers import wait_shown

from attnviz.core import load_preset
from attnviz.style import GENERATED_INK
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
