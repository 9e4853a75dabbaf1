"""`python -m attnviz.toys train NAME [--steps N] [--seed S] [--out DIR]`: retrain a shipped toy.

Writes NAME.safetensors and NAME.json into the current folder unless --out names another: the shipped weights
(attnviz/resources/models) are replaced only where --out names that folder (a source checkout)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from attnviz.toys import TOYS, models_dir
from attnviz.toys.train import train_and_save


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnviz.toys", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train a toy and write NAME.safetensors + NAME.json")
    p.add_argument("name", choices=[*TOYS, "all"])
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the recipe's)")
    p.add_argument("--seed", type=int, default=None, help="seed for weights and data (default: the recipe's)")
    p.add_argument("--out", type=Path, default=Path("."),
                   help=f"output folder (default: the current one; the shipped weights are in {models_dir()})")
    args = parser.parse_args(argv)
    out = args.out
    for name in TOYS if args.name == "all" else [args.name]:
        print(f"training {name} -> {out.absolute()}", flush=True)
        info = train_and_save(TOYS[name], out, args.steps, args.seed,
                              log=lambda step, loss: print(f"  step {step:5d}  loss {loss:.4f}", flush=True))
        print(json.dumps({k: info[k] for k in ("training", "held_out", "heads")}, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
