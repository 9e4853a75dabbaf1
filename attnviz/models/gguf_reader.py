"""A GGUF file read once: its header, metadata and tensor table, checked before anything is allocated.

`read_header(path)` memory-maps the file and parses it in one pass. Every count and length the file states
is checked against the bytes left before it is used (a header claiming 2^60 tensors, a string longer than
the file), then every tensor's offset and size against the data section (aligned, inside the file, no two
overlapping), so a damaged file is refused in one line naming what is wrong, and a valid one never reads a
tensor from the wrong bytes. Metadata values come back as Python values, in file order; arrays as lists.
The tensor data stays in the map: `tensor_bytes(header, info)` is a view of one tensor's blocks.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnviz.models.errors import ModelError

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # v1 counted in 32 bits; llama.cpp has written v3 since 2023
DEFAULT_ALIGNMENT = 32  # general.alignment when the file does not say
MAX_DIMS = 4  # GGML_MAX_DIMS
# value type -> (struct format, width); 8 is a string, 9 an array
SCALARS = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4), 6: ("<f", 4),
           7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8", 12: "<f8"}
STRING, ARRAY = 8, 9
MIN_VALUE_BYTES = {**{t: w for t, (_, w) in SCALARS.items()}, STRING: 8, ARRAY: 12}
HEADER_BYTES = 4 + 4 + 8 + 8  # magic, version, tensor count, metadata count
MIN_ENTRY_BYTES = 8 + 4 + 1  # a metadata entry: key length, value type, the smallest value
MIN_TENSOR_BYTES = 8 + 4 + 8 + 4 + 8  # a tensor's entry: name length, dims count, one dim, type, offset
DOWNLOAD_AGAIN = "download the file again (or copy it whole); a GGUF written by llama.cpp's converter opens"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # as the file stores them: ne0 (the fastest-moving) first
    qtype: int  # the GGMLQuantizationType's value
    offset: int  # from the start of the data section
    nbytes: int

    @property
    def shape(self) -> tuple[int, ...]:
        """The torch (row-major) shape: the file's dims reversed."""
        return tuple(reversed(self.dims))

    @property
    def elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n


@dataclass(frozen=True)
class GgufHeader:
    path: str
    size: int
    version: int
    metadata: dict  # key -> value (str, int, float, bool, or a list), in file order
    tensors: tuple[TensorInfo, ...]
    data_start: int
    buffer: mmap.mmap = field(repr=False, compare=False)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))


def damaged(path: str, problem: str, fix: str = DOWNLOAD_AGAIN) -> ModelError:
    return ModelError(path, problem, fix)


