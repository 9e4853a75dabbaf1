"""Random edits of every kind through the widgets (the benchmark's actions, fewer of them): nothing
raises, the final view matches the panel, the worker is alive, and the window is usable after quit().
Timing is measured in benchmarks/fuzz.py, not here."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from attnviz.core import ConfigError, RunConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.fuzz import actions, shows_config  # noqa: E402


def settle(window, qtbot) -> None:
    """Until no request is on its way (a late resize may send one more, view-only)."""
    while True:
        qtbot.waitUntil(window.is_settled, timeout=60000)
        latest = window.latest_id
        qtbot.wait(50)
        if window.is_settled() and window.latest_id == latest:
            return


def check_final_view(window) -> None:
    """Settled on the newest request: its result on screen, or its error shown."""
    try:
        config = window.panel.config()
    except ConfigError as exc:
        assert window.failed_id == window.latest_id and window.last_error == str(exc)
        return
    assert window.shown_id == window.latest_id and window.last_error is None, (window.failed_id, window.last_error)
    assert shows_config(window.result.config, config), (window.result.config, config)
    grid, frames = window.headGrid, window.frames
    for tile, head in zip(grid.tiles, grid.tile_heads):
        heat = frames.mean if head == -1 else frames.heads[head]
        assert (tile.heat.image == heat.image).all()


@pytest.mark.parametrize("seed", [1, 2])
def test_random_edits_of_every_kind(window, qtbot, seed):
    errors = []
    sys_hook, sys.excepthook = sys.excepthook, lambda *exc: errors.append(exc)  # exceptions in Qt slots
    try:
        rng = random.Random(seed)
        acts = actions(window, rng, max_len=96, max_width=96)
        for k in range(150):
            name, act = acts[rng.randrange(len(acts))]
            act()
            if k % 7 == 0:
                qtbot.wait(1)  # let some results in mid-storm, as a user's pauses would
        settle(window, qtbot)
    finally:
        sys.excepthook = sys_hook
    assert errors == []
    assert window.worker.is_alive()
    check_final_view(window)
    window.panel.set_config(RunConfig(heads=2, seq_q=12, seed=5))  # and it still follows a valid edit
    settle(window, qtbot)
    check_final_view(window)
    assert window.result.config.seed == 5


def test_usable_after_quit(window, qtbot):
    QTimer.singleShot(0, QApplication.quit)
    QApplication.exec()
    window.show()
    rng = random.Random(7)
    acts = actions(window, rng, max_len=64, max_width=64)
    for _ in range(40):
        acts[rng.randrange(len(acts))][1]()
    window.panel.set_config(RunConfig(heads=4, seq_q=10, seed=9))
    settle(window, qtbot)
    check_final_view(window)
    assert window.worker.is_alive()
