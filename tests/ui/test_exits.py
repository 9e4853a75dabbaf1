"""Every way to end: scripts that create MainWindow exit 0 (idle or mid-forward, with or without
close()), Ctrl+C quits `attnviz` cleanly, and the worker serves again after QApplication.quit().
The 20-runs-per-case version is `python -m benchmarks.exits`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
from uihelpers import wait_shown

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.exits import SCRIPT  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}


@pytest.mark.parametrize("state, close", [("idle", "noclose"), ("idle", "noclose"), ("idle", "close"),
                                          ("busy", "noclose"), ("busy", "close")])
def test_a_script_that_creates_the_window_exits_0(state, close):
    done = subprocess.run([sys.executable, "-c", SCRIPT, state, close], env=ENV, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "close_s=" in done.stdout


def app_script(on_ready: str, setup: str = "") -> str:
    """A script running the app as `attnviz` does (run_app) that, once the window shows its first result, runs
    `on_ready` (`window` bound to it); it prints the exit code it leaves with."""
    return f"""
import sys
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication
app = QApplication([])
from attnviz.ui import MainWindow
from attnviz.ui.window.app import run_app
{setup}
def ready():
    windows = [w for w in app.topLevelWidgets() if isinstance(w, MainWindow)]
    if windows and windows[0].shown_id > 0:
        window = windows[0]
{textwrap.indent(on_ready.strip(), " " * 8)}
    else:
        QTimer.singleShot(50, ready)

QTimer.singleShot(50, ready)
code = run_app([])
print("exited", code, flush=True)
sys.exit(code)
"""


APP = app_script('print("ready", flush=True)')


def test_ctrl_c_in_the_terminal_quits_the_app_cleanly(tmp_path):
    env = {**ENV, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", APP], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    assert "exited 0" in out and "KeyboardInterrupt" not in err
    assert any(tmp_path.rglob("attnviz*.conf"))  # the window was closed properly: settings saved


def test_the_worker_serves_again_after_quit(window, qtbot, counting_run):
    QTimer.singleShot(0, QApplication.quit)
    QApplication.exec()  # Qt 6 closes the windows on quit(): that stops the worker
    assert not window.isVisible() and window.worker.session.stopping  # as a user's script would find it
    window.show()
    seed = window.panel.widgets["seed"]
    calls = len(counting_run.calls)
    seed.setValue(seed.value() + 1)
    wait_shown(qtbot, window)
    assert window.result.config.seed == seed.value() and len(counting_run.calls) == calls + 1
    assert window.worker.is_alive()


def test_close_and_reuse_while_a_forward_runs(window, qtbot):
    for name, value in (("d_model", 512), ("heads", 8), ("seq_q", 1024)):
        window.panel.widgets[name].setValue(value)
    window.request()
    time.sleep(0.05)
    window.close()
    window.show()
    window.panel.widgets["seq_q"].setValue(8)
    wait_shown(qtbot, window, timeout=60000)
    assert window.result.config.seq_q == 8


# Ctrl+C arrives while torch is being imported (the first seconds of `attnviz`): the child sends
# itself SIGINT as the import starts.
INTERRUPTED_START = """
import os, signal, sys

class Trip:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Trip())
from attnviz.cli import main
code = main(sys.argv[1:])
torch = sys.modules.get("torch")
print("torch imported whole:", torch is not None and hasattr(torch, "Tensor"))  # held, not cut short
sys.exit(code)
"""


@pytest.mark.parametrize("args", [[], ["render", "--seq-q", "4", "-o", "out.npz"]], ids=["app", "render"])
def test_ctrl_c_while_starting_is_one_line_and_exit_130(args, tmp_path):
    env = {**ENV, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_START, *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == ["attnviz: interrupted"]
    assert "torch imported whole: True" in done.stdout
    assert not (tmp_path / "out.npz").exists()


BUSY_PANEL = app_script("""
job.start("busy", busy)
QTimer.singleShot(300, window.close)
""", setup="""
import torch
from attnviz.ui.panels.circuit_job import Job

def busy(cancel, progress):  # a panel's computation inside torch that never asks its cancel flag
    x = torch.randn(256, 256)
    while True:
        x = torch.tanh(x @ x)

job = Job("busy")
""")


def test_closing_while_a_panel_computes_exits_0(tmp_path):
    """A panel's job still inside torch as the window closes (the Circuits panel's, say): the app waits a moment
    for it as for the worker, then leaves without finalising under it (that aborted with exit 134)."""
    env = {**ENV, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", BUSY_PANEL], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "terminate called" not in done.stderr
