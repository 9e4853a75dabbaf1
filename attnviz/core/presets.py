"""Named configurations shipped in attnviz/resources/presets (the saved-configuration JSON format)."""

from __future__ import annotations

import json
from importlib import resources

from .config import ConfigError, RunConfig


def _folder():
    return resources.files("attnviz.resources") / "presets"


def list_presets() -> dict[str, str]:
    """Preset name -> one-line description, in file-name order."""
    out = {}
    for entry in sorted(_folder().iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            out[entry.name[:-5]] = json.loads(entry.read_text(encoding="utf-8")).get("description", "")
    return out


def load_preset(name: str) -> RunConfig:
    entry = _folder() / f"{name}.json"
    if not entry.is_file():
        raise ConfigError("preset", name, "no such preset", f"use one of {', '.join(list_presets())}")
    return RunConfig.from_json(entry.read_text(encoding="utf-8"))
