"""`attnviz render` on bad values and bad files: one line naming the flag or file and the fix, the
right exit status, nothing written, and no compute before the output path is known to be writable.
The plain cases (arguments in, exit status and words out) are rows of tests/test_bad_input_table.py."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys

import pytest

from attnviz import cli
from attnviz.cli import main
from attnviz.core.runs import device, runner

SMALL = ["--d-model", "8", "--heads", "2", "--seq-q", "4"]


@pytest.fixture(autouse=True)
def _qt(qapp):
    return qapp


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("attnviz render: error: ")
    return lines[0]


@pytest.fixture
def no_compute(monkeypatch):
    """Fail the test if a forward pass starts."""
    def forbidden(*args, **kwargs):
        raise AssertionError("run() was called")

    monkeypatch.setattr(runner, "run", forbidden)
    import attnviz.core
    monkeypatch.setattr(attnviz.core, "run", forbidden)


# Run in a child: root writes anywhere, so as root the child drops the capabilities that allow it.
NO_COMPUTE_RENDER = """
import sys
import attnviz.core, attnviz.core.runs.runner as runner
def forbidden(*a, **k):
    raise AssertionError("run() was called")
runner.run = attnviz.core.run = forbidden
from attnviz.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_an_unwritable_output_folder_exits_1_before_any_compute(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    cmd = [sys.executable, "-c", NO_COMPUTE_RENDER, "render", *SMALL, "-o", str(folder / "maps.png")]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: no folder is unwritable")
        cmd = [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner", *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert str(folder) in lines[0] and "not writable" in lines[0] and "choose another folder" in lines[0]
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("ext", [".png", ".npz", ".svg"])
def test_a_read_only_target_is_refused_and_kept(ext, tmp_path, capsys, no_compute):
    target = tmp_path / f"keep{ext}"
    target.write_bytes(b"protected")
    target.chmod(stat.S_IRUSR | stat.S_IRGRP)  # read-only (root may still write: the bits decide)
    assert main(["render", *SMALL, "-o", str(target)]) == 1
    line = one_line(capsys)
    assert str(target) in line and "read-only" in line and "make it writable or choose another name" in line
    assert target.read_bytes() == b"protected"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


def test_memory_refusal_of_a_padding_run_names_memory(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(device, "available_memory", lambda device: 64 << 20)
    args = ["--variant", "cross", "--pool", "never", "--mask", "padding", "--kv-lengths", "4000,3000",
            "--batch", "2",
            "--seq-q", "4096", "--seq-kv", "4096", "--heads", "8"]
    assert main(["render", *args, "-o", str(tmp_path / "o.png")]) == 2
    line = one_line(capsys)
    assert "not enough memory" in line and "use lengths of" in line
    assert "kv_lengths =" not in line and "with kv_lengths at most" in line  # blamed on memory; the fix says all
    assert list(tmp_path.iterdir()) == []


def test_good_config_still_renders(tmp_path, capsys):
    cfg = tmp_path / "ok.json"
    cfg.write_text(json.dumps({"format": "attnviz-config", "version": 1,
                               "config": {"d_model": 8, "heads": 2, "seq_q": 4}}))
    assert main(["render", "--config", str(cfg), "-o", str(tmp_path / "ok.npz")]) == 0
    assert cli.EXIT_OK == 0 and (tmp_path / "ok.npz").exists()
