"""Every bad input in one table: what is given, the exit status it must get, and the words its one line must hold.

A row's `make(work, models)` prepares its files in the empty folder `work` and returns either the arguments of
`attnviz render` (a list) or a function calling the Python API (a ConfigError there counts as exit 2). The test
runs it and checks: the exit status, one line on stderr with no traceback, every word of the row in that line,
and `work` exactly as it was (nothing written, nothing removed). Rows without `computes` also fail if a forward
pass starts: they must be refused before any compute.

A new feature's bad inputs go here as new rows (GGUF files have their own marked section).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.core import ConfigError, RunConfig, run

SMALL = ["--d-model", "8", "--heads", "2", "--seq-q", "4"]
Make = Callable[[Path, Callable[[str], Path]], Any]


@dataclass(frozen=True)
class Row:
    id: str
    make: Make
    code: int
    words: tuple[str, ...]
    computes: bool = False  # the refusal may come from the run itself (a model's files, a sampled token)
    chat_time_s: float | None = None  # the chat template's time limit for this row (None: the app's)


def cli(*argv: str) -> Make:
    """`attnviz render` with these arguments; "{work}" stands for the row's folder."""
    return lambda work, models: [a.replace("{work}", str(work)) for a in argv]


def api(call: Callable[[], Any]) -> Make:
    return lambda work, models: call


def write(name: str, data: bytes | str, *argv: str) -> Make:
    """A file `name` in the row's folder holding `data`, then `attnviz render` with `argv` ("{work}" as above)."""
    def make(work: Path, models):
        raw = data.encode("utf-8") if isinstance(data, str) else data
        (work / name).write_bytes(raw)
        return [a.replace("{work}", str(work)) for a in argv]
    return make


def fifo(name: str, *argv: str) -> Make:
    def make(work: Path, models):
        os.mkfifo(work / name)
        return [a.replace("{work}", str(work)) for a in argv]
    return make


def folder(name: str, *argv: str) -> Make:
    def make(work: Path, models):
        (work / name).mkdir()
        return [a.replace("{work}", str(work)) for a in argv]
    return make


FIFO, DEV_ZERO = "<fifo>", "<link to /dev/zero>"
GPT2_CONFIG = b'{"model_type": "gpt2"}'


