"""The app with your own weights and inputs: File > Load weights… / Load inputs… on the real MainWindow,
the width quick fix, the Random / From file switch, errors at the control, reads on the worker only."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest
import torch
from PySide6.QtWidgets import QComboBox, QFileDialog, QWidget
from seeds import Seed000CrossAttention
from uihelpers import wait_shown

from attnviz.core.runs import userfiles

SHOTS = os.environ.get("ATTNVIZ_SHOTS")  # a folder to keep the screenshots in, for looking at them


@pytest.fixture
def seed000(tmp_path):
    torch.manual_seed(11)
    module = Seed000CrossAttention(32, 64, 0.0, 4).eval()
    inputs = {"queries": torch.randn(3, 6, 32), "keys": torch.randn(3, 10, 32), "values": torch.randn(3, 10, 32)}
    torch.save(module.state_dict(), tmp_path / "seed000.pt")
    torch.save(inputs, tmp_path / "inputs.pt")
    with torch.no_grad():
        expected = module(*inputs.values()).numpy()
    return str(tmp_path / "seed000.pt"), str(tmp_path / "inputs.pt"), expected


@pytest.fixture
def reads(monkeypatch):
    """Which threads read the weights and inputs files, one entry per read."""
    seen = []
    for name in ("_read_weights", "_read_inputs"):
        original = getattr(userfiles, name)

        def spy(path, original=original, name=name):
            seen.append((name, threading.current_thread() is threading.main_thread()))
            return original(path)

        monkeypatch.setattr(userfiles, name, spy)
    userfiles._cache.clear()
    return seen


def choose(monkeypatch, path):
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (path, "")))


def to_cross(window, qtbot):
    combo = window.findChild(QComboBox, "variantCombo")
    combo.setCurrentIndex(combo.findData("cross"))
    wait_shown(qtbot, window)


def shot(widget, name):
    image = widget.grab()
    assert not image.isNull()
    if SHOTS:
        os.makedirs(SHOTS, exist_ok=True)
        image.save(os.path.join(SHOTS, f"{name}.png"))


def test_load_weights_fix_the_width_then_load_inputs(window, qtbot, monkeypatch, seed000, reads, counting_run):
    weights, inputs, expected = seed000
    to_cross(window, qtbot)
    before = window.shown_id
    choose(monkeypatch, weights)
    window.findChild(type(window.loadWeightsAction), "loadWeightsAction").trigger()
    qtbot.waitUntil(lambda: window.panel.errorLabel.text() != "")
    message = window.panel.errorLabel.text()
    assert "W_query.weight" in message and "(64, 32)" in message and "d_in" in message
    assert window.shown_id == before and window.staleLabel.isVisibleTo(window)  # the last view kept
    shot(window, "weights-width-mismatch")
    window.panel.findChild(QWidget, "fixButton_32").click()  # Use d_in = 32
    wait_shown(qtbot, window)
    assert window.panel.errorLabel.text() == ""
    assert window.result.config.weights == weights and window.result.config.d_model == 32

    choose(monkeypatch, inputs)
    window.loadInputsAction.trigger()
    qtbot.waitUntil(lambda: window.result.config.inputs == inputs and window.is_settled())
    np.testing.assert_allclose(window.result.output, expected, atol=1e-5, rtol=0)
    panel = window.panel
    assert panel.findChild(QComboBox, "inputsCombo").currentData() == "file"
    for name, value in (("batch", 3), ("seq_q", 6), ("seq_kv", 10)):  # they follow the file, read-only
        assert panel.widgets[name].value() == value and not panel.widgets[name].isEnabled()
    assert not panel.widgets["in_bias"].isChecked()  # seed 000 has no q/k/v biases
    assert len(window.headGrid.tiles) == 4
    shot(window, "weights-and-inputs-loaded")
    assert all(not on_gui for _, on_gui in reads) and len(reads) == 2

    calls = len(counting_run.calls)  # a mask edit reruns without reading the files again
    panel.widgets["mask"].setCurrentIndex(panel.widgets["mask"].findData("causal"))
    wait_shown(qtbot, window)
    assert len(counting_run.calls) == calls + 1 and len(reads) == 2
    window.colormapCombo.setCurrentIndex(1)  # view-only: no run at all
    wait_shown(qtbot, window)
    assert len(counting_run.calls) == calls + 1


def test_random_inputs_switch_back(window, qtbot, monkeypatch, seed000):
    weights, inputs, _ = seed000
    to_cross(window, qtbot)
    window.panel.widgets["d_model"].setValue(32)
    wait_shown(qtbot, window)
    window.load_file("weights", weights)
    window.load_file("inputs", inputs)
    qtbot.waitUntil(lambda: window.result.config.inputs == inputs and window.is_settled())
    combo = window.panel.findChild(QComboBox, "inputsCombo")
    combo.setCurrentIndex(combo.findData("random"))
    combo.activated.emit(combo.currentIndex())
    qtbot.waitUntil(lambda: window.result.config.inputs == "" and window.is_settled())
    assert window.panel.widgets["seq_q"].isEnabled() and window.result.config.weights == weights
    combo.setCurrentIndex(combo.findData("file"))  # the file is remembered
    combo.activated.emit(combo.currentIndex())
    qtbot.waitUntil(lambda: window.result.config.inputs == inputs and window.is_settled())


def test_a_pickled_checkpoint_is_refused_at_the_control(window, qtbot, tmp_path):
    path = str(tmp_path / "whole.pt")
    torch.save(Seed000CrossAttention(64, 64, 0.0, 4), path)
    to_cross(window, qtbot)
    before = window.shown_id
    window.load_file("weights", path)
    qtbot.waitUntil(lambda: window.panel.errorLabel.text() != "")
    assert "weights_only" in window.panel.errorLabel.text() and window.shown_id == before
    assert window.panel.widgets["weights"].fileLabel.styleSheet()  # marked at the control
    shot(window.panel, "weights-pickle-refused")


def test_saved_configuration_records_the_hash_and_notes_a_changed_file(window, qtbot, tmp_path, seed000):
    weights, _, _ = seed000
    to_cross(window, qtbot)
    window.panel.widgets["d_model"].setValue(32)
    window.load_file("weights", weights)
    wait_shown(qtbot, window)
    saved = str(tmp_path / "saved.json")
    window.save_config(saved)
    with open(saved) as f:
        assert json.load(f)["files"]["weights"]["name"] == "seed000.pt"
    torch.save({k: v * 2 for k, v in torch.load(weights, weights_only=True).items()}, weights)
    window.open_config(saved)
    qtbot.waitUntil(lambda: "changed" in window.statusBar().currentMessage())  # the hash is taken off the GUI thread
    assert window.panel.config().weights == weights  # opened anyway, with the note


def test_a_long_file_name_is_elided_in_the_middle_not_cut(qtbot):
    """The chosen file's name keeps its start and its end (the extension's side) when the row is narrow."""
    from PySide6.QtWidgets import QLabel

    from attnviz.ui.widgets.file_chooser import FileChooser

    chooser = FileChooser("weights", "weights", (".safetensors",))
    qtbot.addWidget(chooser)
    chooser.resize(220, 30)
    chooser.show()
    name = "my_long_trained_cross_attention_checkpoint_epoch_12.safetensors"
    chooser.set_path(f"/somewhere/{name}", emit=False)
    qtbot.wait(10)
    shown = QLabel.text(chooser.fileLabel)  # what is painted; text() keeps the whole name
    assert chooser.fileLabel.text() == name
    head, _, tail = shown.partition("…")
    assert head and tail and name.startswith(head) and name.endswith(tail)
    assert chooser.fileLabel.fontMetrics().horizontalAdvance(shown) <= chooser.fileLabel.width()


def test_opening_a_configuration_hashes_its_weights_off_the_gui_thread(window, qtbot, tmp_path, monkeypatch):
    """Ctrl+O on a configuration saved with a huge weights file: the window takes the configuration at once and
    never stalls on the file's sha256 (minutes for 50 GB), which is taken on another thread; a file changed since
    it was saved still gets its note."""
    import hashlib
    from types import SimpleNamespace

    from attnviz.core import RunConfig

    huge = tmp_path / "huge.safetensors"
    with open(huge, "wb") as f:
        f.truncate(256 << 20)  # sparse: nothing written, all of it read by a hash
    record = {"name": huge.name, "path": str(huge), "sha256": "0" * 64, "bytes": 256 << 20}
    saved = tmp_path / "huge.json"
    saved.write_text(RunConfig.for_variant("cross", weights=str(huge)).to_json(files={"weights": record}))
    release, hashers = threading.Event(), []

    class HeldSha256:  # the hash waits for the test: on the GUI thread open_path would wait with it
        def __init__(self):
            hashers.append(threading.current_thread())
            self.inner = hashlib.sha256()

        def update(self, block):
            release.wait(5)
            release.set()
            self.inner.update(block)

        def hexdigest(self):
            return self.inner.hexdigest()

    monkeypatch.setattr(userfiles, "hashlib", SimpleNamespace(sha256=HeldSha256))
    userfiles._cache.clear()
    shown: list[str] = []  # every status message (the run's own may follow the note)
    window.statusBar().messageChanged.connect(shown.append)
    assert window.open_path(str(saved))  # what Ctrl+O and a drop call
    assert window.panel.config().weights == str(huge)
    qtbot.waitUntil(lambda: bool(hashers))
    assert threading.main_thread() not in hashers
    release.set()
    qtbot.waitUntil(lambda: any("changed since the configuration was saved" in m for m in shown), timeout=60000)
    shot(window, "config-opened-then-file-changed-note")


def test_saving_a_configuration_hashes_its_weights_off_the_gui_thread(window, qtbot, tmp_path, monkeypatch,
                                                                      seed000):
    """Ctrl+S records each named file's sha256 in the saved file: taken on another thread, never the GUI's."""
    import hashlib
    from types import SimpleNamespace

    weights, _, _ = seed000
    to_cross(window, qtbot)
    window.panel.widgets["d_model"].setValue(32)
    window.load_file("weights", weights)
    wait_shown(qtbot, window)
    hashers = []

    def recorded_sha256():
        hashers.append(threading.current_thread())
        return hashlib.sha256()

    monkeypatch.setattr(userfiles, "hashlib", SimpleNamespace(sha256=recorded_sha256))
    userfiles._cache.clear()
    target = tmp_path / "saved.json"
    monkeypatch.setattr("attnviz.ui.window.files.QFileDialog.getSaveFileName", lambda *a, **k: (str(target), ""))
    window.save_dialog()
    qtbot.waitUntil(lambda: window.statusBar().currentMessage() == f"Saved {target}", timeout=20000)
    with open(weights, "rb") as f:
        expected = hashlib.sha256(f.read()).hexdigest()
    assert json.loads(target.read_text())["files"]["weights"]["sha256"] == expected
    assert hashers and threading.main_thread() not in hashers


def with_seed_weights(window, qtbot, seed000) -> str:
    """The cross variant running seed000's weights file (which a save hashes); its path."""
    weights = seed000[0]
    to_cross(window, qtbot)
    window.panel.widgets["d_model"].setValue(32)
    window.load_file("weights", weights)
    wait_shown(qtbot, window)
    return weights


