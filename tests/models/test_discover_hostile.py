"""Model discovery over hostile stores: bounded (regular files only, sizes, entries, time), never raising, and
every skipped thing named in one of its notes. The window-level check is tests/ui/test_hostile_start.py."""

from __future__ import annotations

import errno
import json
import os

from attnviz.models import discover
from attnviz.models.discover import discover_models

MODEL_LAYER = {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:abc123"}


def ollama(home, name: str):
    folder = home / ".ollama" / "models" / "manifests" / "registry.ollama.ai" / "library" / name
    folder.mkdir(parents=True)
    return folder / "latest"


def test_hostile_ollama_and_lm_studio_entries_are_skipped_with_a_note(tmp_path):
    home = tmp_path / "home"
    good = ollama(home, "good")
    good.write_text(json.dumps({"layers": [MODEL_LAYER]}))
    blobs = home / ".ollama" / "models" / "blobs"
    blobs.mkdir()
    (blobs / "sha256-abc123").write_bytes(b"GGUF")
    os.mkfifo(ollama(home, "fifo"))
    ollama(home, "deep").write_text('{"layers": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with open(ollama(home, "huge"), "wb") as f:
        f.truncate(6 << 30)  # sparse: 6 GB on paper
    ollama(home, "evil").write_text(json.dumps({"layers": [{**MODEL_LAYER, "digest": "../../../etc/passwd"}]}))
    studio = home / ".lmstudio" / "models" / "someone" / "model"
    studio.mkdir(parents=True)
    (studio / "loop.gguf").symlink_to("loop.gguf")
    found, notes = discover_models({"HOME": str(home), "HF_HUB_CACHE": str(tmp_path / "none")})
    assert found == [("ollama: good:latest", blobs / "sha256-abc123")]
    text = "\n".join(notes)
    for name, words in (("fifo", "pipe (FIFO), not a manifest"), ("deep", "nested too deeply"),
                        ("huge", "over 1 MiB"), ("evil", "not a sha256 digest")):
        assert f"/{name}/latest" in text and words in text, (name, text)
    assert "loop.gguf is a loop of symbolic links" in text


def test_an_unlistable_folder_is_noted_and_the_rest_still_found(tmp_path, monkeypatch):
    locked, fine = tmp_path / "locked", tmp_path / "fine"
    locked.mkdir()
    (fine / "m").mkdir(parents=True)
    (fine / "m" / "config.json").write_text("{}")
    scandir = os.scandir

    def refusing(path):  # as chmod 000 does for anyone but root
        if str(path) == str(locked):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return scandir(path)

    monkeypatch.setattr(discover.os, "scandir", refusing)
    env = {"ATTNVIZ_MODELS": os.pathsep.join([str(locked), str(fine)]), "HOME": str(tmp_path / "home"),
           "HF_HUB_CACHE": str(tmp_path / "none")}
    found, notes = discover_models(env)
    assert found == [("m", fine / "m")]
    assert notes == [f"{locked} cannot be listed (Permission denied)"]


def test_the_look_stops_at_its_time_limit(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    env = {"ATTNVIZ_MODELS": str(tmp_path), "HOME": str(tmp_path / "home"), "HF_HUB_CACHE": str(tmp_path / "none")}
    assert discover_models(env)[0] == [("m", tmp_path / "m")]
    found, notes = discover_models(env, seconds=-1)  # already past: nothing listed, and said so
    assert found == [] and notes == ["stopped looking for models after -1 s"]


def test_a_folder_of_too_many_entries_is_looked_at_up_to_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(discover, "FOLDER_MAX_ENTRIES", 3)
    for i in range(5):
        (tmp_path / f"m{i}").mkdir()
        (tmp_path / f"m{i}" / "config.json").write_text("{}")
    env = {"ATTNVIZ_MODELS": str(tmp_path), "HOME": str(tmp_path / "home"), "HF_HUB_CACHE": str(tmp_path / "none")}
    found, notes = discover_models(env)
    assert len(found) == 3 and notes == [f"{tmp_path} holds over 3 entries: only the first were looked at"]
