"""Named configurations shipped in attnviz/resources/presets (the saved-configuration JSON format)."""

from __future__ import annotations

import json
import re
from importlib import resources

from attnviz.core.runs.config import ConfigError, RunConfig

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # what the presets' file names are made of


def _folder():
    return resources.files("attnviz.resources") / "presets"


def list_presets() -> dict[str, str]:
    """Preset name -> one-line description, in file-name order ({} when the install lost its presets folder:
    the window still opens, its preset menu empty)."""
    out = {}
    try:
        entries = sorted(_folder().iterdir(), key=lambda p: p.name)
    except (OSError, ImportError):
        return out
    for entry in entries:
        if entry.name.endswith(".json") and NAME.fullmatch(entry.name[:-5]):
            try:
                doc = json.loads(entry.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # a damaged preset is not offered (loading it names the problem)
            out[entry.name[:-5]] = doc.get("description", "") if isinstance(doc, dict) else ""
    return out


def load_preset(name: str) -> RunConfig:
    """A shipped preset by its name (a plain name: never a path, so ../../x cannot load another JSON file)."""
    fix = f"use one of {', '.join(list_presets())}" if list_presets() else "reinstall attnviz (no presets found)"
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError("preset", name, "not a preset name (a name, not a path)", fix)
    try:
        entry = _folder() / f"{name}.json"
        if not entry.is_file():
            raise ConfigError("preset", name, "no such preset", fix)
        return RunConfig.from_json(entry.read_text(encoding="utf-8"))
    except (OSError, ImportError) as exc:
        raise ConfigError("preset", name, f"cannot be read ({exc})", fix) from None
