"""The route users take today to get a picture of every head: seed forward + matplotlib.

Runs seed 002's CausalSelfAttention forward (its own code, unchanged), grabs the attention
weights with a forward hook on its dropout module (whose input is the softmax output), and draws
a grid of imshow subplots (4 x 4 for 16 heads) with titles and a colour bar, then savefig.

    python benchmarks/user_matplotlib_export.py -o grid.png --heads 16 --seq-q 512 --d-model 1024

The benchmark times this as a whole process, the same way it times `attnviz render`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq-q", type=int, default=512)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dpi", type=int, default=150)
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from seeds_reference import CausalSelfAttention, generate_mask

    torch.manual_seed(args.seed)
    model = CausalSelfAttention(hidden_dim=args.d_model, n_heads=args.heads).eval()
    x = torch.randn(1, args.seq_q, args.d_model)
    mask = generate_mask(x, causal=True)
    grabbed = {}
    model.dropout.register_forward_hook(lambda module, inputs, output: grabbed.update(w=inputs[0].detach()))
    with torch.no_grad():
        model(x, mask=mask)
    weights = grabbed["w"][0].numpy()  # (H, L, L)

    cols = math.ceil(math.sqrt(args.heads))
    rows = math.ceil(args.heads / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 4 * rows), squeeze=False)
    vmax = float(weights.max())
    im = None
    for h, ax in enumerate(axes.flat):
        if h >= args.heads:
            ax.axis("off")
            continue
        im = ax.imshow(weights[h], cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest")
        ax.set_title(f"head {h}", fontsize=9)
        ax.set_xlabel("key position j", fontsize=7)
        ax.set_ylabel("query position i", fontsize=7)
        ax.tick_params(labelsize=6)
    fig.suptitle(f"Attention weights, {args.heads} heads, L={args.seq_q}")
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.6, label="attention weight")
    fig.savefig(args.output, dpi=args.dpi)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
