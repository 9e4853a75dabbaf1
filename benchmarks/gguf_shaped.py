"""Llama-3-shaped Q4_0 GGUFs with random weights: open time, one 128-token forward with every layer's maps,
peak RSS, against the targets (8B: open <= 60 s, peak RSS <= 8 GB on a 24 GB machine).

    python -m benchmarks.gguf_shaped                    # the 8B shape (~4.6 GB file under /tmp)
    python -m benchmarks.gguf_shaped --shapes 1b 3b 8b  # the Llama 3.2 1B and 3B shapes too
    python -m benchmarks.gguf_shaped --storage float16  # force a storage (float32, float16, blocks)

Each file is written once into the temporary folder (never committed; kept for reruns unless --clean) with
gguf's GGUFWriter, tensor by tensor (nothing held whole in memory): normal random weights (std 0.02)
quantised with gguf.quants.quantize to Q4_0, norms of ones, a byte-level vocabulary of 128,256 tokens.
Each measurement runs in a fresh process: torch and transformers imported first, then the clock runs over
load_model(path, memory_budget=--budget) (the header, config, tokenizer, the matrices kept compact, the
attention layers found by short forwards), then over run() of a 128-token text recording every layer's
maps (the app's own path, the run's memory check included). Peak RSS is the child's ru_maxrss (the file's
pages the forward touched count: they are mapped). The load average is recorded around each child (the
machine may be shared). Output: a table on stdout and benchmarks/out/results-gguf-shaped.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from .common import BENCH_DIR, ROOT, load_average, log, machine_info

# layers, width, heads, kv heads, feed-forward width, tied embeddings (Llama 3.1 8B, Llama 3.2 1B / 3B)
SHAPES = {"1b": (16, 2048, 32, 8, 8192, True), "3b": (28, 3072, 24, 8, 8192, True),
          "8b": (32, 4096, 32, 8, 14336, False)}
VOCAB = 128_256
ROWS_AT_ONCE = 4096  # rows drawn and quantised at a time
CHILD = r"""
import json, os, resource, sys, time
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
from attnviz.models.hf_attention import transformers
transformers()
path, budget, storage = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if storage != "auto":  # a forced storage: the budget the larger forms exceed
    os.environ["ATTNVIZ_COMPACT"] = storage
    from attnviz.models.compact import storage_sizes
    from attnviz.models.gguf_files import gguf_header
    from pathlib import Path
    budget = storage_sizes(gguf_header(Path(path)))[storage]
from attnviz.core import RunConfig, run
from attnviz.models import load_model
t0 = time.perf_counter()
model = load_model(path, memory_budget=budget)
opened = time.perf_counter() - t0
rss_open = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
text = "".join(chr(ord("a") + i % 26) for i in range(127))  # one byte-level token each, after the BOS
t0 = time.perf_counter()
result = run(RunConfig(variant="pretrained", model=path, text=text, layer=0),
             memory_budget=int(sys.argv[2]))
forward = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"open_s": opened, "forward_s": forward, "tokens": len(result.tokens),
                  "layers": int(result.layer_weights.shape[0]), "rss_after_open": rss_open, "peak_rss": peak,
                  "weights_bytes": model.info.parameter_bytes, "notes": list(model.load_notes)}))
