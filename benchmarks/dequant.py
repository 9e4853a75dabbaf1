"""Compact weights' block formulas: NumPy's against torch's on the CPU, and torch's on a CUDA device.

    python -m benchmarks.dequant                  # 4096 x 4096 Q4_0 and Q4_K, 7 interleaved rounds
    python -m benchmarks.dequant --rounds 15 --types Q4_0 Q5_K

One matrix per type, 4096 x 4096 (16M values: one call of a compact Linear, CHUNK_VALUES), of random blocks
with float16 scales like a trained model's (about 0.002). Each contender is what CompactWeight.dense() runs:
on the CPU, compact._dequantized (NumPy's formulas on the pool's threads, the path attnviz takes there)
against gguf_dequant_torch.dequantize_rows (torch's formulas on torch's threads), timed side by side in
one process, the order rotating each round, with the paired ratio per round. With CUDA, two more: torch's
formulas on the device (the blocks there, synchronised), and the round trip the device would otherwise make
(blocks to the host, NumPy's formulas, float32 back). Without CUDA those rows say so. Every row records the
load average around it (the machine may be shared). Output: a table on stdout and
benchmarks/out/results-dequant.json.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from .common import BENCH_DIR, interleaved, load_average, log, machine_info, median, paired_ratios, skipped

SCALE_AT = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q4_K": (0, 2),
            "Q5_K": (0, 2), "Q6_K": (208,)}  # where each block keeps its float16 scales
SIDE = 4096


def random_blocks(qtype: str, rows: int, columns: int, seed: int = 0) -> np.ndarray:
    """(rows, bytes per row) random blocks of `qtype` with finite float16 scales near a trained model's."""
    import gguf

    kind = gguf.GGMLQuantizationType[qtype]
    values, size = gguf.GGML_QUANT_SIZES[kind]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows * columns // values, size), dtype=np.uint8)
    for at in SCALE_AT[qtype]:
        raw[:, at:at + 2] = rng.uniform(0.001, 0.003, (len(raw), 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(rows, -1)


def cpu_row(qtype: str, rounds: int) -> dict:
    import torch

    from attnviz.models.compact import _dequantized
    from attnviz.models.gguf_dequant import BLOCKS
    from attnviz.models.gguf_dequant_torch import dequantize_rows

    qvalue = _qtype(qtype)
    raw = random_blocks(qtype, SIDE, SIDE)
    blocks = torch.from_numpy(raw)
    assert qvalue in BLOCKS and torch.equal(_dequantized(raw, qvalue, SIDE), dequantize_rows(blocks, qvalue, SIDE))
    before = load_average()
    times = interleaved({"numpy": lambda: _dequantized(raw, qvalue, SIDE),
                         "torch": lambda: dequantize_rows(blocks, qvalue, SIDE)}, rounds)
    ratios = paired_ratios(times["torch"], times["numpy"])
    return {"numpy_s": times["numpy"], "torch_s": times["torch"], "torch_over_numpy": ratios,
            "torch_threads": torch.get_num_threads(), "load_before": before, "load_after": load_average()}


def cuda_row(qtype: str, rounds: int) -> dict:
    import torch

    if not torch.cuda.is_available():
        return skipped("needs a CUDA device")
    from attnviz.models.compact import _dequantized
    from attnviz.models.gguf_dequant_torch import dequantize_rows

    qvalue = _qtype(qtype)
    blocks = torch.from_numpy(random_blocks(qtype, SIDE, SIDE)).to("cuda")

    def on_device():
        out = dequantize_rows(blocks, qvalue, SIDE)
        torch.cuda.synchronize()
        return out

    def round_trip():
        out = _dequantized(blocks.cpu().numpy(), qvalue, SIDE).to("cuda")
        torch.cuda.synchronize()
        return out

    assert torch.equal(on_device(), round_trip())
    times = interleaved({"device": on_device, "round_trip": round_trip}, rounds)
    return {"device_s": times["device"], "round_trip_s": times["round_trip"],
            "device_over_round_trip": paired_ratios(times["device"], times["round_trip"]),
            "gpu": torch.cuda.get_device_name()}


def _load(average: list[float] | None) -> str:
    return "?" if not average else f"{average[0]:.1f}"


def _qtype(name: str) -> int:
    import gguf

    return gguf.GGMLQuantizationType[name].value


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    doc = {"machine": machine_info(), "shape": [SIDE, SIDE], "rows": {}}
    for qtype in args.types:
        log(f"{qtype}: CPU")
        doc["rows"][f"{qtype} cpu"] = cpu_row(qtype, args.rounds)
        log(f"{qtype}: CUDA")
        doc["rows"][f"{qtype} cuda"] = cuda_row(qtype, args.rounds)
    out = BENCH_DIR / "out" / "results-dequant.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    print(f"{'matrix':12} {'where':5} {'NumPy ms':>9} {'torch ms':>9} {'torch / NumPy (paired)':>23} {'load':>9}")
    for name, r in doc["rows"].items():
        qtype, where = name.split()
        if r.get("status") == "skipped":
            print(f"{qtype:12} {where:5} {r['reason']}")
        elif where == "cpu":
            ratio = median(r["torch_over_numpy"])
            print(f"{qtype:12} {where:5} {1e3 * median(r['numpy_s']):9.0f} {1e3 * median(r['torch_s']):9.0f} "
                  f"{ratio:22.2f}x {_load(r['load_before'])}-{_load(r['load_after'])}")
        else:
            print(f"{qtype:12} {where:5} round trip {1e3 * median(r['round_trip_s']):.1f} ms, on the device "
                  f"{1e3 * median(r['device_s']):.2f} ms ({r['gpu']})")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dequant", description="compact weights' block "
                                     "formulas: NumPy against torch on the CPU; torch on a CUDA device")
    parser.add_argument("--types", nargs="+", choices=sorted(SCALE_AT), default=["Q4_0", "Q4_K"])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per contender (after one warm-up)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
