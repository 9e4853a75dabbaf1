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

import errno
import json
import os
import re
import stat
import time
from collections.abc import Mapping
from pathlib import Path

from attnviz.core.runs.configfile import file_kind, read_regular
from attnviz.models.folder import model_name
from attnviz.models.hf import WEIGHTS_ONLY_SEEN
from attnviz.style import format_bytes

GGUF_SUFFIX = ".gguf"
OLLAMA_MODEL_MEDIA = "application/vnd.ollama.image.model"
MANIFEST_MAX_BYTES = 1 << 20  # an Ollama manifest is ~1 KB
FOLDER_MAX_ENTRIES = 10_000  # entries read from one folder: a store holds tens
SCAN_SECONDS = 3.0  # the whole look: it runs as the window opens
DIGEST = re.compile(r"sha256[:-][0-9a-fA-F]{1,128}")  # a blob's name, never a path


class Scan:
    """One bounded look over the stores: regular files only (never a FIFO or a device opened), folders listed
    to FOLDER_MAX_ENTRIES, everything within SCAN_SECONDS; what cannot be read is skipped with a note."""

    def __init__(self, seconds: float = SCAN_SECONDS):
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def list(self, folder: Path) -> list[Path]:
        """The folder's entries, sorted; [] (with a note where it exists) when it cannot be listed."""
        if time.monotonic() > self.deadline:
            self.note(f"stopped looking for models after {self.seconds:.0f} s")
            return []
        try:
            with os.scandir(folder) as it:
                names = [entry.name for _, entry in zip(range(FOLDER_MAX_ENTRIES + 1), it)]
        except FileNotFoundError:
            return []
        except OSError as exc:  # unlistable (permissions), a loop, a file where a folder should be
            if exc.errno != errno.ENOTDIR:  # a file where folders are looked in is simply not one
                self.note(f"{folder} cannot be listed ({exc.strerror or exc})")
            return []
        if len(names) > FOLDER_MAX_ENTRIES:
            self.note(f"{folder} holds over {FOLDER_MAX_ENTRIES:,} entries: only the first were looked at")
            names = names[:FOLDER_MAX_ENTRIES]
        return [folder / name for name in sorted(names)]

    def folders(self, folder: Path) -> list[Path]:
        return [p for p in self.list(folder) if self.is_folder(p)]

    def stat(self, path: Path) -> os.stat_result | None:
        try:
            return path.stat()  # through links; a loop or a dangling link is None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                self.note(f"{path} is a loop of symbolic links")
            return None
        except ValueError:  # a NUL in a name from the environment
            return None

    def is_folder(self, path: Path) -> bool:
        st = self.stat(path)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def is_file(self, path: Path, what: str = "") -> bool:
        """A regular file (through links); a FIFO, device or socket named like one is noted when `what` says
        what it was expected to be."""
        st = self.stat(path)
        if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode) and what:
            self.note(f"{path} is {file_kind(st.st_mode)}, not {what}")
        return st is not None and stat.S_ISREG(st.st_mode)

    def mtime(self, path: Path) -> float:
        st = self.stat(path)
        return st.st_mtime if st else 0.0


def hub_cache(env: Mapping[str, str] = os.environ) -> Path:
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    home = Path(env["HF_HOME"]).expanduser() if env.get("HF_HOME") else Path.home() / ".cache" / "huggingface"
    return home / "hub"


def _snapshots(hub: Path, scan: Scan) -> list[tuple[str, Path]]:
    found = []
    for repo in scan.list(hub):
        if not repo.name.startswith("models--"):
            continue
        name = repo.name[len("models--"):].replace("--", "/")
        snaps = sorted((p for p in scan.folders(repo / "snapshots") if scan.is_file(p / "config.json", "a config")),
                       key=scan.mtime, reverse=True)
        for i, snap in enumerate(snaps):  # the newest snapshot plainly, older ones with their revision
            found.append((name if i == 0 else f"{name} @{snap.name[:8]}", snap))
    return found


def _is_gguf(path: Path, scan: Scan) -> bool:
    return path.suffix.lower() == GGUF_SUFFIX and scan.is_file(path, "a GGUF file")


