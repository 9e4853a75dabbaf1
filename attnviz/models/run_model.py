"""A loaded model as one run sees it: which stack its maps show, the decoder's input, the chat template.

The model cache holds one PretrainedModel per folder; `run_model(model, stack, decoder_text, chat)`
gives a run the protocol of core/runs/backed.py (info, encode, forward) for its own choices, without
changing the shared model.

- Stacks. An encoder-decoder (T5, BART) has three kinds of attention: the encoder's self-attention
  over the text, the decoder's causal self-attention over the decoder's input, and the decoder's
  cross-attention, whose rows are decoder tokens and whose columns are the encoder's. Each layer's axis
  labels go in `layer_tokens`. The decoder reads its start token, then the tokens of `decoder_text`.
- Chat. With `chat`, the text is wrapped as one user turn by the model's own chat template (what
  transformers' `apply_chat_template` renders, with the generation prompt), then tokenized without
  adding special tokens again, as transformers does.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

from attnviz.core.kernel.context import ForwardContext
from attnviz.core.runs.config import ConfigError
from attnviz.models.tokens import Encoded


class RunModel:
    """A PretrainedModel with one run's stack, decoder input and chat switch."""

    def __init__(self, model, stack: str, decoder: Encoded | None, chat: bool):
        self.model, self.stack, self.decoder, self.chat = model, stack, decoder, chat
        self.info = dataclasses.replace(model.info, layers=model.stacks.count(stack), causal=stack == "decoder")
        self.module = model.module
        self.notes: tuple[str, ...] = ()
        self.other_stacks: dict | None = None  # after a forward of several stacks: the ones not shown
        self.forward_layers = len(model.stacks)  # what one forward records: every stack's layers
        self.decoder_length = len(decoder.ids) if decoder is not None else 0
        self.residuals: list[Tensor] | None = None  # after a forward: the residual stream after each layer

    def encode(self, text: str) -> Encoded:
        encoded = self._chat_encode(text) if self.chat else self.model.encode(text)
        if self.decoder is None:
            return Encoded(encoded.ids, encoded.tokens)
        rows, cols = (encoded if self.stack == "encoder" else self.decoder), (
            self.decoder if self.stack == "decoder" else encoded)
        n = self.info.layers
        return Encoded(encoded.ids, encoded.tokens, ((rows.tokens, cols.tokens),) * n,
                       ((tuple(rows.ids), tuple(cols.ids)),) * n)

    def _chat_encode(self, text: str) -> Encoded:
        """The text wrapped in the chat template, tokenized without specials again; a text too long offers
        the cut of the user's own text that fits with the template around it."""
        try:
            return self.model.encode(self.model.chat_text(text), special=False)
        except ConfigError as exc:
            if exc.field != "text" or not exc.suggestions:
                raise
            around = len(self.model.tokenizer.encode(self.model.chat_text(""), False).ids)
            cut = self.model.tokenizer.decode_prefix(text, max(self.info.max_positions - around, 0))
            raise ConfigError("text", exc.value, exc.problem, exc.fix, suggestions=(cut,)) from exc

    def truncate(self, text: str) -> str:
        return self.model.truncate(text)

    def forward(self, ids: Tensor, record=(), ctx: ForwardContext | None = None):
        """The shown stack's (hidden, traces); every other stack's traces go to `other_stacks` (the model view)."""
        decoder_ids = None if self.decoder is None else torch.tensor([list(self.decoder.ids)], dtype=torch.long)
        hidden, by_stack, notes, residuals = self.model.forward_stacks(ids, record, decoder_ids=decoder_ids, ctx=ctx)
        self.notes = (*self.model.load_notes, *notes)
        self.other_stacks = {name: t for name, t in by_stack.items() if name != self.stack} or None
        self.residuals = residuals or None
        return hidden, by_stack[self.stack]

    # --- the output head: a model of one stack (decoder-only or encoder-only) has it as a whole

    @property
    def has_head(self) -> bool:
        return self.decoder is None and self.model.has_head

    def logits(self, hidden: Tensor) -> Tensor | None:
        return self.model.logits(hidden) if self.has_head else None

    @property
    def lens_logits(self):
        return self.model.lens_logits if self.model.side.lens and self.decoder is None else None

    def hidden(self, ids: Tensor, ctx: ForwardContext | None = None) -> Tensor:
        return self.model.hidden(ids, ctx)

    def targets(self, ids: list[int]) -> list[int]:
        return self.model.targets(ids)

    def label(self, token_id: int) -> str:
        return self.model.label(token_id)

    def step(self, ids: Tensor, cache, record=(), ctx: ForwardContext | None = None):
        return self.model.step(ids, cache, record, ctx)

    @property
    def stop_ids(self) -> set[int]:
        return self.model.stop_ids

    def probe(self, half: int, seed: int) -> list[int]:
        return self.model.probe(half, seed)

    def circuit_parts(self):
        """Its weights and modules for circuits, logit attribution and patching (core/analysis/circuit_parts.py)."""
        from attnviz.models.circuits import pretrained_parts

        return pretrained_parts(self)

    def call_index(self, layer: int) -> int:
        """The attention call of this stack's layer in the whole forward (an encoder-decoder interleaves them)."""
        return [i for i, s in enumerate(self.model.stacks) if s == self.stack][layer]


