"""`attnviz render` on bad values and bad files: one line naming the flag or file and the fix, the
right exit status, nothing written, and no compute before the output path is known to be writable."""

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
from attnviz.core import runner

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


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_dropout_exits_2(value, tmp_path, capsys, no_compute):
    assert main(["render", *SMALL, "--train", f"--dropout={value}", "-o", str(tmp_path / "o.png")]) == 2
    line = one_line(capsys)
    assert "dropout" in line and "finite" in line and "Fix:" in line
    assert list(tmp_path.iterdir()) == []


def bad_config(tmp_path, kind: str):
    path = tmp_path / f"{kind}.json"
    if kind == "nan":
        path.write_text('{"format": "attnviz-config", "version": 1, "config": {"dropout": NaN, "train": true}}')
    elif kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "big":
        path.write_bytes(b" " * ((1 << 20) + 10))
    elif kind == "binary":
        path.write_bytes(os.urandom(4096) + b"\0")
    elif kind == "empty":
        path.write_text(" \n")
    elif kind == "latin1":
        path.write_bytes('{"format": "attnviz-config", "description": "Zürich", "config": {}}'.encode("latin-1"))
    else:
        return kind  # a path such as /dev/zero
    return str(path)


@pytest.mark.parametrize("kind, words", [
    ("nan", ("dropout", "finite")),
    ("deep", ("nested too deeply",)),
    ("big", ("larger than 1 MiB",)),
    ("binary", ("binary", "UTF-8")),
    ("latin1", ("not UTF-8", "save it as UTF-8")),
    ("/dev/zero", ("character device",)),
    ("empty", ("is empty", "Save configuration")),
])
def test_bad_config_files_exit_2_naming_the_flag_and_file(kind, words, tmp_path, capsys, no_compute):
    path = bad_config(tmp_path, kind)
    out = tmp_path / "out.png"
    assert main(["render", "--config", path, "-o", str(out)]) == 2
    line = one_line(capsys)
    assert f"--config {path}: " in line and "Fix:" in line
    for word in words:
        assert word in line, line
    assert not out.exists()


def test_missing_output_folder_exits_2_before_any_compute(tmp_path, capsys, no_compute):
    target = tmp_path / "no-such-folder" / "maps.png"
    assert main(["render", *SMALL, "-o", str(target)]) == 2
    line = one_line(capsys)
    assert str(target) in line and "does not exist" in line and "create it" in line
    assert list(tmp_path.iterdir()) == []


# Run in a child: root writes anywhere, so as root the child drops the capabilities that allow it.
NO_COMPUTE_RENDER = """
import sys
import attnviz.core, attnviz.core.runner as runner
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


def test_a_file_where_the_folder_should_be_exits_2(tmp_path, capsys, no_compute):
    (tmp_path / "afile").write_text("x")
    assert main(["render", *SMALL, "-o", str(tmp_path / "afile" / "maps.npz")]) == 2
    assert "is a file, not a folder; choose another folder" in one_line(capsys)


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
    monkeypatch.setattr(runner, "available_memory", lambda device: 64 << 20)
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


@pytest.mark.parametrize("args, start", [
    (["--dropout", "nan"], "--dropout nan: must be a finite number"),
    (["--heads", "-4"], "--heads -4: must be at least 1"),
])
def test_a_bad_flag_value_names_the_flag(args, start, tmp_path, capsys, no_compute):
    assert main(["render", *args, "-o", str(tmp_path / "o.npz")]) == 2
    assert one_line(capsys).startswith(f"attnviz render: error: {start}")
    assert list(tmp_path.iterdir()) == []
