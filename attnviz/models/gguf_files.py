"""GGUF files (llama.cpp, Ollama, LM Studio) as models: checked, summarised, and read once by attnviz itself.

`read_gguf(path)` checks a `.gguf` file before anything is built: its header parses (gguf_reader.py:
memory-mapped, every count and offset checked), its architecture is one transformers can dequantise, and
it says how many weights it holds and how many layers. gguf_model.py then builds the model from the same
parsed header (or transformers' loader, `gguf_file=`, for the architectures it leaves to it), dequantised
to float32, with the file's own tokenizer. Problems are ModelErrors naming the file.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from attnviz.models.errors import ModelError
from attnviz.models.gguf_reader import GgufHeader, read_header
from attnviz.models.hf_attention import transformers

BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class GgufSummary:
    architecture: str  # general.architecture: llama, gemma3, qwen2 ...
    elements: int  # weights in the file, all tensors
    layers: int  # 1 + the highest blk.N among the tensor names
    quantization: str  # the file's own (general.file_type: Q4_K_M, Q8_0, F16 ...), else its most common tensor type


def read_gguf(path: Path) -> GgufSummary:
    """The file's summary (cached by path, size and modification time), or ModelError."""
    header = gguf_header(path)
    architecture = header.architecture
    if not architecture:
        raise ModelError(path, "the GGUF file names no architecture (general.architecture)",
                         "use a GGUF file written by llama.cpp's converter")
    _check_architecture(str(path), architecture)
    blocks = [int(m.group(1)) for t in header.tensors for m in [BLOCK.match(t.name)] if m]
    types = Counter(t.qtype for t in header.tensors)
    common = _type_name(types.most_common(1)[0][0]) if types else ""
    return GgufSummary(architecture, sum(t.elements for t in header.tensors), max(blocks, default=-1) + 1,
                       file_type_name(header.metadata) or common)


def file_type_name(metadata: dict) -> str | None:
    """The quantisation the file says it is (general.file_type, as llama.cpp names it: Q4_K_M, Q8_0, F16 ...), or
    None where it says none. The most common tensor type misleads: a Q4_K_M file's many norms are F32."""
    import gguf

    try:
        name = gguf.LlamaFileType(int(metadata["general.file_type"])).name
    except (KeyError, TypeError, ValueError):  # absent, not a number, or a number gguf does not know
        return None
    return None if name == "GUESSED" else name.removeprefix("MOSTLY_").removeprefix("ALL_")


def gguf_header(path: Path) -> GgufHeader:
    """The file's parsed and checked header (gguf_reader.py), cached by path, size and modification time."""
    stat = path.stat()
    return _header(str(path), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=2)  # a header holds the vocabulary (262,144 tokens for Gemma): a few MB each
def _header(path: str, size: int, mtime_ns: int) -> GgufHeader:
    return read_header(path)


def _type_name(qtype: int) -> str:
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType(qtype).name


def _check_architecture(path: str, architecture: str) -> None:
    transformers()  # imported with the hub offline before anything of it
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if architecture not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ModelError(path, f"transformers cannot dequantise GGUF files of the {architecture} architecture",
                         f"use a model of one of {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}, or its "
                         "Hugging Face folder")
