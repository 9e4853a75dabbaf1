"""The window always opens: `attnviz` started (in a child process, as a user starts it) over hostile settings
files, hostile model stores and an install without its presets shows its main window and quits cleanly.

A hang is the failure these guard against (a FIFO for a settings file or a manifest waits for a writer
forever): the child is killed after CHILD_SECONDS, far above a start on a busy machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD_SECONDS = 180

CHILD = """
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

app = QApplication([sys.argv[0]])
exec(sys.argv[1])  # the case's own preparation (e.g. the presets folder gone)

def shown():
    windows = [w for w in app.topLevelWidgets() if type(w).__name__ == "MainWindow" and w.isVisible()]
    for w in windows:
        print("SHOWN", w.panel.config().variant, "|", w.statusBar().currentMessage(), flush=True)
    app.quit()

QTimer.singleShot(0, shown)  # the first turn of the event loop: after run_app showed the window
from attnviz.ui.window.app import run_app
sys.exit(run_app([]))
"""


def settings(text: str):
    def make(root: Path) -> None:
        (root / "config" / "attnviz").mkdir(parents=True)
        (root / "config" / "attnviz" / "attnviz.conf").write_text(text)
    return make


def settings_fifo(root: Path) -> None:
    (root / "config" / "attnviz").mkdir(parents=True)
    os.mkfifo(root / "config" / "attnviz" / "attnviz.conf")


def settings_device(root: Path) -> None:
    (root / "config").mkdir()
    (root / "config" / "attnviz.conf").symlink_to("/dev/zero")  # the organisation's file, read as well


def hostile_stores(root: Path) -> None:
    """Ollama: a FIFO, a manifest nested 200,000 deep, a 6 GB (sparse) manifest, a digest that is a path;
    LM Studio: a .gguf symlink loop; ATTNVIZ_MODELS: a FIFO named .gguf and a folder holding a FIFO config.json."""
    manifests = root / "home" / ".ollama" / "models" / "manifests" / "registry.ollama.ai" / "library"
    for name in ("fifo", "deep", "huge", "evil"):
        (manifests / name).mkdir(parents=True)
    os.mkfifo(manifests / "fifo" / "latest")
    (manifests / "deep" / "latest").write_text('{"layers": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with open(manifests / "huge" / "latest", "wb") as f:
        f.truncate(6 << 30)
    (manifests / "evil" / "latest").write_text('{"layers": [{"mediaType": "application/vnd.ollama.image.model", '
                                               '"digest": "../../../etc/passwd"}]}')
    studio = root / "home" / ".lmstudio" / "models" / "someone" / "model"
    studio.mkdir(parents=True)
    (studio / "loop.gguf").symlink_to("loop.gguf")
    listed = root / "listed"
    (listed / "folder").mkdir(parents=True)
    os.mkfifo(listed / "folder" / "config.json")
    os.mkfifo(listed / "pipe.gguf")


CASES = {
    "settings-scales-null": (settings("[General]\nversion=1\nscales=null\n"), ""),
    "settings-scales-list": (settings('[General]\nversion=1\nscales="[1, 2]"\n'), ""),
    "settings-scales-number": (settings("[General]\nversion=1\nscales=7\nconfig=[]\ngenerateCount=x\n"), ""),
    "settings-fifo": (settings_fifo, "Settings not read"),
    "settings-dev-zero": (settings_device, "Settings not read"),
    "hostile-stores": (hostile_stores, ""),
    "no-presets-folder": (lambda root: None, ""),
}
PRELUDE = {
    "no-presets-folder": ("import pathlib, attnviz.core.runs.presets as p; "
                          "p._folder = lambda: pathlib.Path('/nonexistent')"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_the_window_opens(case, tmp_path):
    make, status_words = CASES[case]
    make(tmp_path)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_CONFIG_DIRS": str(tmp_path / "system"), "HF_HUB_CACHE": str(tmp_path / "no-hub"),
           "ATTNVIZ_MODELS": os.pathsep.join([str(tmp_path / "listed"), str(tmp_path / "listed" / "pipe.gguf")]),
           "QT_QPA_PLATFORM": "offscreen"}
    env.pop("OLLAMA_MODELS", None)
    done = subprocess.run([sys.executable, "-c", CHILD, PRELUDE.get(case, "pass")], env=env, capture_output=True,
                          text=True, timeout=CHILD_SECONDS)
    shown = [line for line in done.stdout.splitlines() if line.startswith("SHOWN")]
    assert done.returncode == 0 and len(shown) == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert status_words in shown[0]
    if case != "no-presets-folder":  # a damaged settings file or store: the first launch's toy, as ever
        from attnviz.core import load_preset
        from attnviz.ui.window.settings import START_PRESET

        assert shown[0].split()[1] == load_preset(START_PRESET).variant, shown[0]
    if status_words:  # said on the terminal as well
        assert "attnviz.conf" in done.stderr and "Remove or rename it" in done.stderr


def test_a_slow_look_for_models_does_not_hold_the_chooser(qtbot, monkeypatch, tmp_path):
    """Discovery runs on its own thread: a look still going when the chooser is made leaves it usable, with the
    models listed (and the skipped things in the tooltip) once the look ends."""
    import threading

    from attnviz.ui.window import model_chooser

    release, started = threading.Event(), threading.Event()
    found = [("slow-model", tmp_path / "slow-model")]

    def slow(*args, **kwargs):
        started.set()
        assert release.wait(30), "never released"
        return found, ["/somewhere/latest is a pipe (FIFO), not a manifest"]

    monkeypatch.setattr(model_chooser, "discover_models", slow)
    chooser = model_chooser.ModelChooser()  # returns after WAIT_S with the look still going
    qtbot.addWidget(chooser)
    assert started.is_set() and chooser.combo.count() == 1 and chooser.folder() == ""
    chooser.set_folder("/picked/meanwhile", emit=False)  # the user (or the settings) chose one meanwhile
    release.set()
    qtbot.waitUntil(lambda: chooser.combo.findData(str(found[0][1])) >= 0, timeout=10_000)
    assert chooser.folder() == "/picked/meanwhile"  # the choice made meanwhile is kept
    assert "pipe (FIFO)" in chooser.combo.toolTip() and chooser.notes


def test_a_quick_look_for_models_is_listed_at_once(qtbot, monkeypatch, tmp_path):
    from attnviz.ui.window import model_chooser

    monkeypatch.setattr(model_chooser, "discover_models", lambda *a, **k: ([("m", tmp_path / "m")], []))
    chooser = model_chooser.ModelChooser()
    qtbot.addWidget(chooser)
    assert chooser.combo.count() == 2 and chooser.combo.itemData(1) == str(tmp_path / "m")
    assert "Skipped" not in chooser.combo.toolTip()