"""


def write_shaped(path: Path, shape: str, seed: int = 0) -> None:
    """A Llama-3-shaped GGUF of random Q4_0 weights, written tensor by tensor."""
    import gguf

    layers, width, heads, kv, ffn, tied = SHAPES[shape]
    head_dim = width // heads
    w = gguf.GGUFWriter(str(path), "llama")
    for add, value in ((w.add_block_count, layers), (w.add_context_length, 8192), (w.add_embedding_length, width),
                       (w.add_feed_forward_length, ffn), (w.add_head_count, heads), (w.add_head_count_kv, kv),
                       (w.add_rope_dimension_count, head_dim), (w.add_rope_freq_base, 500000.0),
                       (w.add_layer_norm_rms_eps, 1e-5), (w.add_vocab_size, VOCAB), (w.add_file_type, 2)):
        add(value)
    w.add_name(f"random-llama-{shape}")
    _add_vocabulary(w)
    tensors = [("token_embd.weight", (VOCAB, width)), ("output_norm.weight", (width,))]
    tensors += [] if tied else [("output.weight", (VOCAB, width))]
    for i in range(layers):
        tensors += [(f"blk.{i}.attn_norm.weight", (width,)), (f"blk.{i}.attn_q.weight", (width, width)),
                    (f"blk.{i}.attn_k.weight", (kv * head_dim, width)),
                    (f"blk.{i}.attn_v.weight", (kv * head_dim, width)),
                    (f"blk.{i}.attn_output.weight", (width, width)), (f"blk.{i}.ffn_norm.weight", (width,)),
                    (f"blk.{i}.ffn_gate.weight", (ffn, width)), (f"blk.{i}.ffn_up.weight", (ffn, width)),
                    (f"blk.{i}.ffn_down.weight", (width, ffn))]
    q4 = gguf.GGMLQuantizationType.Q4_0
    for name, dims in tensors:
        if len(dims) == 1:
            w.add_tensor_info(name, dims, np.dtype(np.float32), dims[0] * 4)
        else:
            w.add_tensor_info(name, (dims[0], dims[1] // 32 * 18), np.dtype(np.uint8), dims[0] * dims[1] // 32 * 18,
                              raw_dtype=q4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for _name, dims in tensors:
        if len(dims) == 1:
            w.write_tensor_data(np.ones(dims, dtype=np.float32))
            continue
        out = np.empty((dims[0], dims[1] // 32 * 18), dtype=np.uint8)
        for start in range(0, dims[0], ROWS_AT_ONCE):
            rows = rng.standard_normal((min(ROWS_AT_ONCE, dims[0] - start), dims[1]), dtype=np.float32) * 0.02
            out[start:start + len(rows)] = gguf.quants.quantize(rows, q4)
        w.write_tensor_data(out)
    w.close()


def file_bytes(shape: str) -> int:
    """The Q4_0 file's size, near enough (18 bytes per 32 values)."""
    layers, width, heads, kv, ffn, tied = SHAPES[shape]
    per_layer = 2 * width * width + 2 * width * (kv * width // heads) + 3 * width * ffn
    return (layers * per_layer + (1 if tied else 2) * VOCAB * width) * 18 // 32


def _add_vocabulary(w) -> None:
    """A byte-level BPE vocabulary of VOCAB tokens: the 256 byte symbols, filler words, Llama 3's specials."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    symbols = list(bytes_to_unicode().values())
    # the end token spelt as GPT-2's, which transformers' converter adds where it is missing
    specials = ["<|begin_of_text|>", "<|endoftext|>"] + [f"<|reserved_special_token_{i}|>" for i in range(254)]
    words = [f"w{i}" for i in range(VOCAB - len(symbols) - len(specials))]
    tokens = symbols + words + specials
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types([1] * (VOCAB - len(specials)) + [3] * len(specials))
    w.add_token_merges(["w 0"])  # one merge: the converter wants some
    w.add_bos_token_id(VOCAB - len(specials))
    w.add_eos_token_id(VOCAB - len(specials) + 1)
    w.add_add_bos_token(True)


def one(path: Path, budget: int, storage: str) -> dict:
    before = load_average()
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(budget), storage], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "load_before": before, "load_after": load_average()}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    folder = Path(args.folder or tempfile.gettempdir()) / "attnviz-gguf-shaped"
    folder.mkdir(exist_ok=True)
    doc = {"machine": machine_info(), "budget": args.budget, "rows": {}}
    for shape in args.shapes:
        path = folder / f"random-llama-{shape}-q4_0.gguf"
        if not path.exists():
            if shutil.disk_usage(folder).free < 2 * file_bytes(shape):
                log(f"not enough free disk in {folder} for the {shape} file: skipped")
                continue
            log(f"writing {path}")
            t0 = time.perf_counter()
            write_shaped(path.with_suffix(".part"), shape)
            path.with_suffix(".part").rename(path)
            log(f"written in {time.perf_counter() - t0:.0f} s")
        for storage in args.storage:
            log(f"{shape} {storage}")
            doc["rows"][f"{shape} {storage}"] = {"bytes": path.stat().st_size, **one(path, args.budget, storage)}
        if args.clean:
            path.unlink()
    out = BENCH_DIR / "out" / "results-gguf-shaped.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"{'shape':16} {'GB':>5} {'open s':>7} {'128-token run s':>16} {'peak RSS GiB':>13} {'load':>10}")
    for name, r in doc["rows"].items():
        print(f"{name:16} {r['bytes'] / 1e9:5.2f} {r['open_s']:7.1f} {r['forward_s']:16.1f} "
              f"{r['peak_rss'] / 2**30:13.2f} {_load(r['load_before'])}-{_load(r['load_after'])}")
    return 0


def _load(average: list[float] | None) -> str:
    return "?" if not average else f"{average[0]:.1f}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gguf_shaped", description="Llama-3-shaped random "
                                     "Q4_0 GGUFs: open, a 128-token forward, peak RSS")
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["8b"])
    parser.add_argument("--storage", nargs="+", choices=["auto", "float32", "float16", "blocks"], default=["auto"],
                        help="auto: what attnviz chooses under --budget; else that storage forced")
    parser.add_argument("--budget", type=int, default=8 << 30, help="memory budget in bytes (default 8 GiB)")
    parser.add_argument("--folder", help="where the files are written (default: the temporary folder)")
    parser.add_argument("--clean", action="store_true", help="delete each file after its rows")
    return parser


if __name__ == "__main__":
    sys.exit(main())
