"""GGUF files (llama.cpp, Ollama, LM Studio) as models: read through transformers' GGUF support.

`read_gguf(path)` checks a `.gguf` file before anything is built: it opens with the `gguf` package's
reader (memory-mapped), its architecture is one transformers can dequantise, and it says how many
weights it holds and how many layers. transformers then builds the model from it (`gguf_file=`),
dequantised to float32, with the file's own tokenizer. Problems are ModelErrors naming the file.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .errors import ModelError
from .hf_attention import transformers

BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class GgufSummary:
    architecture: str  # general.architecture: llama, gemma3, qwen2 ...
    elements: int  # weights in the file, all tensors
    layers: int  # 1 + the highest blk.N among the tensor names
    quantization: str  # the file's own (general.file_type: Q4_K_M, Q8_0, F16 ...), else its most common tensor type


def read_gguf(path: Path) -> GgufSummary:
    """The file's summary (cached by path, size and modification time), or ModelError."""
    stat = path.stat()
    return _summary(str(path), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=8)
def _summary(path: str, size: int, mtime_ns: int) -> GgufSummary:
    try:
        import gguf
    except ImportError as exc:  # a dependency of attnviz: only a broken install lacks it
        raise ModelError(path, "the gguf package is not installed", "pip install gguf") from exc
    try:
        reader = gguf.GGUFReader(path)
        field = reader.fields["general.architecture"]
        architecture = bytes(field.parts[field.data[0]]).decode("utf-8")
        elements = sum(int(t.n_elements) for t in reader.tensors)
        blocks = [int(m.group(1)) for t in reader.tensors for m in [BLOCK.match(t.name)] if m]
        types = Counter(t.tensor_type.name for t in reader.tensors)
    except KeyError as exc:
        raise ModelError(path, "the GGUF file names no architecture (general.architecture)",
                         "use a GGUF file written by llama.cpp's converter") from exc
    except Exception as exc:  # noqa: BLE001 - the reader raises ValueError, struct errors, numpy errors
        raise ModelError(path, f"the gguf package cannot read this file ({type(exc).__name__}: "
                         f"{str(exc).strip()[:160]}): a quantisation type it does not know, or a damaged file",
                         "use a GGUF file of a common quantisation (F32, F16, BF16, Q8_0, Q4_K ...), or download it "
                         "again") from exc
    _check_architecture(path, architecture)
    quantization = file_type_name(reader) or (types.most_common(1)[0][0] if types else "")
    return GgufSummary(architecture, elements, max(blocks, default=-1) + 1, quantization)


def file_type_name(reader) -> str | None:
    """The quantisation the file says it is (general.file_type, as llama.cpp names it: Q4_K_M, Q8_0, F16 ...), or
    None where it says none. The most common tensor type misleads: a Q4_K_M file's many norms are F32."""
    import gguf

    field = reader.fields.get("general.file_type")
    try:
        name = gguf.LlamaFileType(int(field.parts[field.data[0]][0])).name
    except (AttributeError, IndexError, TypeError, ValueError):  # absent, empty or a number gguf does not know
        return None
    return None if name == "GUESSED" else name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _check_architecture(path: str, architecture: str) -> None:
    transformers()  # imported with the hub offline before anything of it
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    if architecture not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ModelError(path, f"transformers cannot dequantise GGUF files of the {architecture} architecture",
                         f"use a model of one of {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}, or its "
                         "Hugging Face folder")