def decoder_input(model, decoder_text: str) -> Encoded:
    """The decoder's start token, then the tokens of `decoder_text` (as the folder's tokenizer gives them)."""
    start = model.module.config.decoder_start_token_id
    start = 0 if start is None else int(start)
    head = Encoded((start,), (model.tokenizer.label_of(start),))
    if not decoder_text.strip():
        return head
    rest = model.tokenizer.encode(decoder_text)
    limit, n = model.info.max_positions, 1 + len(rest.ids)
    if n > limit:
        raise ConfigError("decoder_text", f"{decoder_text[:40]}…", f"{n} decoder tokens, but {model.info.name}'s "
                          f"decoder reads at most {limit} positions", "shorten the decoder text",
                          suggestions=(model.tokenizer.decode_prefix(decoder_text, limit - 1),))
    if rest.ids and max(rest.ids) >= model.info.vocab_size:
        raise ConfigError("decoder_text", decoder_text, f"the tokenizer gives id {max(rest.ids)} but the model has "
                          f"{model.info.vocab_size} token embeddings", "use the tokenizer saved with this model")
    return Encoded(head.ids + rest.ids, head.tokens + rest.tokens)


def run_model(model, stack: str = "", decoder_text: str = "", chat: bool = False) -> RunModel:
    """`model` seen as `stack` (empty: its first); ConfigError for a stack it lacks, a decoder text given
    to a model without a decoder input, or chat for a model without a chat template."""
    stacks, name = model.info.stacks, model.info.name
    encoder_decoder = getattr(model.module.config, "is_encoder_decoder", False)
    if decoder_text.strip() and not encoder_decoder:
        raise ConfigError("decoder_text", decoder_text, f"{name} is not an encoder-decoder: it reads one text",
                          "clear the decoder text (it is for T5, BART and other encoder-decoders)", suggestions=("",))
    if stack and stack not in stacks:
        raise ConfigError("stack", stack, f"{name} has the stacks {', '.join(stacks)}",
                          f"choose one of {', '.join(stacks)}, or leave it empty", suggestions=stacks)
    if chat and not model.has_chat_template():
        raise ConfigError("chat", chat, f"{name} has no chat template (tokenizer_config.json or the GGUF file "
                          "names none)", "turn the chat template off", suggestions=(False,))
    decoder = decoder_input(model, decoder_text) if encoder_decoder else None
    return RunModel(model, stack or stacks[0], decoder, chat)
