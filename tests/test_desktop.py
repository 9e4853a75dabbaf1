"""`attnviz --install-desktop`: the menu entry, its icon and the file types, for this user, in XDG_DATA_HOME."""

from __future__ import annotations

import configparser
import sys

import pytest

from attnviz import desktop
from attnviz.cli import main


def test_install_writes_the_entry_icons_and_file_types(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "platform", "linux")
    assert main(["--install-desktop"]) == 0
    entry = configparser.ConfigParser(interpolation=None)
    entry.read(tmp_path / "applications" / "attnviz.desktop")
    section = entry["Desktop Entry"]
    assert section["Type"] == "Application" and section["Icon"] == "attnviz"
    assert section["Exec"].endswith(" %f") and "attnviz" in section["Exec"]
    assert set(section["MimeType"].strip(";").split(";")) == {"application/x-gguf", "application/x-npz"}
    png = tmp_path / "icons" / "hicolor" / "256x256" / "apps" / "attnviz.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "icons" / "hicolor" / "scalable" / "apps" / "attnviz.svg").read_text().startswith("<?xml")
    mime = (tmp_path / "mime" / "packages" / "attnviz.xml").read_text()
    assert '<glob pattern="*.gguf"/>' in mime and '<glob pattern="*.npz"/>' in mime
    assert "application menu" in capsys.readouterr().out


def test_a_path_with_spaces_is_quoted_in_exec():
    assert 'Exec="/opt/my apps/attnviz" %f' in desktop.desktop_entry('"/opt/my apps/attnviz"').splitlines()
    assert desktop._quoted("/opt/my apps/attnviz") == '"/opt/my apps/attnviz"'
    assert desktop._quoted("/usr/bin/attnviz") == "/usr/bin/attnviz"


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_other_systems_are_told_what_to_do(tmp_path, monkeypatch, capsys, platform):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "platform", platform)
    assert main(["--install-desktop"]) == 0
    out = capsys.readouterr().out
    assert ("macOS" if platform == "darwin" else "Windows") in out and "attnviz FILE" in out
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_read_only_home_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "file"))
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setattr(sys, "platform", "linux")
    assert main(["--install-desktop"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be written" in err
