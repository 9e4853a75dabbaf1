"""`attnviz --install-desktop`: attnviz in the application menu, opening .gguf and .npz files.

On Linux and the BSDs (freedesktop): a .desktop entry, the icon in the hicolor theme and a MIME package for
.gguf and .npz files, under $XDG_DATA_HOME (default ~/.local/share), for this user only; the entry runs this
installation's `attnviz` with the file. Elsewhere: what to do instead. No Qt, nothing downloaded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from attnviz.atomic import write_bytes

DESKTOP_ID = "attnviz"
MIME_TYPES = {"application/x-gguf": ("GGUF model (llama.cpp, Ollama, LM Studio)", "*.gguf"),
              "application/x-npz": ("NumPy arrays (attnviz maps)", "*.npz")}


def data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def launcher() -> str:
    """The command the menu entry runs: this installation's attnviz script, else its Python with -m attnviz."""
    script = Path(sys.executable).parent / ("attnviz.exe" if os.name == "nt" else "attnviz")
    if script.is_file():
        return _quoted(str(script))
    return f"{_quoted(sys.executable)} -m attnviz"


def _quoted(path: str) -> str:
    """A path as a .desktop Exec line needs it (quoted where it has spaces or quotes)."""
    if not any(c in path for c in ' "\'\\$`'):
        return path
    return '"' + "".join("\\" + c if c in '"`$\\' else c for c in path) + '"'


def desktop_entry(command: str) -> str:
    return "\n".join([
        "[Desktop Entry]", "Type=Application", "Name=attnviz", "GenericName=Attention viewer",
        "Comment=See every head's attention: seed modules, trained toys, local models, exported maps",
        f"Exec={command} %f", f"Icon={DESKTOP_ID}", "Terminal=false", "Categories=Education;Science;Development;",
        "MimeType=" + ";".join(MIME_TYPES) + ";", "Keywords=attention;transformer;interpretability;gguf;", "",
    ])


def mime_package() -> str:
    types = "".join(f'  <mime-type type="{name}">\n    <comment>{comment}</comment>\n'
                    f'    <glob pattern="{glob}"/>\n  </mime-type>\n' for name, (comment, glob) in MIME_TYPES.items())
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<mime-info xmlns="http://www.freedesktop.org/standards/shared-mime-info">\n' + types + "</mime-info>\n")


def install() -> list[Path]:
    """Write the entry, the icons and the MIME package; refresh the caches where their tools exist. Returns the
    files written. Raises OSError (e.g. a read-only home) and RuntimeError off freedesktop systems."""
    if sys.platform == "darwin" or sys.platform.startswith(("win", "cygwin")):
        raise RuntimeError(other_systems())
    icons = resources.files("attnviz.resources") / "icons"
    home = data_home()
    files = {
        home / "applications" / f"{DESKTOP_ID}.desktop": desktop_entry(launcher()).encode("utf-8"),
        home / "icons" / "hicolor" / "256x256" / "apps" / f"{DESKTOP_ID}.png": (icons / "attnviz.png").read_bytes(),
        home / "icons" / "hicolor" / "scalable" / "apps" / f"{DESKTOP_ID}.svg": (icons / "attnviz.svg").read_bytes(),
        home / "mime" / "packages" / f"{DESKTOP_ID}.xml": mime_package().encode("utf-8"),
    }
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(path, data)
    _refresh(home)
    return list(files)


def _refresh(home: Path) -> None:
    """The desktop's caches, where their tools are installed (the entry works without them after a re-login)."""
    for tool, folder in (("update-mime-database", "mime"), ("update-desktop-database", "applications")):
        if shutil.which(tool):
            subprocess.run([tool, str(home / folder)], capture_output=True, timeout=60, check=False)


def other_systems() -> str:
    if sys.platform == "darwin":
        return ("on macOS there is no menu entry to write: run attnviz from a terminal (attnviz FILE opens a file), "
                "or make an Automator application that runs " + launcher() + ' "$@"')
    return ("on Windows there is no menu entry to write: run attnviz from a terminal (attnviz FILE opens a file), "
            "or make a shortcut to " + launcher() + " and choose it under Open with for .gguf and .npz files")


__all__ = ["desktop_entry", "install", "launcher", "mime_package", "other_systems"]