def _listed(env: Mapping[str, str], scan: Scan) -> list[tuple[str, Path]]:
    found = []
    for entry in (env.get("ATTNVIZ_MODELS") or "").split(os.pathsep):
        if not entry.strip():
            continue
        root = Path(entry).expanduser()
        if _is_gguf(root, scan):
            found.append((root.stem, root))
        elif scan.is_file(root / "config.json", "a config"):
            found.append((model_name(root), root))
        elif scan.is_folder(root):
            for p in scan.list(root):
                if scan.is_folder(p) and scan.is_file(p / "config.json", "a config"):
                    found.append((model_name(p), p))
                elif _is_gguf(p, scan):
                    found.append((p.stem, p))
    return found


def _home(env: Mapping[str, str]) -> Path:
    return Path(env["HOME"]) if env.get("HOME") else Path.home()


def _manifest_digest(manifest: Path, scan: Scan) -> str | None:
    """The model layer's digest of an Ollama manifest (a small regular JSON file), or None."""
    if not scan.is_file(manifest, "a manifest"):
        return None
    try:
        data = read_regular(manifest, MANIFEST_MAX_BYTES)
        if len(data) > MANIFEST_MAX_BYTES:
            scan.note(f"{manifest} is over {format_bytes(MANIFEST_MAX_BYTES)}, not a manifest")
            return None
        layers = json.loads(data.decode("utf-8")).get("layers", [])
        digest = next(d["digest"] for d in layers if d.get("mediaType") == OLLAMA_MODEL_MEDIA)
    except RecursionError:
        scan.note(f"{manifest} is nested too deeply to be a manifest")
        return None
    except (OSError, ValueError, StopIteration, AttributeError, KeyError, TypeError):
        return None  # a manifest of something else, or damaged: not a model to list
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        scan.note(f"{manifest} names a blob {str(digest)[:40]!r} that is not a sha256 digest")
        return None
    return digest


def ollama_models(env: Mapping[str, str] = os.environ, scan: Scan | None = None) -> list[tuple[str, Path]]:
    """('ollama: name:tag', blob) for each model in Ollama's store whose manifest names a present blob."""
    scan = scan or Scan()
    root = Path(env["OLLAMA_MODELS"]).expanduser() if env.get("OLLAMA_MODELS") else _home(env) / ".ollama" / "models"
    found = []
    manifests = [m for registry in scan.folders(root / "manifests") for namespace in scan.folders(registry)
                 for name in scan.folders(namespace) for m in scan.list(name)]
    for manifest in manifests:
        digest = _manifest_digest(manifest, scan)
        if digest is None:
            continue
        blob = root / "blobs" / digest.replace(":", "-")
        if scan.is_file(blob, "a model blob"):
            namespace, name, tag = manifest.parts[-3:]
            shown = name if namespace == "library" else f"{namespace}/{name}"
            found.append((f"ollama: {shown}:{tag}", blob))
    return found


def lm_studio_models(env: Mapping[str, str] = os.environ, scan: Scan | None = None) -> list[tuple[str, Path]]:
    """('publisher/model/file', path) for each .gguf in LM Studio's models folders."""
    scan = scan or Scan()
    home, found = _home(env), []
    for root in (home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"):
        for model in (m for publisher in scan.folders(root) for m in scan.folders(publisher)):
            for path in scan.list(model):
                if _is_gguf(path, scan):
                    found.append(("/".join(path.relative_to(root).parts[:2] + (path.stem,)), path))
    return found


def discover_models(env: Mapping[str, str] = os.environ, seconds: float = SCAN_SECONDS
                    ) -> tuple[list[tuple[str, Path]], list[str]]:
    """((label, path) of each model found, ATTNVIZ_MODELS first, then the HF cache, Ollama, LM Studio; notes on
    what was skipped). Bounded (Scan): a hostile store costs at most `seconds` and never raises."""
    scan = Scan(seconds)
    found = _listed(env, scan) + _snapshots(hub_cache(env), scan) + ollama_models(env, scan)
    found += lm_studio_models(env, scan)
    seen, out = set(), []
    for label, path in found:
        key = os.path.realpath(path)  # never raises on a link loop (Path.resolve does)
        if key not in seen:
            seen.add(key)
            out.append((label, path))
    return out, scan.notes


def find_model_folders(env: Mapping[str, str] = os.environ) -> list[tuple[str, Path]]:
    """(label, folder) for each model folder found, ATTNVIZ_MODELS first, then the HF cache."""
    return discover_models(env)[0]


def supported_text() -> str:
    """What opens (said without importing transformers: the chooser must not pay for it)."""
    return ("every family transformers runs, on attnviz's kernel; weights only where the family's code does not "
            f"call transformers' attention interface ({', '.join(WEIGHTS_ONLY_SEEN)}, ...)")