def read_header(path: str | Path) -> GgufHeader:
    """The file's header, metadata and tensor table, every count and offset checked (ModelError otherwise)."""
    path = str(path)
    try:
        with open(path, "rb") as f:
            head = _checked_start(f, path)
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # private: torch may view it writable
    except OSError as exc:
        raise _unreadable(path, exc) from exc
    size = len(buffer)  # the whole file, mapped
    version, n_tensors, n_entries = struct.unpack_from("<IQQ", head, 4)
    cursor = Cursor(buffer, path, HEADER_BYTES)
    metadata = {}
    for i in range(n_entries):
        cursor.what = f"metadata entry {i + 1} of {n_entries}"
        key = cursor.string()
        cursor.what = f"metadata entry {key!r}"
        metadata[key] = cursor.value(cursor.scalar(4))
    tensors = [_tensor_entry(cursor, i, n_tensors) for i in range(n_tensors)]
    alignment = _alignment(path, metadata)
    data_start = -(-cursor.pos // alignment) * alignment
    _check_tensors(path, tensors, alignment, data_start, size)
    return GgufHeader(path, size, version, metadata, tuple(tensors), data_start, buffer)


def check_start(path: str | Path) -> None:
    """The cheap half of read_header: the file is a regular file that starts as GGUF does (magic, version, counts
    its size can hold), from its first HEADER_BYTES bytes; ModelError naming the problem and the fix otherwise."""
    path = str(path)
    try:
        with open(path, "rb") as f:
            _checked_start(f, path)
    except OSError as exc:
        raise _unreadable(path, exc) from exc


def _checked_start(f, path: str) -> bytes:
    size = _file_size(f, path)
    head = f.read(HEADER_BYTES)
    _check_start(path, head, size)
    return head


def _unreadable(path: str, exc: OSError) -> ModelError:
    return damaged(path, f"the file cannot be read ({exc.strerror or exc})", "check the file's permissions and "
                   "that the disk is readable")


def _file_size(f, path: str) -> int:
    import os
    import stat

    info = os.fstat(f.fileno())
    if not stat.S_ISREG(info.st_mode):
        raise damaged(path, "this is not a regular file", "choose a .gguf file")
    return info.st_size


def _check_start(path: str, head: bytes, size: int) -> None:
    """Magic, version, and the header's two counts against what the file's bytes can hold."""
    if size == 0:
        raise damaged(path, "the file is empty (0 bytes), not a GGUF model")
    if head[:4] != MAGIC:
        raise damaged(path, f"not a GGUF file: it starts with {head[:4]!r}, not the magic bytes b'GGUF'",
                      "choose a .gguf model file (llama.cpp, Ollama's blobs, LM Studio's models)")
    if len(head) < HEADER_BYTES:
        raise damaged(path, f"the file is cut short: {size} bytes, less than GGUF's {HEADER_BYTES}-byte header")
    version, n_tensors, n_entries = struct.unpack_from("<IQQ", head, 4)
    if version not in VERSIONS:
        raise damaged(path, f"GGUF version {version}; attnviz reads versions {VERSIONS[0]} and {VERSIONS[1]}",
                      "convert the model again with a current llama.cpp")
    room = size - HEADER_BYTES
    for count, least, what in ((n_entries, MIN_ENTRY_BYTES, "metadata entries"), (n_tensors, MIN_TENSOR_BYTES,
                                                                                   "tensors")):
        if count * least > room:
            raise damaged(path, f"truncated or damaged: the header promises {count:,} {what} (at least "
                          f"{count * least:,} bytes) but the file holds {size:,} bytes")
    if n_entries * MIN_ENTRY_BYTES + n_tensors * MIN_TENSOR_BYTES > room:
        raise damaged(path, f"truncated or damaged: the header promises {n_entries:,} metadata entries and "
                      f"{n_tensors:,} tensors, more than {size:,} bytes can hold")


class Cursor:
    """Reads the header's values in order; every length is checked against the bytes left first."""

    def __init__(self, buffer, path: str, pos: int):
        self.buffer, self.path, self.pos, self.size = buffer, path, pos, len(buffer)
        self.what = "the header"

    def take(self, n: int) -> int:
        start = self.pos
        if start + n > self.size:
            raise damaged(self.path, f"truncated or damaged: {self.what} needs {n:,} bytes at byte {start:,} but "
                          f"the file ends at byte {self.size:,}")
        self.pos = start + n
        return start

    def scalar(self, value_type: int):
        fmt, width = SCALARS[value_type]
        return struct.unpack_from(fmt, self.buffer, self.take(width))[0]

    def string(self) -> str:
        n = self.scalar(10)
        start = self.take(n)
        try:
            return self.buffer[start:start + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise damaged(self.path, f"damaged: {self.what} holds a string that is not UTF-8") from exc

    def value(self, value_type: int):
        if value_type in SCALARS:
            return self.scalar(value_type)
        if value_type == STRING:
            return self.string()
        if value_type == ARRAY:
            return self.array(self.scalar(4), self.scalar(10))
        raise damaged(self.path, f"damaged: {self.what} has value type {value_type}, which GGUF does not define")

    def array(self, element_type: int, count: int) -> list:
        least = MIN_VALUE_BYTES.get(element_type)
        if least is None:
            raise damaged(self.path, f"damaged: {self.what} is an array of type {element_type}, which GGUF does "
                          "not define")
        if count * least > self.size - self.pos:
            raise damaged(self.path, f"truncated or damaged: {self.what} promises {count:,} values (at least "
                          f"{count * least:,} bytes) but {self.size - self.pos:,} bytes are left")
        if element_type in NUMPY:  # one read, not one call per value
            start = self.take(count * least)
            return np.frombuffer(self.buffer, NUMPY[element_type], count, start).tolist()
        if element_type == STRING:
            return self.strings(count)
        return [self.array(self.scalar(4), self.scalar(10)) for _ in range(count)]

    def strings(self, count: int) -> list[str]:
        """`count` strings (a vocabulary of 262,144 tokens): a tight loop of the same checks."""
        buffer, pos, size, out = self.buffer, self.pos, self.size, []
        length = struct.Struct("<Q").unpack_from
        try:
            for _ in range(count):
                if pos + 8 > size:
                    break
                (n,) = length(buffer, pos)
                end = pos + 8 + n
                if end > size:
                    break
                out.append(buffer[pos + 8:end].decode("utf-8"))
                pos = end
        except UnicodeDecodeError as exc:
            raise damaged(self.path, f"damaged: {self.what} holds a string that is not UTF-8") from exc
        self.pos = pos
        if len(out) < count:
            self.take(8 if pos + 8 > size else 8 + length(buffer, pos)[0])  # raises naming the bytes missing
        return out


def _tensor_entry(cursor: Cursor, i: int, count: int) -> TensorInfo:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    cursor.what = f"tensor entry {i + 1} of {count}"
    name = cursor.string()
    cursor.what = f"tensor {name!r}"
    n_dims = cursor.scalar(4)
    if not 1 <= n_dims <= MAX_DIMS:
        raise damaged(cursor.path, f"damaged: tensor {name!r} has {n_dims} dimensions (GGUF allows 1 to {MAX_DIMS})")
    dims = tuple(cursor.scalar(10) for _ in range(n_dims))
    qtype, offset = cursor.scalar(4), cursor.scalar(10)
    try:
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    except (ValueError, KeyError) as exc:
        raise ModelError(cursor.path, f"tensor {name!r} is stored in quantisation type {qtype}, which the gguf "
                         "package does not know", "use a GGUF file of a common quantisation (F32, F16, BF16, Q8_0, "
                         "Q4_K ...), or a newer gguf package") from exc
    if dims[0] % block:
        raise damaged(cursor.path, f"damaged: tensor {name!r} has rows of {dims[0]} values, not a whole number of "
                      f"{GGMLQuantizationType(qtype).name} blocks of {block}")
    elements = 1
    for d in dims:
        elements *= d
    return TensorInfo(name, dims, qtype, offset, elements // block * block_bytes)


def _alignment(path: str, metadata: dict) -> int:
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise damaged(path, f"damaged: general.alignment is {alignment!r}, not a power of two")
    return alignment


def _check_tensors(path: str, tensors: list[TensorInfo], alignment: int, data_start: int, size: int) -> None:
    """Every tensor aligned, inside the file, and no two sharing bytes (else a map would draw wrong weights)."""
    names = set()
    for t in tensors:
        if t.name in names:
            raise damaged(path, f"damaged: two tensors are named {t.name!r}")
        names.add(t.name)
        if t.offset % alignment:
            raise damaged(path, f"damaged: tensor {t.name!r} starts at offset {t.offset:,}, not a multiple of the "
                          f"file's alignment {alignment}")
        end = data_start + t.offset + t.nbytes  # Python integers: an offset near 2^64 cannot wrap round
        if end > size:
            raise damaged(path, f"truncated or damaged: tensor {t.name!r} ends at byte {end:,} but the file holds "
                          f"{size:,} bytes")
    ordered = sorted(tensors, key=lambda t: t.offset)
    for before, after in zip(ordered, ordered[1:]):
        if after.offset < before.offset + before.nbytes:
            raise damaged(path, f"damaged: tensors {before.name!r} and {after.name!r} overlap (bytes "
                          f"{after.offset:,} to {before.offset + before.nbytes:,} of the data section)")


def tensor_bytes(header: GgufHeader, info: TensorInfo) -> np.ndarray:
    """The tensor's stored bytes (a view of the map, nothing copied)."""
    return np.frombuffer(header.buffer, np.uint8, info.nbytes, header.data_start + info.offset)
