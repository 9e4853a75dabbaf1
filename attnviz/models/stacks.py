"""One stack of an encoder-decoder (T5, BART) as a model of its own, for the model-backed runner.

An encoder-decoder has three kinds of attention: the encoder's self-attention over the text, the
decoder's causal self-attention over the decoder's input, and the decoder's cross-attention, whose
rows are decoder tokens and whose columns are the encoder's. `stack_view(model, stack, decoder_text)`
gives one of them the protocol of core/backed.py (info, encode, forward), with each layer's axis
labels in `layer_tokens`. The decoder reads its start token, then the tokens of `decoder_text`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from ..core.config import ConfigError
from .tokens import Encoded


@dataclass(frozen=True)
class StackEncoded:
    ids: tuple[int, ...]  # the encoder's input
    tokens: tuple[str, ...]
    layer_tokens: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]  # per layer: (row labels, column labels)


class StackView:
    """One stack's layers of a PretrainedModel; the decoder's input fixed at construction."""

    def __init__(self, model, stack: str, decoder: Encoded):
        self.model, self.stack, self.decoder = model, stack, decoder
        layers = model.stacks.count(stack)
        self.info = dataclasses.replace(model.info, layers=layers, causal=stack == "decoder")
        self.module = model.module
        self.notes: tuple[str, ...] = ()

    def encode(self, text: str) -> StackEncoded:
        encoded = self.model.encode(text)
        rows = encoded.tokens if self.stack == "encoder" else self.decoder.tokens
        cols = self.decoder.tokens if self.stack == "decoder" else encoded.tokens
        return StackEncoded(encoded.ids, encoded.tokens, ((rows, cols),) * self.info.layers)

    def truncate(self, text: str) -> str:
        return self.model.truncate(text)

    def forward(self, ids: Tensor, record=()):
        decoder_ids = torch.tensor([list(self.decoder.ids)], dtype=torch.long)
        out = self.model.forward(ids, record, stack=self.stack, decoder_ids=decoder_ids)
        self.notes = self.model.notes
        return out


def decoder_input(model, decoder_text: str) -> Encoded:
    """The decoder's start token, then the tokens of `decoder_text` (as the folder's tokenizer gives them)."""
    config = model.module.config
    start = config.decoder_start_token_id
    start = 0 if start is None else int(start)
    head = Encoded((start,), (model.tokenizer.label_of(start),))
    if not decoder_text.strip():
        return head
    rest = model.tokenizer.encode(decoder_text)
    return Encoded(head.ids + rest.ids, head.tokens + rest.tokens)


def stack_view(model, stack: str, decoder_text: str):
    """`model` seen as `stack` (empty: its first); ConfigError for a stack it lacks or a decoder text
    given to a model without a decoder input."""
    stacks, name = model.info.stacks, model.info.name
    encoder_decoder = getattr(model.module.config, "is_encoder_decoder", False)
    if decoder_text.strip() and not encoder_decoder:
        raise ConfigError("decoder_text", decoder_text, f"{name} is not an encoder-decoder: it reads one text",
                          "clear the decoder text (it is for T5, BART and other encoder-decoders)", suggestions=("",))
    if stack and stack not in stacks:
        raise ConfigError("stack", stack, f"{name} has the stacks {', '.join(stacks)}",
                          f"choose one of {', '.join(stacks)}, or leave it empty", suggestions=stacks)
    if not encoder_decoder:
        return model
    return StackView(model, stack or stacks[0], decoder_input(model, decoder_text))
