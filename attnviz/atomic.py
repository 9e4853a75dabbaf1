"""Atomic file writes: a temporary file in the target's folder, then os.replace (through a symbolic link,
the file it points to is replaced and the link stays).

A failed or interrupted write never leaves a partial file at the target and never destroys the
file that was there before; the temporary file is removed on any failure (KeyboardInterrupt too).
No Qt, no NumPy: usable anywhere.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from attnviz.system import umask

TEMP_SUFFIX = ".part"


class ExportError(Exception):
    """A file could not be written: the message names the path and the reason."""

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"cannot write {self.path}: {reason}")


def _reason(exc: OSError) -> str:
    text = exc.strerror or str(exc) or type(exc).__name__
    return text[0].lower() + text[1:] if text else type(exc).__name__


class BadPath(ExportError):
    """A path that cannot name a file to write: a bad argument, not a failure."""


class MissingFolder(BadPath):
    """The target's folder does not exist, is a file, or the target is a folder."""


class ReadOnlyTarget(ExportError):
    """The target exists and is read-only: replacing it needs the user's say-so (replace_readonly)."""


def is_read_only(path: str | os.PathLike) -> bool:
    """True for an existing file nobody may write (chmod a-w) or that this user may not write.

    The permission bits are read too: os.access says root may write anything.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not mode & 0o222 or not os.access(path, os.W_OK)


def check_target(path: str | os.PathLike, replace_readonly: bool = False) -> None:
    """Raise ExportError (BadPath, MissingFolder, ReadOnlyTarget) when `path` cannot or should not be written.

    Cheap: callers run it before any compute, so a bad path costs nothing. A name the system refuses to look
    at (longer than 255 bytes, ...) is a BadPath too.
    """
    try:
        _check_target(path, replace_readonly)
    except OSError as exc:
        raise BadPath(path, f"{_reason(exc)}; choose another name") from None


def _check_target(path: str | os.PathLike, replace_readonly: bool) -> None:
    raw = os.fspath(path)
    if raw.endswith(("/", os.sep)):  # Path("o.png/") is o.png: the slash said a folder was meant
        raise MissingFolder(path, "the name ends with a slash, as a folder's does; give a file name (drop the "
                            "trailing slash)")
    path = Path(path)
    if path.is_symlink() and not path.exists():  # writing would create the file somewhere else
        raise BadPath(path, f"it is a symbolic link to {os.readlink(path)}, which does not exist; give the file's "
                      "own path, or remove the link")
    if path.is_dir():
        raise MissingFolder(path, "it is a folder; give a file name")
    parent = path.parent
    if not parent.exists():
        raise MissingFolder(path, f"the folder {parent} does not exist; create it or choose another folder")
    if not parent.is_dir():
        raise MissingFolder(path, f"{parent} is a file, not a folder; choose another folder")
    if path.exists() and not path.is_file():  # through a link too: a device, a pipe (opening one could block)
        raise BadPath(path, "it is not a regular file (a device or a pipe); choose another name")
    if not os.access(parent, os.W_OK | os.X_OK):  # also a read-only file system
        raise ExportError(path, f"the folder {parent} is not writable; choose another folder or make it writable")
    if not replace_readonly and is_read_only(path):
        raise ReadOnlyTarget(path, "the file is read-only; make it writable or choose another name")


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike, replace_readonly: bool = False) -> Iterator[BinaryIO]:
    """Yield a binary file; on a clean exit it replaces `path` in one step, else it vanishes.

    OSErrors (no such folder, no permission, disk full) become ExportError naming the path. An
    existing read-only file is refused (ReadOnlyTarget) unless `replace_readonly`.
    """
    check_target(path, replace_readonly)
    # A symbolic link stays a link: the file it points to is the one replaced (as cp and editors do), in its
    # own folder, with its own mode; the link's target was checked to be a regular file or not yet there.
    target = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)
    check_target(target, replace_readonly)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=TEMP_SUFFIX)
    except OSError as exc:
        raise ExportError(target, _reason(exc)) from exc
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        try:
            mask = umask()  # 0 is a umask too (everything allowed); None: unknown, the usual 022
            mode = target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~(0o022 if mask is None else mask)
            os.chmod(tmp, mode)
        except OSError:
            pass  # keep mkstemp's 0600 rather than fail the export over permissions bits
        os.replace(tmp, target)
    except OSError as exc:
        _remove(tmp)
        raise ExportError(target, _reason(exc)) from exc
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def write_bytes(path: str | os.PathLike, data: bytes, replace_readonly: bool = False) -> None:
    """Atomically write `data` to `path` (see atomic_writer)."""
    with atomic_writer(path, replace_readonly) as f:
        f.write(data)
