"""A local model: a Hugging Face folder (config.json, the weights, a tokenizer) or a GGUF file, checked
before transformers builds anything. Nothing is downloaded.

Weights: `*.safetensors` (one file, or shards listed in model.safetensors.index.json), their headers
checked against the file sizes; `pytorch_model.bin` only after torch.load(weights_only=True) read it,
which refuses pickles that would run code. Every problem is a ModelError naming the folder or file
and what to do (a ConfigError on the `model` field, so the CLI exits 2 and the app keeps its view).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor

from attnviz.core.runs.configfile import NotRegularFile, read_regular
from attnviz.core.runs.memory import over_budget
from attnviz.core.runs.userfiles import UnreadableCheckpoint, read_checkpoint
from attnviz.models.errors import ModelError
from attnviz.models.gguf_files import gguf_header, read_gguf
from attnviz.models.gguf_reader import check_start
from attnviz.style import format_bytes

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
GGUF_MAGIC = b"GGUF"
MAX_JSON_BYTES = 16 << 20  # config.json and the shard index: a large model's are well under 1 MiB
MAX_HEADER_BYTES = 100 << 20  # a safetensors header (tensor names and shapes), safetensors' own limit
# Where a folder has no tokenizer.json: the files AutoTokenizer converts to a fast tokenizer
VOCABULARY_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "vocab.json", "vocab.txt")
PICKLE_WEIGHTS = "pytorch_model.bin"
GENERIC_NAMES = {"model", "models", "weights", "checkpoint", "hf", "transformer"}  # a folder named for its role


@dataclass(frozen=True)
class ModelFolder:
    path: Path
    config: dict  # config.json
    weights: tuple[Path, ...]  # the safetensors shards, or the one pickle checkpoint, or the GGUF file
    tokenizer: Path
    gguf_file: bool = False  # weights[0] is a GGUF file (config and tokenizer inside it)

    @property
    def safetensors(self) -> bool:
        return self.weights[0].suffix == ".safetensors"

    @property
    def gguf(self) -> Path | None:
        """The GGUF file this model is (weights, config and tokenizer in one), else None."""
        return self.weights[0] if self.gguf_file else None

    @property
    def name(self) -> str:
        return self.gguf.stem if self.gguf else self.path.name

    def stamp(self) -> tuple:
        """Changes when any file changes (the model cache's key)."""
        files = self.weights if self.gguf else (self.path / "config.json", self.tokenizer, *self.weights)
        return tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)


def read_folder(folder: str | os.PathLike) -> ModelFolder:
    """Check a folder holds config.json, weights and tokenizer.json (check_model_path); read config.json. A GGUF
    file: its whole header parsed and checked."""
    path = check_model_path(folder)
    if path.is_file():
        gguf_header(path)  # a file cut or damaged past its first bytes: refused here, naming what is wrong
        return ModelFolder(path.parent, {}, (path,), path, gguf_file=True)
    config_file = path / "config.json"
    config = read_json(config_file)
    if not isinstance(config, dict):
        raise ModelError(config_file, "config.json is not a JSON object", "restore the file")
    return ModelFolder(path, config, weight_files(path), _tokenizer_file(path))


