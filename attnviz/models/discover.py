"""Where models are found: the local Hugging Face cache, ATTNVIZ_MODELS, Ollama's and LM Studio's
stores. Nothing is downloaded.

    HF_HOME/hub (or ~/.cache/huggingface/hub; HF_HUB_CACHE wins where set): models--org--name/snapshots/<rev>/
    ATTNVIZ_MODELS: entries separated by os.pathsep; each is a model folder, a .gguf file, or a folder
        holding model folders and .gguf files.
    Ollama (OLLAMA_MODELS, else ~/.ollama/models): manifests/<registry>/<namespace>/<name>/<tag> are JSON
        naming their layers; the one of media type ...ollama.image.model is the GGUF blob (blobs/sha256-<hex>).
    LM Studio (~/.lmstudio/models, ~/.cache/lm-studio/models): <publisher>/<model>/*.gguf.
A folder is listed when it has a config.json (the loader says what else is missing).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from .folder import model_name
from .hf import WEIGHTS_ONLY_SEEN

GGUF_SUFFIX = ".gguf"
OLLAMA_MODEL_MEDIA = "application/vnd.ollama.image.model"


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
        if root.is_file() and root.suffix.lower() == GGUF_SUFFIX:
            found.append((root.stem, root))
        elif (root / "config.json").is_file():
            found.append((model_name(root), root))
        elif root.is_dir():
            found += [(model_name(p), p) if p.is_dir() else (p.stem, p) for p in sorted(root.iterdir())
                      if (p / "config.json").is_file() or (p.suffix.lower() == GGUF_SUFFIX and p.is_file())]
    return found


def _home(env: Mapping[str, str]) -> Path:
    return Path(env["HOME"]) if env.get("HOME") else Path.home()


def ollama_models(env: Mapping[str, str] = os.environ) -> list[tuple[str, Path]]:
    """('ollama: name:tag', blob) for each model in Ollama's store whose manifest names a present blob."""
    root = Path(env["OLLAMA_MODELS"]).expanduser() if env.get("OLLAMA_MODELS") else _home(env) / ".ollama" / "models"
    found = []
    for manifest in sorted((root / "manifests").glob("*/*/*/*")):
        try:
            layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers", [])
            digest = next(d["digest"] for d in layers if d.get("mediaType") == OLLAMA_MODEL_MEDIA)
        except (OSError, ValueError, StopIteration, AttributeError, KeyError, TypeError):
            continue  # a manifest of something else, or damaged: not a model to list
        blob = root / "blobs" / str(digest).replace(":", "-")
        if blob.is_file():
            namespace, name, tag = manifest.parts[-3:]
            shown = name if namespace == "library" else f"{namespace}/{name}"
            found.append((f"ollama: {shown}:{tag}", blob))
    return found


def lm_studio_models(env: Mapping[str, str] = os.environ) -> list[tuple[str, Path]]:
    """('publisher/model/file', path) for each .gguf in LM Studio's models folders."""
    home, found = _home(env), []
    for root in (home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"):
        for path in sorted(root.glob(f"*/*/*{GGUF_SUFFIX}")):
            found.append(("/".join(path.relative_to(root).parts[:2] + (path.stem,)), path))
    return found


def find_model_folders(env: Mapping[str, str] = os.environ) -> list[tuple[str, Path]]:
    """(label, folder) for each model folder found, ATTNVIZ_MODELS first, then the HF cache."""
    seen, out = set(), []
    for label, path in _listed(env) + _snapshots(hub_cache(env)) + ollama_models(env) + lm_studio_models(env):
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            out.append((label, path))
    return out


def supported_text() -> str:
    """What opens (said without importing transformers: the chooser must not pay for it)."""
    return ("every family transformers runs, on attnviz's kernel; weights only where the family's code does not "
            f"call transformers' attention interface ({', '.join(WEIGHTS_ONLY_SEEN)}, ...)")
