"""Where model folders are found: the local Hugging Face cache and ATTNVIZ_MODELS. Nothing is downloaded.

    HF_HOME/hub (or ~/.cache/huggingface/hub; HF_HUB_CACHE wins where set): models--org--name/snapshots/<rev>/
    ATTNVIZ_MODELS: folders separated by os.pathsep; each is a model folder or holds model folders.
A folder is listed when it has a config.json (the loader says what else is missing).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .loader import model_name


def hub_cache(env: Mapping[str, str] = os.environ) -> Path:
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    home = Path(env["HF_HOME"]).expanduser() if env.get("HF_HOME") else Path.home() / ".cache" / "huggingface"
    return home / "hub"


def _snapshots(hub: Path) -> list[tuple[str, Path]]:
    found = []
    for repo in sorted(hub.glob("models--*")):
        name = repo.name[len("models--"):].replace("--", "/")
        snaps = sorted((p for p in (repo / "snapshots").glob("*") if (p / "config.json").is_file()),
                       key=lambda p: p.stat().st_mtime, reverse=True)
        for i, snap in enumerate(snaps):  # the newest snapshot plainly, older ones with their revision
            found.append((name if i == 0 else f"{name} @{snap.name[:8]}", snap))
    return found


def _listed(env: Mapping[str, str]) -> list[tuple[str, Path]]:
    found = []
    for entry in (env.get("ATTNVIZ_MODELS") or "").split(os.pathsep):
        if not entry.strip():
            continue
        root = Path(entry).expanduser()
        if (root / "config.json").is_file():
            found.append((model_name(root), root))
        elif root.is_dir():
            found += [(model_name(p), p) for p in sorted(root.iterdir()) if (p / "config.json").is_file()]
    return found


def find_model_folders(env: Mapping[str, str] = os.environ) -> list[tuple[str, Path]]:
    """(label, folder) for each model folder found, ATTNVIZ_MODELS first, then the HF cache."""
    seen, out = set(), []
    for label, path in _listed(env) + _snapshots(hub_cache(env)):
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            out.append((label, path))
    return out


def supported_text() -> str:
    """What opens (said without importing transformers: the chooser must not pay for it)."""
    return ("every family transformers runs, on attnviz's kernel; weights only where the family's code does not "
            "call transformers' attention interface (gpt_neo, falcon, deberta_v2, mpnet)")
