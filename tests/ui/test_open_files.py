"""Opening what people have in the window: `attnviz PATH` (MainWindow(open_path=...)), exported maps (.npz) shown
as saved with no recompute, File > Open Recent, and drops onto the window."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from PySide6.QtCore import QSettings
from uihelpers import CountingRun, drop, wait_shown

from attnviz.cli import main as cli_main
from attnviz.core import RunConfig
from attnviz.ui import MainWindow
from attnviz.ui.window.opening import RECENT_COUNT


def open_window(qtbot, path=None, settings=None, compute=None):
    w = MainWindow(settings=settings, compute=compute or CountingRun(), open_path=None if path is None else str(path))
    qtbot.addWidget(w)
    w.resize(1200, 800)
    w.show()
    wait_shown(qtbot, w)
    return w


def model_folder(folder):
    """A folder that is a model by its files' names (what is checked before the panel takes it)."""
    folder.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (folder / name).write_text("{}")
    return folder


def bad_models(tmp_path):
    """An empty .gguf, a text file named .gguf, an empty folder, and what each is refused for."""
    (tmp_path / "empty.gguf").write_bytes(b"")
    (tmp_path / "notgguf.gguf").write_text("hello, not a model\n")
    (tmp_path / "emptydir").mkdir()
    return {tmp_path / "empty.gguf": "the file is empty (0 bytes)", tmp_path / "notgguf.gguf": "not a GGUF file",
            tmp_path / "emptydir": "not a model folder: it has no config.json"}


def rendered(tmp_path, name, *flags):
    path = tmp_path / name
    assert cli_main(["render", *flags, "-o", str(path)]) == 0
    return path


def test_an_exported_npz_opens_as_saved_with_nothing_computed(qtbot, tmp_path):
    npz = rendered(tmp_path, "toy.npz", "--variant", "toy-induction", "--all-layers")
    compute = CountingRun()
    w = open_window(qtbot, npz, compute=compute)
    saved = np.load(npz)
    assert w.panel.config().variant == "maps"
    assert w.result.opened == str(npz)
    assert np.array_equal(w.result.weights, saved["weights"])  # the file's arrays, not a new forward
    assert w.result.tokens == tuple(saved["tokens"])
    assert w.result.config.variant == "toy-induction"  # the run it was saved from, for titles and shapes
    assert all(c.variant == "maps" for c in compute.calls)  # no toy was run
    w.close()


def test_another_layer_of_an_all_layers_npz_and_a_stage_the_file_lacks(qtbot, tmp_path):
    npz = rendered(tmp_path, "toy.npz", "--variant", "toy-induction", "--all-layers")
    w = open_window(qtbot, npz)
    layer = w.panel.widgets["layer"]
    other = 1 - layer.value()
    layer.setValue(other)
    qtbot.waitUntil(lambda: w.shown_id == w.latest_id and w.result.config.layer == other, timeout=15000)
    assert np.array_equal(w.result.weights, np.load(npz)["layer_weights"][other][None])
    w.viewCombo.setCurrentIndex(w.viewCombo.findData("scores"))
    qtbot.waitUntil(lambda: w.failed_id == w.latest_id, timeout=15000)
    assert "holds no scores" in w.last_error and "maps only" in w.last_error
    assert np.array_equal(w.result.weights, np.load(npz)["layer_weights"][other][None])  # the last good maps stay
    w.close()


def test_the_window_exports_an_opened_npz_as_the_cli_drew_the_run(qtbot, tmp_path):
    from attnviz.ui.window.export_dialog import ExportDialog

    npz = rendered(tmp_path, "seed.npz", "--preset", "seed000-demo")
    w = open_window(qtbot, npz)
    scale = w.scaleCombo.currentData()  # the window's default scale for the run (the CLI's is linear)
    png = rendered(tmp_path, "seed.png", "--preset", "seed000-demo", "--scale-mode", scale)
    w.exportAction.trigger()
    dialog = w.exportDialog
    assert isinstance(dialog, ExportDialog)
    dialog.pathEdit.setText(str(tmp_path / "again.png"))
    with qtbot.waitSignal(dialog.sigFinished, timeout=20000) as blocker:
        dialog.exportButton.click()
    assert blocker.args[0], blocker.args
    assert (tmp_path / "again.png").read_bytes() == png.read_bytes()
    w.close()


def test_a_damaged_npz_is_one_line_and_the_last_maps_stay(qtbot, tmp_path):
    w = open_window(qtbot)
    before = w.result
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip archive")
    assert not w.open_path(str(bad))
    message = w.statusBar().currentMessage()
    assert "bad.npz is not an NPZ archive" in message and "Fix:" in message
    assert w.result is before
    assert not w.open_path(str(tmp_path / "nothing.gguf"))
    assert "does not exist" in w.statusBar().currentMessage()
    w.close()