def safetensors(header: Any, data: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + data


def model(files: dict[str, bytes | str], *argv: str) -> Make:
    """A model folder `m` holding `files` (bytes, FIFO, DEV_ZERO, or ("sparse", size)), then
    `attnviz render --model m --text hi -o o.png` with `argv` added."""
    def make(work: Path, models):
        folder = work / "m"
        folder.mkdir()
        for name, data in files.items():
            if data == FIFO:
                os.mkfifo(folder / name)
            elif data == DEV_ZERO:
                (folder / name).symlink_to("/dev/zero")
            elif isinstance(data, tuple):
                with open(folder / name, "wb") as f:
                    f.truncate(data[1])
            else:
                (folder / name).write_bytes(data)
        return ["--model", str(folder), "--text", "hi", "-o", str(work / "o.png"), *argv]
    return make


def links(chain: dict[str, str], *argv: str) -> Make:
    """Symbolic links name -> target in the row's folder (a target "real.*" is made as a file first)."""
    def make(work: Path, models):
        for name, target in chain.items():
            if target.startswith("real"):
                (work / target).write_bytes(b"keep")
            (work / name).symlink_to(work / target)
        return [a.replace("{work}", str(work)) for a in argv]
    return make


def saved_config(config: dict | str) -> str:
    body = config if isinstance(config, str) else json.dumps(config)
    return f'{{"format": "attnviz-config", "version": 1, "config": {body}}}'


# --- the run configuration: values of the wrong kind, out of range, malformed ---------------------------------

CONFIG_ROWS = [
    Row("api-heads-true", api(lambda: RunConfig(heads=True)), 2, ("heads = True", "an integer, not a bool")),
    Row("api-heads-np-bool", api(lambda: RunConfig(heads=np.bool_(True))), 2, ("an integer, not a bool",)),
    Row("api-heads-string", api(lambda: RunConfig(heads="4")), 2, ("heads = '4'", "an integer, not a string")),
    Row("api-heads-fraction", api(lambda: RunConfig(heads=4.5)), 2, ("heads = 4.5", "whole number")),
    Row("api-seq-none", api(lambda: RunConfig(seq_q=None)), 2, ("seq_q = None", "an integer, not null")),
    Row("api-dropout-bool", api(lambda: RunConfig(dropout=True)), 2, ("dropout", "a number, not a bool")),
    Row("api-dropout-string", api(lambda: RunConfig(dropout="0.1")), 2, ("dropout", "a number, not a string")),
    Row("api-train-string", api(lambda: RunConfig(train="yes")), 2, ("train = 'yes'", "true or false")),
    Row("api-mask-int", api(lambda: RunConfig(mask=3)), 2, ("mask = 3", "must be text")),
    Row("api-np-heads-not-dividing", api(lambda: RunConfig(d_model=64, heads=np.int64(6))), 2,
        ("heads = 6", "4 or 8")),  # converted first, then checked as any int
    Row("api-dropout-np-nan", api(lambda: RunConfig(dropout=np.float32("nan"), train=True)), 2, ("finite",)),
    Row("api-dropout-range", api(lambda: RunConfig(dropout=1.5)), 2, ("dropout = 1.5", "Fix: set dropout")),
    Row("api-seed-negative", api(lambda: RunConfig(seed=-1)), 2, ("seed = -1", "at least 0")),
    Row("api-d-model-huge", api(lambda: RunConfig(d_model=1 << 17)), 2, ("d_model", "at most")),
    *[Row(f"api-device-{name}", api(lambda name=name: RunConfig(device=name)), 2,
          (f"device = '{name}'", "cpu, cuda, cuda:N or auto")) for name in ("gpu", "cuda:", "CPU", "mps")],
    Row("api-record-unknown", api(lambda: run(RunConfig.for_variant("toy-induction"), record={"bogus"})), 2,
        ("stage = 'bogus'", "no such stage")),
    Row("api-record-string", api(lambda: run(RunConfig(seq_q=4), record="weights")), 2,
        ("record = 'weights'", "not a collection of stage names")),
    Row("api-region-fraction", api(lambda: run(RunConfig(seq_q=4), region=(0.5, 2, 0, 3))), 2,
        ("region = (0.5, 2, 0, 3)", "four whole numbers")),
    Row("api-region-three", api(lambda: run(RunConfig.for_variant("toy-induction"), region=(0, 2, 0))), 2,
        ("four whole numbers",)),
    Row("cli-dropout-nan", cli(*SMALL, "--train", "--dropout=nan", "-o", "{work}/o.png"), 2,
        ("--dropout nan: must be a finite number", "Fix:")),
    Row("cli-dropout-inf", cli(*SMALL, "--train", "--dropout=-inf", "-o", "{work}/o.png"), 2, ("finite",)),
    Row("cli-heads-negative", cli("--heads", "-4", "-o", "{work}/o.npz"), 2, ("--heads -4: must be at least 1",)),
]

# --- files given by flag: the configuration, the text --------------------------------------------------------

FILE_ROWS = [
    Row("config-nan", write("c.json", saved_config('{"dropout": NaN, "train": true}'),
                            "--config", "{work}/c.json", "-o", "{work}/o.png"), 2,
        ("--config", "c.json", "dropout", "finite")),
    Row("config-deep", write("c.json", "[" * 100_000 + "]" * 100_000, "--config", "{work}/c.json", "-o",
                             "{work}/o.png"), 2, ("nested too deeply",)),
    Row("config-big", write("c.json", b" " * ((1 << 20) + 10), "--config", "{work}/c.json", "-o", "{work}/o.png"),
        2, ("larger than 1 MiB",)),
    Row("config-binary", write("c.json", bytes(range(256)) * 16 + b"\0", "--config", "{work}/c.json", "-o",
                               "{work}/o.png"), 2, ("binary", "UTF-8")),
    Row("config-empty", write("c.json", " \n", "--config", "{work}/c.json", "-o", "{work}/o.png"), 2,
        ("is empty", "Save configuration")),
    Row("config-latin1", write("c.json", '{"format": "attnviz-config", "description": "Zürich", "config": {}}'
                               .encode("latin-1"), "--config", "{work}/c.json", "-o", "{work}/o.png"), 2,
        ("not UTF-8", "save it as UTF-8")),
    Row("preset-path", write("evil.json", saved_config({"d_model": 8, "heads": 2, "seq_q": 4}),
                             "--preset", "{work}/evil", "-o", "{work}/o.npz"), 2,
        ("--preset", "not a preset name", "use one of")),
    Row("preset-relative-path", cli("--preset", "../../x", "-o", "{work}/o.npz"), 2, ("not a preset name",)),
    Row("config-version-99", write("c.json", saved_config({}).replace('"version": 1', '"version": 99'),
                                   "--config", "{work}/c.json", "-o", "{work}/o.npz"), 2,
        ("version = 99", "newer attnviz", "update attnviz")),
    Row("config-version-text", write("c.json", saved_config({}).replace('"version": 1', '"version": "1"'),
                                     "--config", "{work}/c.json", "-o", "{work}/o.npz"), 2,
        ("version = '1'", "not a format version")),
    Row("config-files-list", write("c.json", '{"format": "attnviz-config", "version": 1, "files": [1], '
                                   '"config": {"weights": "/nowhere/w.safetensors"}}',
                                   "--config", "{work}/c.json", "-o", "{work}/o.npz"), 2,
        ('"files" is list', 'remove "files"')),
    Row("config-dev-zero", cli("--config", "/dev/zero", "-o", "{work}/o.png"), 2,
        ("--config /dev/zero", "character device")),
    Row("text-file-dev-zero", cli(*SMALL, "--text-file", "/dev/zero", "-o", "{work}/o.png"), 2,
        ("--text-file /dev/zero", "exists but is a character device", "not a regular file", "Fix:")),
    Row("text-file-folder", folder("d", *SMALL, "--text-file", "{work}/d", "-o", "{work}/o.png"), 2,
        ("exists but is a folder", "not a regular file", "Fix:")),
    Row("text-file-fifo", fifo("t.txt", *SMALL, "--text-file", "{work}/t.txt", "-o", "{work}/o.png"), 2,
        ("exists but is a pipe (FIFO)", "not a regular file", "Fix:")),
    Row("text-invalid-utf8", cli("--model", "{work}/m", "--text", "caf\udce9 au lait", "-o", "{work}/o.png"), 2,
        ("--text", "not valid UTF-8 text: byte 0xe9 at character 3", "Fix:")),
    Row("text-file-invalid-utf8", write("t.txt", b"caf\xe9", "--model", "{work}/m", "--text-file", "{work}/t.txt",
                                        "-o", "{work}/o.png"), 2, ("--text-file", "not UTF-8 text (byte 3)", "Fix:")),
    Row("text-file-missing", cli(*SMALL, "--text-file", "{work}/nope.txt", "-o", "{work}/o.png"), 2,
        ("no such file", "check the path")),
]

# --- a model's own files: checked before they are read, every damage named ------------------------------------

def tiny_with(kind: str, changes: dict, *argv: str) -> Make:
    """A copy of the tiny `kind` checkpoint in the row's folder with `changes` merged into its config.json, then
    `attnviz render --model m --text "the cat sat" -o o.png` with `argv` added."""
    def make(work: Path, models):
        import shutil

        folder = work / "m"
        shutil.copytree(models(kind), folder)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **changes}))
        return ["--model", str(folder), "--text", "the cat sat", "-o", str(work / "o.png"), *argv]
    return make


