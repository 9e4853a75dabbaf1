"""What each toy is: task, caption, default input, architecture and training recipe (one place)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnviz.toys.tasks import DIGITS, LETTERS, MAX_LEN, SEQ_LEN


@dataclass(frozen=True)
class ToySpec:
    name: str
    task: str  # "reverse", "sort" or "induction"
    description: str  # what the model was trained to do
    caption: str  # one line: what to look for in the maps
    default_text: str
    vocabulary: str  # the characters an input may use, one token each
    layer_names: tuple[str, ...]  # attention layers in forward order (--layer indexes them)
    focus_layer: int  # the layer to show first
    architecture: dict[str, Any] = field(hash=False)  # models.build() arguments
    steps: int = 0  # training recipe: Adam, constant learning rate, fresh random batches
    batch_size: int = 0
    lr: float = 1e-3
    seed: int = 0

    @property
    def layers(self) -> int:
        return len(self.layer_names)

    @property
    def heads(self) -> int:
        return self.architecture["heads"]


def _seq2seq(vocab: int) -> dict[str, Any]:
    return {"kind": "encoder-decoder", "vocab": vocab, "length": SEQ_LEN, "width": 64, "heads": 4, "layers": 2}


_ENC_DEC_LAYERS = ("encoder.0 self-attention", "encoder.1 self-attention", "decoder cross-attention")

TOYS: dict[str, ToySpec] = {
    spec.name: spec
    for spec in (
        ToySpec(
            name="toy-reverse",
            task="reverse",
            description=f"Encoder-decoder that outputs a sequence of {SEQ_LEN} digits reversed.",
            caption="Cross-attention: output j reads input L-1-j, so the map is an anti-diagonal.",
            default_text="31415926",
            vocabulary=DIGITS,
            layer_names=_ENC_DEC_LAYERS,
            focus_layer=2,
            architecture=_seq2seq(len(DIGITS)),
            steps=1000,
            batch_size=128,
            seed=12,
        ),
        ToySpec(
            name="toy-sort",
            task="sort",
            description=f"Encoder-decoder that outputs a sequence of {SEQ_LEN} digits sorted ascending.",
            caption="Cross-attention: output j reads the input holding the j-th smallest digit.",
            default_text="52819034",
            vocabulary=DIGITS,
            layer_names=_ENC_DEC_LAYERS,
            focus_layer=2,
            architecture=_seq2seq(len(DIGITS)),
            steps=4000,
            batch_size=128,
            seed=12,
        ),
        ToySpec(
            name="toy-induction",
            task="induction",
            description="Two-layer attention-only causal model predicting the next token of a "
            "random block repeated twice after a random prefix.",
            caption="Layer 0: a head looks one token back. Layer 1: in the repeat, a head looks at "
            "the token after the earlier copy of the current token.",
            default_text="pophijackmehijackme",
            vocabulary=LETTERS,
            layer_names=("layer 0", "layer 1"),
            focus_layer=1,
            architecture={"kind": "attention-only", "vocab": len(LETTERS), "max_len": MAX_LEN,
                          "width": 64, "heads": 4, "layers": 2},
            steps=3000,
            batch_size=64,
            lr=3e-3,
            seed=12,
        ),
    )
}