def test_a_bad_model_file_or_folder_is_refused_as_a_bad_npz_is(qtbot, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    w = open_window(qtbot, settings=settings)
    before, config = w.result, w.panel.config()
    for path, problem in bad_models(tmp_path).items():
        assert not w.open_path(str(path))
        message = w.statusBar().currentMessage()
        assert message.startswith(f"Not opened: {path}: {problem}") and "Fix:" in message, message
        assert w.refused in message
        assert w.result is before and w.panel.config() == config  # the maps and the panel as they were
    assert w.recent_files() == []
    w.close()
    assert RunConfig.from_json(settings.value("config")) == config  # the last good configuration remembered


def test_a_start_on_a_bad_model_opens_the_last_view_and_never_remembers_it(qtbot, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    for path, problem in bad_models(tmp_path).items():
        w = open_window(qtbot, path, settings=settings)
        assert problem in w.refused and "Fix:" in w.refused
        assert w.panel.config().variant == "toy-reverse" and w.result.tokens  # the start toy, with its maps
        w.close()
        assert "pretrained" not in settings.value("config")
    assert w.recent_files() == []


def test_a_model_the_run_refuses_is_not_remembered_either(qtbot, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    w = open_window(qtbot, settings=settings)
    config = w.panel.config()
    w.save_settings()  # as a close before saved it
    folder = model_folder(tmp_path / "model")  # the files' names are right, their contents are not
    assert w.open_path(str(folder))
    qtbot.waitUntil(lambda: w.is_settled() and w.last_error is not None, timeout=30000)
    assert w.panel.error_field == "model" and "corrupt or truncated safetensors" in w.last_error
    w.close()
    assert RunConfig.from_json(settings.value("config")) == config


def test_a_remembered_model_gone_since_opens_the_start_toy_and_says_why(qtbot, tmp_path):
    folder = model_folder(tmp_path / "model")
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    w = open_window(qtbot, settings=settings)
    assert w.open_path(str(folder))
    w.close()
    assert str(folder) in settings.value("config")
    (folder / "config.json").unlink()  # deleted (or a path remembered before bad ones were refused)
    again = open_window(qtbot, settings=settings)
    assert again.panel.config().variant == "toy-reverse" and again.result.tokens
    assert again.refused.startswith(f"the last session's model, {folder}: not a model folder")
    again.close()


def test_open_recent_keeps_the_last_ten_newest_first_across_sessions(qtbot, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    w = open_window(qtbot, settings=settings)
    configs = []
    for i in range(RECENT_COUNT + 2):
        path = tmp_path / f"config{i}.json"
        path.write_text(RunConfig(seed=i).to_json(), encoding="utf-8")
        configs.append(str(path))
        assert w.open_path(str(path))
    assert w.open_path(configs[3])  # opened again: to the top, not twice
    expected = [configs[3], *reversed(configs[4:]), *reversed(configs[:3])][:RECENT_COUNT]
    assert w.recent_files() == expected
    entries = [a for a in w.recentMenu.actions() if a.toolTip() in expected]
    assert [a.toolTip() for a in entries] == expected
    w.close()
    again = open_window(qtbot, settings=QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    assert again.recent_files() == expected
    next(a for a in again.recentMenu.actions() if a.toolTip() == configs[5]).trigger()
    assert again.panel.config().seed == 5
    again.close()


def test_a_dropped_npz_or_model_folder_is_opened(qtbot, tmp_path):
    npz = rendered(tmp_path, "seed.npz", "--preset", "seed000-demo")
    w = open_window(qtbot)
    drop(w, npz)
    assert w.panel.config() == RunConfig.for_variant("maps", maps=str(npz), layer=0)
    wait_shown(qtbot, w)
    assert w.result.opened == str(npz)
    folder = model_folder(tmp_path / "model")
    drop(w, folder)
    assert w.panel.widgets["variant"].currentData() == "pretrained"
    assert w.panel.widgets["model"].folder() == str(folder)
    w.close()


CHILD = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

app = QApplication([sys.argv[0]])

def shown():
    for w in app.topLevelWidgets():
        if w.isVisible():
            variant = w.panel.config().variant if hasattr(w, "panel") else None
            print("SHOWN", type(w).__name__, w.windowTitle(), "|", variant, flush=True)
    app.quit()

QTimer.singleShot(0, shown)  # the first turn of the event loop: after run_app showed the window
from attnviz.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_attnviz_on_a_bad_gguf_says_so_on_the_terminal_and_in_the_window(tmp_path):
    bad = tmp_path / "empty.gguf"
    bad.write_bytes(b"")
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_CONFIG_DIRS": str(tmp_path / "system"), "HF_HUB_CACHE": str(tmp_path / "no-hub"),
           "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(bad)], env=env, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"attnviz: not opened: {bad}: the file is empty (0 bytes)" in done.stderr and "Fix:" in done.stderr
    shown = [line for line in done.stdout.splitlines() if line.startswith("SHOWN")]
    assert any(line.startswith("SHOWN MainWindow attnviz | toy-reverse") for line in shown), done.stdout
    assert any(line.startswith("SHOWN QMessageBox Cannot open") for line in shown), done.stdout
    settings = (tmp_path / "config" / "attnviz" / "attnviz.conf").read_text()
    assert "empty.gguf" not in settings and "toy-reverse" in settings
