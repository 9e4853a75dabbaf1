"""Reading a configuration file safely: a regular file, at most MAX_CONFIG_BYTES, UTF-8 text.

A saved configuration is a few hundred bytes. Anything else (a device such as /dev/zero, a FIFO,
a 2 GB log, a binary or Latin-1 file) is refused with one line naming the file and the fix,
before more than MAX_CONFIG_BYTES + 1 bytes are read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from attnviz.style import format_bytes

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: thousands of times a real configuration
TEXT_FILE_BYTES = 16 << 20  # a text file to run: far more than any model reads
SAVE_AS_JSON = "give a configuration saved by attnviz (UTF-8 JSON, e.g. File > Save configuration)"


class ConfigFileError(ValueError):
    """The file cannot be a configuration: `problem` and `fix` in words (no file contents quoted)."""

    def __init__(self, problem: str, fix: str):
        self.problem, self.fix = problem, fix
        super().__init__(f"{problem}. Fix: {fix}")


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words: a folder, a character device, a pipe (FIFO)..."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


class NotRegularFile(OSError):
    """The path exists but is not a regular file: `kind` says what it is (a folder, a pipe (FIFO), ...)."""

    def __init__(self, kind: str):
        self.kind = kind
        super().__init__(f"exists but is {kind}, not a regular file")


def read_regular(path: str | os.PathLike, limit: int) -> bytes:
    """At most `limit` + 1 bytes of a regular file, never blocking: NotRegularFile for a folder, device,
    FIFO or socket (checked on the opened file, so a swap between check and read cannot slip past),
    OSError when it cannot be opened."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer (regular files ignore the flag)
    fd = os.open(Path(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode  # before fdopen, which refuses a folder with its own less telling error
        if not stat.S_ISREG(mode):
            raise NotRegularFile(file_kind(mode))
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        return f.read(limit + 1)


def read_config_text(path: str | os.PathLike) -> str:
    """The file's text; ConfigFileError when it is not a regular, small, UTF-8 text file."""
    try:
        data = read_regular(path, MAX_CONFIG_BYTES)
    except NotRegularFile as exc:
        raise ConfigFileError(f"is {exc.kind}, not a configuration file", SAVE_AS_JSON) from None
    except OSError as exc:
        raise ConfigFileError(f"cannot be read ({exc.strerror or exc})", "check the path") from exc
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigFileError(f"is larger than {format_bytes(MAX_CONFIG_BYTES)} (a configuration is under 2 KB)",
                              SAVE_AS_JSON)
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark (Notepad) is harmless
    except UnicodeDecodeError as exc:
        what = "a binary file" if b"\0" in data else "not UTF-8 text (Latin-1 or another encoding?)"
        raise ConfigFileError(f"is {what}: byte 0x{data[exc.start]:02x} at offset {exc.start}",
                              "save it as UTF-8 JSON, or " + SAVE_AS_JSON) from None
    if "\0" in text:
        raise ConfigFileError("is a binary file (it contains NUL bytes)", SAVE_AS_JSON)
    return text


class TextFileError(ValueError):
    """A text file that cannot be a run's text, in one line (the file's path not included)."""


def read_text_file(path: str | os.PathLike) -> str:
    """A text file's contents for a run's text (the CLI's --text-file, the window's Open text file…): UTF-8,
    a regular file of at most TEXT_FILE_BYTES; TextFileError otherwise (a folder, /dev/zero or a FIFO is
    refused as what it is, before a byte is read)."""
    try:
        data = read_regular(path, TEXT_FILE_BYTES)
    except NotRegularFile as exc:
        raise TextFileError(f"{exc}. Fix: give a UTF-8 text file") from None
    except FileNotFoundError:
        raise TextFileError("no such file. Fix: check the path, or give a UTF-8 text file") from None
    except OSError as exc:
        raise TextFileError(f"cannot be read ({exc.strerror or exc}). Fix: check its permissions, or give "
                            "another file") from None
    if len(data) > TEXT_FILE_BYTES:
        size = os.stat(path).st_size
        raise TextFileError(f"{format_bytes(size)}, over the {format_bytes(TEXT_FILE_BYTES)} a text may have. "
                            "Fix: cut it first")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark (Notepad) is not part of the text
    except UnicodeDecodeError as exc:
        raise TextFileError(f"not UTF-8 text (byte {exc.start}). Fix: save it as UTF-8") from None