@pytest.fixture
def held_hash(monkeypatch):
    """The saved JSON of a configuration naming a weights file is made only once `release` is set (a big
    file's sha256 still being taken); others at once."""
    from attnviz.ui.window import files

    release, made = threading.Event(), files.saved_json

    def slow(config):
        if config.weights:
            assert release.wait(20)
        return made(config)

    monkeypatch.setattr(files, "saved_json", slow)
    return release


def test_a_later_save_wins_over_an_earlier_one_still_hashing(window, qtbot, tmp_path, seed000, held_hash):
    with_seed_weights(window, qtbot, seed000)
    target = tmp_path / "saved.json"
    window._save_to(str(target))  # hashing the weights
    combo = window.findChild(QComboBox, "weightsCombo")
    combo.setCurrentIndex(combo.findData("random"))
    combo.activated.emit(combo.currentIndex())
    assert window.panel.config().weights == ""
    window._save_to(str(target))  # nothing to hash: written at once
    qtbot.waitUntil(target.exists, timeout=10000)
    held_hash.set()  # the earlier save's text is ready now, and must not replace the later one
    qtbot.waitUntil(lambda: window.config_saves.running == 0, timeout=10000)
    assert json.loads(target.read_text())["config"]["weights"] == ""
    assert window.statusBar().currentMessage() in (f"Saved {target}", "")


def test_closing_while_a_save_is_hashing_closes_once_it_is_written(window, qtbot, tmp_path, seed000, held_hash):
    weights = with_seed_weights(window, qtbot, seed000)
    target = tmp_path / "saved.json"
    window._save_to(str(target))
    assert not window.close()  # kept open: the file is not written yet
    assert window.isVisible() and "closes once it is written" in window.statusBar().currentMessage()
    held_hash.set()
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=10000)
    assert json.loads(target.read_text())["config"]["weights"] == weights


def test_closing_twice_while_saving_closes_at_once(window, qtbot, tmp_path, seed000, held_hash):
    with_seed_weights(window, qtbot, seed000)
    target = tmp_path / "saved.json"
    window._save_to(str(target))
    assert not window.close() and window.close()  # the second close does not wait
    assert not window.isVisible() and not target.exists()
    held_hash.set()