def tiny_tokenizer(kind: str, pre_tokenizer: dict, text: str) -> Make:
    """A copy of the tiny `kind` checkpoint whose tokenizer.json has `pre_tokenizer`, then `attnviz render --model m
    --text TEXT -o o.png`."""
    def make(work: Path, models):
        import shutil

        folder = work / "m"
        shutil.copytree(models(kind), folder)
        tokenizer = json.loads((folder / "tokenizer.json").read_text())
        (folder / "tokenizer.json").write_text(json.dumps({**tokenizer, "pre_tokenizer": pre_tokenizer}))
        return ["--model", str(folder), "--text", text, "-o", str(work / "o.png")]
    return make


def tiny_chat(template: str) -> Make:
    """A copy of the tiny llama checkpoint whose tokenizer_config.json holds `template` as its chat template, then
    `attnviz render --model m --text "the cat sat" --chat -o o.png`."""
    def make(work: Path, models):
        import shutil

        folder = work / "m"
        shutil.copytree(models("llama"), folder)
        (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
        return ["--model", str(folder), "--text", "the cat sat", "--chat", "-o", str(work / "o.png")]
    return make


CHAT_FIX = "Fix: turn the chat template off"
CHAT_ROWS = [  # hostile chat templates: each ends in its own process (models/chat_render.py), attnviz's never
    Row("chat-template-nested-ranges", tiny_chat("{% for i in range(100000) %}{% for j in range(100000) %}"
                                                 "{% endfor %}{% endfor %}"), 2,
        ("--chat", "the model's chat template did not finish within 5 s", CHAT_FIX), computes=True),
    Row("chat-template-repeat-1e9", tiny_chat("{{ 'x' * 10**9 }}"), 2,
        ("chat template repeats a text 1,000,000,000 times", "over the 4,194,304", CHAT_FIX), computes=True),
    Row("chat-template-huge-power", tiny_chat("{{ 2 ** 100000000 }}"), 2,
        ("chat template raises 2 to the power 100,000,000", CHAT_FIX), computes=True),
    Row("chat-template-long-output", tiny_chat("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}"), 2,
        ("chat template wrote over 4,194,304 characters", CHAT_FIX), computes=True),
    Row("chat-template-doubling", tiny_chat("{% set ns = namespace(s='x') %}{% for i in range(40) %}"
                                            "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}"), 2,
        ("chat template needed over 1,024 MiB of memory", CHAT_FIX), computes=True,
        chat_time_s=120.0),  # the memory cap must come first, also where a loaded machine takes 5 s to copy 1 GiB
]


# Oniguruma gives up backtracking `(a+)+b` over 30 a's and tokenizers panics (pyo3's PanicException)
CATASTROPHIC_SPLIT = {"type": "Split", "pattern": {"Regex": "(a+)+b"}, "behavior": "Isolated", "invert": False}


def rope(**parameters) -> dict:
    return {"rope_parameters": {"rope_theta": 10000.0, **parameters}}


WITH_WEIGHTS = {"tokenizer.json": b"{}", "model.safetensors": safetensors({})}
MODEL_ROWS = [
    Row("config-json-fifo", model({"config.json": FIFO, **WITH_WEIGHTS}), 2,
        ("config.json exists but is a pipe (FIFO)", "not a regular file"), computes=True),
    Row("config-json-dev-zero", model({"config.json": DEV_ZERO, **WITH_WEIGHTS}), 2,
        ("config.json exists but is a character device",), computes=True),
    Row("config-json-5gb", model({"config.json": ("sparse", 5 << 30), **WITH_WEIGHTS}), 2,
        ("config.json is 5.00 GiB", "far larger than a model's"), computes=True),
    Row("config-json-nested", model({"config.json": b"[" * 100_000 + b"]" * 100_000, **WITH_WEIGHTS}), 2,
        ("config.json is nested too deeply",), computes=True),
    Row("shard-index-empty", model({"config.json": GPT2_CONFIG, "tokenizer.json": b"{}",
                                    "model.safetensors.index.json": b'{"weight_map": {}}'}), 2,
        ("the shard index has no weight_map", "empty"), computes=True),
    Row("shard-index-list", model({"config.json": GPT2_CONFIG, "tokenizer.json": b"{}",
                                   "model.safetensors.index.json": b'{"weight_map": ["a.safetensors"]}'}), 2,
        ("no weight_map", "list"), computes=True),
    Row("shard-index-not-an-object", model({"config.json": GPT2_CONFIG, "tokenizer.json": b"{}",
                                            "model.safetensors.index.json": b"[1]"}), 2,
        ("no weight_map",), computes=True),
    Row("shard-index-path", model({"config.json": GPT2_CONFIG, "tokenizer.json": b"{}",
                                   "model.safetensors.index.json": b'{"weight_map": {"w": "../../x.safetensors"}}'}),
        2, ("the shard index names '../../x.safetensors', not a file in the folder",), computes=True),
    *[Row(f"rope-{name}", tiny_with("llama", changes), 2,
          ("rope_parameters = ", "RoPE settings are invalid", *words, "restore the config.json"), computes=True)
      for name, changes, words in (
          ("linear-half", rope(rope_type="linear", factor=0.5), ("factor", "0.5")),
          ("linear-negative", rope(rope_type="linear", factor=-1.0), ("factor", "-1")),
          ("dynamic-zero", rope(rope_type="dynamic", factor=0.0), ("factor",)),
          ("llama3-equal-factors", rope(rope_type="llama3", factor=8.0, low_freq_factor=4.0, high_freq_factor=4.0,
                                        original_max_position_embeddings=8), ("high_freq_factor",)))],
    Row("tokenizer-regex-panic", tiny_tokenizer("gpt2", CATASTROPHIC_SPLIT, "a" * 40), 2,
        ("the tokenizer (tokenizer.json) crashed on this text", "retry-limit-in-match", "Fix: restore the tokenizer"),
        computes=True),
    *[Row(f"safetensors-header-{name}", model({"config.json": GPT2_CONFIG, "tokenizer.json": b"{}",
                                               "model.safetensors": safetensors(header, b"xxxx")}), 2,
          ("corrupt or truncated safetensors file", *words), computes=True)
      for name, header, words in (
          ("list", [], ("not a JSON object",)), ("null", None, ("not a JSON object",)),
          ("shape-abc", {"w": {"dtype": "F32", "shape": "abc", "data_offsets": [0, 4]}}, ("'w'", "shape")),
          ("offsets-backwards", {"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}, ("data_offsets",)))],
]

def huge_png(work: Path, models):
    """A 12000 x 12000 PNG (a few hundred KB on disk, 432 MB once decoded as RGB)."""
    from PIL import Image

    from attnviz.models.image_input import read_image

    Image.new("1", (12000, 12000)).save(work / "huge.png")
    return lambda: read_image(str(work / "huge.png"))


IMAGE_ROWS = [
    Row("image-12000-square", huge_png, 2, ("image = ", "12000 x 12000 pixels (144 MP)", "scale the image down")),
]

# --- where the output goes -----------------------------------------------------------------------------------

OUTPUT_ROWS = [
    Row("output-folder-missing", cli(*SMALL, "-o", "{work}/no-such-folder/maps.png"), 2,
        ("no-such-folder", "does not exist", "create it")),
    Row("output-link", links({"link.png": "real.png"}, *SMALL, "-o", "{work}/link.png"), 2,
        ("-o", "link.png: is a symbolic link", "real.png", "give the file's own path")),
    Row("output-dangling-link", links({"link.png": "gone.png"}, *SMALL, "-o", "{work}/link.png"), 2,
        ("is a symbolic link",)),
    Row("output-link-chain", links({"a.npz": "b.npz", "b.npz": "real.npz"}, *SMALL, "-o", "{work}/a.npz"), 2,
        ("is a symbolic link",)),
    Row("stats-link", links({"s.csv": "real.csv"}, *SMALL, "--stats", "{work}/s.csv"), 2,
        ("--stats", "is a symbolic link")),
    Row("output-trailing-slash", cli(*SMALL, "-o", "{work}/o.png/"), 2, ("ends with a slash", "give a file name")),
    Row("tables-same-file", cli("--variant", "toy-induction", "--predictions", "{work}/t.csv", "--head-scores",
                                "{work}/t.csv"), 2, ("--predictions and --head-scores name the same file",)),
    Row("tables-same-file-by-another-path", folder("d", "--variant", "toy-induction", "--stats", "{work}/t.csv",
                                                   "--predictions", "{work}/d/../t.csv"), 2,
        ("--stats and --predictions name the same file",)),
    *[Row(f"long-name-{flag.strip('-')}", cli(*extra, flag, "{work}/" + "x" * 300 + suffix), 2,
          (flag, "too long", "Fix:" if flag in ("--model", "--config", "--text-file") else "choose another name"),
          computes=flag == "--model")
      for flag, suffix, extra in (("-o", ".png", SMALL), ("--stats", ".csv", SMALL),
                                  ("--model", "", ("--text", "hi", "-o", "{work}/o.png")),
                                  ("--config", ".json", ("-o", "{work}/o.png")),
                                  ("--text-file", ".txt", (*SMALL, "-o", "{work}/o.png")))],
    Row("output-folder-is-a-file", write("afile", "x", *SMALL, "-o", "{work}/afile/maps.npz"), 2,
        ("is a file, not a folder; choose another folder",)),
]

# --- GGUF files ----------------------------------------------------------------------------------------------
# A tiny llama GGUF (tests/models/tiny.py), damaged: each refused before anything is allocated or drawn, naming
# the damage (models/gguf_reader.py).
LOTS = 1 << 60


def gguf(damage: Callable[[bytearray, dict], bytes | bytearray]) -> Make:
    """`damage(the file's bytes, where its fields lie)` written as model.gguf, then `attnviz render --model` it."""
    def make(work: Path, models):
        with contextlib.redirect_stderr(io.StringIO()):  # building the tiny model draws a progress bar
            good = _good_gguf(models)
        (work / "model.gguf").write_bytes(bytes(damage(bytearray(good.read_bytes()), _fields(good))))
        return ["--model", str(work / "model.gguf"), "--text", "hi", "-o", str(work / "o.png")]
    return make


def _good_gguf(models) -> Path:
    path = models("llama").parent / "tiny-llama.gguf"
    if not path.exists():
        from tiny import write_llama_gguf

        write_llama_gguf(models("llama"), path)
    return path


def _fields(path: Path) -> dict:
    """Byte positions of the fields the rows damage, and the tensors' offsets, found with gguf's own reader."""
    import gguf as gguf_package

    reader = gguf_package.GGUFReader(str(path))
    at = lambda part: int(part.ctypes.data - reader.data.ctypes.data)  # noqa: E731
    start = min(int(t.data_offset) for t in reader.tensors)
    return {"offset_at": [at(t.field.parts[-1]) for t in reader.tensors],
            "type_at": [at(t.field.parts[4]) for t in reader.tensors],
            "offset": [int(t.data_offset) - start for t in reader.tensors],
            "tokens_count_at": at(reader.fields["tokenizer.ggml.tokens"].parts[4])}


def put(data: bytearray, at: int, fmt: str, value: int) -> bytearray:
    data[at:at + struct.calcsize(fmt)] = struct.pack(fmt, value)
    return data


GGUF_ROWS: list[Row] = [
    Row("gguf-empty", gguf(lambda d, f: b""), 2, ("the file is empty (0 bytes)", "Fix:"), computes=True),
    Row("gguf-wrong-magic", gguf(lambda d, f: b"PK\x03\x04" + d[4:]), 2,
        ("not a GGUF file: it starts with b'PK", "magic bytes"), computes=True),
    Row("gguf-header-cut", gguf(lambda d, f: d[:12]), 2, ("cut short: 12 bytes",), computes=True),
    Row("gguf-version-1", gguf(lambda d, f: put(d, 4, "<I", 1)), 2, ("GGUF version 1",), computes=True),
    Row("gguf-2^60-tensors", gguf(lambda d, f: put(d, 8, "<Q", LOTS)), 2,
        ("truncated or damaged", "promises 1,152,921,504,606,846,976 tensors"), computes=True),
    Row("gguf-2^60-metadata-entries", gguf(lambda d, f: put(d, 16, "<Q", LOTS)), 2,
        ("promises 1,152,921,504,606,846,976 metadata entries",), computes=True),
    Row("gguf-key-2^60-bytes", gguf(lambda d, f: put(d, 24, "<Q", LOTS)), 2,
        ("metadata entry 1 of", "needs 1,152,921,504,606,846,976 bytes at byte 32"), computes=True),
    Row("gguf-2^60-tokens", gguf(lambda d, f: put(d, f["tokens_count_at"], "<Q", LOTS)), 2,
        ("'tokenizer.ggml.tokens' promises 1,152,921,504,606,846,976 values",), computes=True),
    Row("gguf-cut-at-1kb", gguf(lambda d, f: d[:1024]), 2, ("truncated or damaged",), computes=True),
    Row("gguf-cut-in-the-data", gguf(lambda d, f: d[:-100]), 2,
        ("truncated or damaged: tensor", "ends at byte"), computes=True),
    Row("gguf-unknown-quantisation", gguf(lambda d, f: put(d, f["type_at"][0], "<I", 250)), 2,
        ("quantisation type 250, which the gguf package does not know",), computes=True),
    Row("gguf-offset-unaligned", gguf(lambda d, f: put(d, f["offset_at"][1], "<Q", f["offset"][1] + 4)), 2,
        ("not a multiple of the file's alignment 32",), computes=True),
    Row("gguf-offset-wrapping-past-2^64", gguf(lambda d, f: put(d, f["offset_at"][1], "<Q", (1 << 64) - 32)), 2,
        ("ends at byte",), computes=True),
    Row("gguf-tensors-overlapping", gguf(lambda d, f: put(d, f["offset_at"][2], "<Q", f["offset"][1])), 2,
        ("overlap",), computes=True),
    Row("gguf-offset-past-the-end", gguf(lambda d, f: put(d, f["offset_at"][0], "<Q", 1 << 40)), 2,
        ("ends at byte",), computes=True),
]

ROWS = CONFIG_ROWS + FILE_ROWS + MODEL_ROWS + CHAT_ROWS + IMAGE_ROWS + OUTPUT_ROWS + GGUF_ROWS


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """kind -> a tiny random checkpoint folder (tests/models/tiny.py), built once per module."""
    sys.path.insert(0, str(Path(__file__).parent / "models"))
    from tiny import BUILDERS

    root, built = tmp_path_factory.mktemp("tiny"), {}

    def get(kind: str) -> Path:
        if kind not in built:
            pytest.importorskip("transformers")
            built[kind] = root / kind
            built[kind].mkdir()
            BUILDERS[kind](built[kind])
        return built[kind]
    return get


def snapshot(work: Path) -> dict[str, tuple]:
    """Every entry under `work` with its kind, size and modification time (links not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(work):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), work)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def outcome(what: Any, capsys) -> tuple[int, str]:
    """(exit status, the one line) of a command line or an API call."""
    if isinstance(what, list):
        code = main(["render", *what])
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert "Traceback" not in err and len(lines) <= 1, err
        return code, lines[0] if lines else ""
    try:
        what()
    except ConfigError as exc:
        assert len(str(exc).splitlines()) == 1 and ". Fix: " in str(exc), str(exc)
        return 2, str(exc)
    return 0, ""


@pytest.fixture
def forbid_compute(monkeypatch):
    """A forward pass that starts fails the row (run() is looked up from attnviz.core at call time; the API's
    rows call run() itself, which may check its arguments but must not reach a forward)."""
    import attnviz.core
    from attnviz.core.runs import runner

    def forbidden(*args, **kwargs):
        raise AssertionError("a forward pass started: the bad input was not refused before compute")

    def apply():
        monkeypatch.setattr(runner, "run", forbidden)
        monkeypatch.setattr(attnviz.core, "run", forbidden)
        for name in ("run_forward", "_seed_forward"):
            monkeypatch.setattr(runner, name, forbidden)
    return apply


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input(row: Row, tmp_path, capsys, models, forbid_compute, qapp, monkeypatch):
    if row.chat_time_s is not None:
        from attnviz.models import chat_render

        monkeypatch.setattr(chat_render, "TIME_LIMIT_S", row.chat_time_s)
    work = tmp_path / "work"
    work.mkdir()
    what = row.make(work, models)
    capsys.readouterr()  # what building a tiny checkpoint printed is no part of the row's line
    if not row.computes:
        forbid_compute()
    before = snapshot(work)
    code, line = outcome(what, capsys)
    assert code == row.code, line
    for word in row.words:
        assert word in line, f"{word!r} not in {line!r}"
    assert snapshot(work) == before, "a refused input wrote or removed something"


def test_numpy_scalars_and_whole_floats_are_taken_as_python_values():
    """The other side of the api-* rows: what is a whole number, a number or a truth value is accepted, as
    Python's own type (a saved configuration writes it as JSON, a tuple of lengths compares equal)."""
    config = RunConfig(heads=np.int64(4), seq_q=np.int32(8), seed=5.0, dropout=np.float32(0.25), train=np.bool_(True),
                       rope_base=np.int64(500000), mask="padding", kv_lengths=np.array([3]))
    assert config == RunConfig(heads=4, seq_q=8, seed=5, dropout=0.25, train=True, rope_base=500000, mask="padding",
                               kv_lengths=(3,))
    for name, kind in (("heads", int), ("seq_q", int), ("seed", int), ("dropout", float), ("train", bool),
                       ("rope_base", int)):
        assert type(getattr(config, name)) is kind, name
    assert type(config.kv_lengths[0]) is int
    assert json.loads(config.to_json())["config"]["heads"] == 4
    assert RunConfig.from_json(config.to_json()) == config


def test_a_tiny_temperature_samples_the_greedy_token(tmp_path, capsys, qapp):
    """--temperature 1e-40 is valid (near greedy): it once divided the logits into inf - inf = NaN, which
    torch.multinomial refused with a bare RuntimeError. Its limit, the greedy token, is what it picks."""
    import torch

    from attnviz.core.runs.generation import choose

    logits = torch.tensor([1.0, 3.0, -2.0, 2.5])
    for temperature in (1e-40, 1e-30, 5e-324):
        assert choose(logits, temperature, 0, torch.Generator().manual_seed(0)) == 1
        assert choose(logits, temperature, 2, torch.Generator().manual_seed(0)) == 1
    out = tmp_path / "t.npz"
    args = ["render", "--variant", "toy-induction", "--generate", "2", "-o", str(out)]
    assert main([*args, "--temperature", "1e-40"]) == 0 and out.exists()
    sampled = np.load(out)["weights"]
    assert main(args) == 0  # greedy
    assert np.array_equal(np.load(out)["weights"], sampled)


def test_an_svg_of_a_text_with_control_characters_is_well_formed(models, tmp_path, capsys, qapp):
    """Token labels holding control characters (ESC, U+0001, DEL) are drawn as their pictures (␛ ␁ ␡): XML 1.0
    cannot hold them, and an SVG that did was no longer readable."""
    from xml.etree import ElementTree

    out = tmp_path / "maps.svg"
    text = "The cat\x01 sat\x1b[31m on\x7f the mat."
    assert main(["render", "--model", str(models("gpt2")), "--text", text, "-o", str(out)]) == 0
    root = ElementTree.parse(out).getroot()  # raises on a document that is not well-formed
    labels = "".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "␁" in labels and "␛" in labels and "␡" in labels


def test_a_byte_order_mark_is_no_part_of_the_text(models, tmp_path, capsys, qapp):
    """Notepad's UTF-8 starts with U+FEFF: from --text, a text file or the API, it is dropped, not three tokens."""
    folder = str(models("gpt2"))
    plain = run(RunConfig(variant="pretrained", model=folder, text="The cat sat."))
    marked = RunConfig(variant="pretrained", model=folder, text="\ufeffThe cat sat.")
    assert marked.text == "The cat sat." and run(marked).tokens == plain.tokens
    text_file = tmp_path / "bom.txt"
    text_file.write_bytes(b"\xef\xbb\xbfThe cat sat.")
    out = tmp_path / "o.npz"
    assert main(["render", "--model", folder, "--text-file", str(text_file), "-o", str(out)]) == 0
    assert json.loads(str(np.load(out)["config"]))["config"]["text"] == "The cat sat."


def test_a_text_far_longer_than_the_model_is_judged_by_its_start(models, tmp_path, capsys, monkeypatch, qapp):
    """A 13 MB --text-file for a model of a few dozen positions: refused (exit 2, the count and the fix) after
    tokenizing only its start, not all of it (that took minutes and gigabytes); --truncate still cuts it to fit."""
    from attnviz.models import loader
    from attnviz.models.tokens import TextTokenizer

    text_file = tmp_path / "long.txt"
    text_file.write_text("The cat sat on the mat. " * 550_000)
    seen: list[int] = []
    encode = TextTokenizer.encode
    monkeypatch.setattr(TextTokenizer, "encode", lambda self, text, *a, **k: (seen.append(len(text)),
                                                                              encode(self, text, *a, **k))[1])
    args = ["render", "--model", str(models("gpt2")), "--text-file", str(text_file), "-o", str(tmp_path / "o.npz")]
    assert main(args) == 2
    line = capsys.readouterr().err.strip()
    assert "over" in line and "tokens (its first" in line and "reads at most" in line and "truncate" in line
    limit = int(line.split("reads at most ")[1].split()[0])
    assert seen and max(seen) <= limit * loader.PROBE_CHARS_PER_POSITION < text_file.stat().st_size
    assert main([*args, "--truncate"]) == 0
    tokens = json.loads(str(np.load(tmp_path / "o.npz")["config"]))["config"]["text"]
    assert tokens and "The cat sat" in tokens and len(tokens) < 64 * limit


def test_a_16_bit_grey_png_keeps_its_greys(tmp_path):
    """convert("RGB") clipped every 16-bit value over 255: half-grey 32768 came out white."""
    from PIL import Image

    from attnviz.models.image_input import read_image

    grey = np.full((16, 24), 32768, dtype=np.uint16)
    grey[:, :12] = 8000
    Image.fromarray(grey).save(tmp_path / "g16.png")
    pixels = np.asarray(read_image(str(tmp_path / "g16.png")))
    assert pixels.shape == (16, 24, 3)
    assert (pixels[:, 12:] == round(32768 / 257)).all() and (pixels[:, :12] == round(8000 / 257)).all()


def test_exif_orientation_is_applied(tmp_path):
    """A phone's portrait JPEG (Orientation 6: rotate 90 degrees clockwise to view) is read standing up."""
    from PIL import Image

    from attnviz.models.image_input import read_image

    stored = Image.new("RGB", (20, 10), (255, 0, 0))
    stored.paste((0, 0, 255), (0, 0, 5, 10))  # blue on the left as stored: on top once turned
    exif = stored.getexif()
    exif[0x0112] = 6
    stored.save(tmp_path / "portrait.jpg", exif=exif, quality=95)
    pixels = np.asarray(read_image(str(tmp_path / "portrait.jpg"))).astype(int)
    assert pixels.shape == (20, 10, 3)
    assert pixels[1, 5, 2] > 200 and pixels[1, 5, 0] < 60  # top: blue
    assert pixels[18, 5, 0] > 200 and pixels[18, 5, 2] < 60  # bottom: red


def test_a_tokenizer_panic_is_one_line_on_the_processes_own_stderr(models, tmp_path):
    """Rust's panic hook writes its own lines straight to file descriptor 2, past capsys: the command, run as a
    user runs it, still says one line (ours), and writes nothing."""
    import subprocess

    args = tiny_tokenizer("gpt2", CATASTROPHIC_SPLIT, "a" * 40)(tmp_path, models)
    env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
    done = subprocess.run([sys.executable, "-m", "attnviz", "render", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "crashed on this text" in done.stderr and "panicked" not in done.stderr
    assert not (tmp_path / "o.png").exists()
