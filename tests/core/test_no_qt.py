"""attnviz.core, attnviz.models, attnviz.toys and the worker-side attnviz.frames never import Qt (a fresh
interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

QT_PREFIXES = ("PySide6", "PyQt", "shiboken", "pyqtgraph", "qtpy")

PROBE = f"""
import json, sys

def qt_modules():
    return sorted(m for m in sys.modules if m.startswith({QT_PREFIXES!r}))

import attnviz.core
import attnviz.core.runs.runner, attnviz.core.runs.presets
import attnviz.frames
import attnviz.models, attnviz.models.discover, attnviz.core.runs.backed
attnviz.core.run(attnviz.core.RunConfig(seq_q=4, d_model=8, heads=2))
import attnviz.toys
attnviz.toys.load_toy("toy-induction").traces("abcab")
print(json.dumps(qt_modules()))
import pyqtgraph  # the control: the same check does see Qt once something imports it
print(json.dumps(qt_modules()))
"""


def test_importing_the_core_frames_and_toys_imports_no_qt():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    after_core, after_control = (json.loads(line) for line in done.stdout.strip().splitlines()[-2:])
    assert after_core == []
    assert "pyqtgraph" in after_control  # not a vacuous pass
