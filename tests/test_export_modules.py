"""What the export package and attnviz.style promise beyond the pictures: the NPZ needs no Qt, the SVG
no widgets, and one number format with its two precisions."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from attnviz.style import COMPACT_DIGITS, MINUS, number

ROOT = Path(__file__).resolve().parent.parent

QT_AFTER_WRITING = """
import sys
from attnviz.core import RunConfig, run
from attnviz.export import svg_text, write_npz

result = run(RunConfig(d_model=8, heads=2, seq_q=4, mask="causal"))
write_npz(result, sys.argv[1])
print(",".join(sorted(m for m in sys.modules if m.startswith("PySide6."))))
assert svg_text(result).startswith("<?xml")
print(",".join(sorted(m for m in sys.modules if m.startswith("PySide6."))))
"""


def test_npz_loads_no_qt_and_svg_no_widgets(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-c", QT_AFTER_WRITING, str(tmp_path / "run.npz")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    after_npz, after_svg = out.stdout.rstrip("\n").split("\n")
    assert after_npz == ""  # the NPZ came without importing any of Qt
    qt = set(after_svg.split(","))
    assert {"PySide6.QtGui", "PySide6.QtCore"} <= qt and "PySide6.QtWidgets" not in qt
    with np.load(tmp_path / "run.npz") as saved:
        assert saved["weights"].shape == (1, 2, 4, 4)


def test_number_writes_values_as_the_window_and_the_exports_do():
    assert number(0.123456) == "0.1235"  # running text: 4 significant digits
    assert number(-1.5) == "-1.5"  # a plain minus a user can paste back
    assert number(-1.5, COMPACT_DIGITS, typeset=True) == f"{MINUS}1.5"
    assert number(0.0307149, COMPACT_DIGITS) == "0.0307"
    assert number(2.5e-5, COMPACT_DIGITS, typeset=True) == f"2.5e{MINUS}05"
    assert number(float("nan")) == "NaN"
    assert number(math.inf) == "inf" and number(-math.inf) == "-inf"
    assert number(-math.inf, typeset=True) == f"{MINUS}inf"
    assert number(np.float32(0.5)) == "0.5"  # numpy scalars as they come from the result's arrays