def check_model_path(folder: str | os.PathLike) -> Path:
    """What a path must be to be a model, looked at cheaply (names and sizes, a GGUF file's first 24 bytes; no
    weights, no header parsed), for `attnviz PATH` and File > Open to refuse at once: a GGUF file (by its magic
    bytes or suffix) that starts as one, or a folder with config.json, weights and a tokenizer. The path
    (expanded), or ModelError naming the problem and the fix."""
    if not str(folder).strip():
        raise ModelError(folder, "no model folder given", "choose a folder with config.json, *.safetensors and "
                         "tokenizer.json (e.g. one in the Hugging Face cache)")
    path = Path(folder).expanduser()
    try:
        os.stat(path)
    except FileNotFoundError:
        pass  # said below, with the fix
    except (OSError, ValueError) as exc:  # a name longer than the system allows, a loop of links, no permission
        raise ModelError(folder, f"cannot be looked at ({getattr(exc, 'strerror', None) or exc})",
                         "check the path; it must be a local model folder or a .gguf file") from None
    if path.is_file() and (is_gguf(path) or path.suffix.lower() == ".gguf"):  # llama.cpp, LM Studio, an Ollama blob
        check_start(path)  # an empty or foreign file, a header promising more than the file holds
        return path
    if path.is_file():
        raise ModelError(folder, "this is a file, not a model folder", "choose the folder that holds config.json, "
                         "or a .gguf file")
    if not path.is_dir():
        raise ModelError(folder, "no such folder or .gguf file", "check the path; it must be a local model folder "
                         "or a .gguf file")
    if not (path / "config.json").exists():  # there but not a regular file (a FIFO, a device): read_json says
        raise ModelError(folder, "not a model folder: it has no config.json",
                         "choose the folder that holds config.json, *.safetensors and tokenizer.json, or a .gguf file")
    weight_files(path)
    _tokenizer_file(path)
    return path


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> Any:
    """A model's JSON file (config.json, the shard index): a regular file (a FIFO is never waited on, a device
    never read to its end) of at most `limit` bytes, parsed; ModelError naming the file otherwise."""
    try:
        data = read_regular(path, limit)
    except NotRegularFile as exc:
        raise ModelError(path, f"{path.name} {exc}", "restore the file saved with the model") from None
    except OSError as exc:
        raise ModelError(path, f"{path.name} cannot be read ({exc.strerror or exc})", "restore the file") from None
    if len(data) > limit:
        size = os.stat(path).st_size
        raise ModelError(path, f"{path.name} is {format_bytes(size)}, far larger than a model's ({format_bytes(limit)} "
                         "at most)", "restore the file saved with the model")
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ModelError(path, f"{path.name} is nested too deeply to be a model's", "restore the file") from None
    except ValueError as exc:  # not JSON, not UTF-8
        raise ModelError(path, f"{path.name} cannot be read ({str(exc)[:120]})", "restore the file") from None


def _tokenizer_file(path: Path) -> Path:
    """tokenizer.json, else the vocabulary file transformers' AutoTokenizer builds a fast tokenizer from."""
    for name in ("tokenizer.json", *VOCABULARY_FILES):
        if (path / name).is_file():
            return path / name
    raise ModelError(path, "no tokenizer in the folder: neither tokenizer.json nor a vocabulary file "
                     f"({', '.join(VOCABULARY_FILES)})", "use the folder the model was saved in with its tokenizer "
                     "(AutoTokenizer(...).save_pretrained(folder))")


def is_gguf(path: Path) -> bool:
    """Whether a file is GGUF: by its magic bytes (Ollama's blobs have no suffix)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def weight_files(path: Path) -> tuple[Path, ...]:
    index = path / SAFETENSORS_INDEX
    if index.is_file():
        names = _shard_names(index)
        missing = [n for n in names if not (path / n).is_file()]
        if missing:
            raise ModelError(path / missing[0], f"a shard named in {SAFETENSORS_INDEX} is missing",
                             "download the model again (all shards)")
        return tuple(path / n for n in names)
    # What transformers reads, and nothing else: another *.safetensors beside it (an adapter, a copy) is not
    # the model's. Regular files only: a pipe in their place would block the reader.
    for name in (SAFETENSORS_FILE, PICKLE_WEIGHTS):
        if (path / name).is_file():
            return (path / name,)
    others = sorted(p.name for p in path.glob("*.safetensors"))
    hint = f" (the folder has {', '.join(others[:3])}, but no {SAFETENSORS_INDEX} naming them)" if others else ""
    raise ModelError(path, f"no weights: neither {SAFETENSORS_FILE}, {SAFETENSORS_INDEX} nor {PICKLE_WEIGHTS}{hint}",
                     "use a folder with the model's weights as saved (model.safetensors, or its shards and index)")


def _shard_names(index: Path) -> list[str]:
    """The shard files a model.safetensors.index.json names: plain file names in the folder, at least one."""
    doc = read_json(index)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        what = "empty" if weight_map == {} else "missing" if weight_map is None else type(weight_map).__name__
        raise ModelError(index, f"the shard index has no weight_map of tensor names to shard files ({what})",
                         "restore the file")
    names = set(weight_map.values())
    bad = next((n for n in names if not isinstance(n, str) or Path(n).name != n or n in ("", ".", "..")), None)
    if bad is not None:
        raise ModelError(index, f"the shard index names {str(bad)[:60]!r}, not a file in the folder",
                         "restore the file")
    return sorted(names)


def parameter_bytes(folder: ModelFolder, dtype_bytes: int = 4) -> int:
    """Bytes the weights take once held as `dtype_bytes`-wide floats, read from the safetensors headers
    (nothing loaded); a pickle checkpoint counts its file size, doubled if stored in 16 bits."""
    if folder.gguf:
        return read_gguf(folder.gguf).elements * dtype_bytes
    if not folder.safetensors:
        size = folder.weights[0].stat().st_size
        half = str(folder.config.get("torch_dtype", folder.config.get("dtype", ""))) in ("float16", "bfloat16")
        return size * (2 if half else 1) * dtype_bytes // 4
    total = 0
    for shard in folder.weights:
        for info in safetensors_header(shard).values():
            if isinstance(info, dict) and "shape" in info:
                total += math.prod(info["shape"]) * max(dtype_bytes, 1)
    return total


def safetensors_header(shard: Path) -> dict:
    """The JSON header of a safetensors file (8-byte length, then JSON), checked against the file size."""
    try:
        size = shard.stat().st_size
        with open(shard, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if size < 8 or n <= 0 or 8 + n > size or n > MAX_HEADER_BYTES:
                raise ValueError("the header length does not fit the file")
            header = json.loads(f.read(n))
        end = _header_end(header)
        if 8 + n + end > size:
            raise ValueError(f"the file is {size} bytes but its tensors need {8 + n + end}")
        return header
    except RecursionError:
        raise ModelError(shard, "corrupt safetensors file (its header is nested too deeply)",
                         "download the file again") from None
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ModelError(shard, f"corrupt or truncated safetensors file ({exc})",
                         "download the file again") from exc


def _header_end(header: Any) -> int:
    """The end of the last tensor's bytes; ValueError unless every entry is {dtype, shape, data_offsets} with
    whole, non-negative sizes (a header of [] or null, a shape of "abc", would fail later, unnamed)."""
    if not isinstance(header, dict):
        raise ValueError(f"the header is {type(header).__name__}, not a JSON object")
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        shape, offsets = (info.get("shape"), info.get("data_offsets")) if isinstance(info, dict) else (None, None)
        if not (isinstance(shape, list) and all(_whole(d) for d in shape) and isinstance(offsets, list)
                and len(offsets) == 2 and all(_whole(o) for o in offsets) and offsets[0] <= offsets[1]):
            raise ValueError(f"tensor {str(name)[:60]!r} has no valid shape and data_offsets")
        end = max(end, offsets[1])
    return end


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_pickle(folder: ModelFolder) -> None:
    """A pytorch_model.bin read with torch.load(weights_only=True) (memory-mapped), so a pickle that would run
    code is refused with attnviz's own message before transformers opens it."""
    _load_pickle(folder.weights[0])


def _load_pickle(path: Path) -> dict[str, Tensor]:
    try:
        state = read_checkpoint(path, mmap=True)
    except UnreadableCheckpoint as exc:
        raise ModelError(path, f"the checkpoint {exc.reason}",
                         "use the model's safetensors weights; attnviz never runs code from a pickle") from exc
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ModelError(path, "the checkpoint is not a flat dictionary of tensors", "use safetensors weights")
    return state


def model_name(path: Path) -> str:
    """'models--org--name/snapshots/<hash>' -> 'org/name'; else the folder's own name."""
    parts = Path(os.path.realpath(path)).parts  # never raises on a link loop (resolve does)
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3][len("models--"):].replace("--", "/")
    if path.name.lower() in GENERIC_NAMES and len(parts) >= 2:  # e.g. a package's .../all_minilm/model
        return f"{parts[-2]}/{parts[-1]}"
    return path.name


def weights_within_budget(folder: ModelFolder, memory_budget: int | None) -> int:
    """The folder's weights as float32 bytes; ModelError before any weight is read when they exceed the budget."""
    size = parameter_bytes(folder)
    over = over_budget(size, memory_budget)
    if over is not None:
        allowed, source = over
        raise ModelError(folder.path, f"the weights need about {format_bytes(size)} as float32, over "
                         f"{format_bytes(allowed)} ({source})", "choose a smaller model, or free memory")
    return size
