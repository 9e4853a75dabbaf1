"""load_model(folder) -> PretrainedModel: any model transformers can run, on attnviz's kernel.

transformers is imported here, lazily (the app's start-up never pays for it), with the hub switched
offline and `local_files_only=True`: nothing is ever downloaded, and no code from the folder runs
(trust_remote_code stays off). A family whose modelling code calls the attention interface runs every
layer's attention through attnviz's kernel (hf_attention.py) and records every stage; one that does not
(gpt_neo, falcon, deberta_v2, ...) runs transformers' eager attention with `output_attentions=True` and
records the weights alone (`info.stages` says which).

Loaded models are cached (the two most recent, keyed by folder and file stamps), so a second text
costs only the forward. A model too large for the memory budget is refused before any weight is read.
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import Tensor, nn

from attnviz.core.kernel import progress
from attnviz.core.kernel.context import ForwardContext
from attnviz.core.kernel.kernel import Trace
from attnviz.core.kernel.value_weighted import value_weighted as weigh_by_values
from attnviz.core.runs.lru import LRU
from attnviz.core.runs.model_lock import model_lock
from attnviz.models.compact import gguf_within_budget
from attnviz.models.folder import ModelError, ModelFolder, model_name, read_folder, weights_within_budget
from attnviz.models.gguf_files import gguf_header, read_gguf
from attnviz.models.gguf_model import build_tokenizer, fast_path
from attnviz.models.hf import NO_POSITION_LIMIT, ModelInfo, auto_tokenizer, load_transformers_model
from attnviz.models.layers import keep_residuals, run_hidden, run_layers
from attnviz.models.outputs import OutputSide
from attnviz.models.tokens import Encoded, TextTokenizer

CACHE_SIZE = 2
HALF_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
_UNREAD = object()
PROBE_CHARS_PER_POSITION = 64  # a text's start this long per position holds more tokens than the model reads
MIN_VOCAB_SHARE = 0.5  # a tokenizer with fewer tokens than this share of the embeddings belongs to another model


class PretrainedModel:
    """A model folder ready to run: `encode(text)` then `forward(ids, record)` (one Trace per layer)."""

    def __init__(self, folder: ModelFolder, module: nn.Module, tokenizer: TextTokenizer, info: ModelInfo,
                 attention_modules: list[nn.Module], stacks: list[str], hf_tokenizer=None,
                 side: OutputSide | None = None):
        self.folder, self.module, self.tokenizer, self.info = folder, module, tokenizer, info
        self.attention_modules, self.stacks = attention_modules, stacks  # in call order; each one's stack
        self.side = side or OutputSide()  # the head, final norm, blocks and output projections (outputs.py)
        keep_residuals(self.side.blocks if self.side.lens else [])
        self.notes: tuple[str, ...] = ()
        self.load_notes: tuple[str, ...] = ()  # what opening the folder found worth saying (files ignored)
        self._hf_tokenizer = hf_tokenizer  # transformers' own, where it built `tokenizer` (no second build)
        self._chat: object = _UNREAD  # transformers' tokenizer with the chat template, read when first asked

    def encode(self, text: str, special: bool = True) -> Encoded:
        """The text's token ids and labels (special: with the tokenizer's own template, e.g. [CLS] ... [SEP]);
        ConfigError (field `text`) when empty or too long."""
        if not text.strip():
            raise ModelError(text, "the text is empty", "type a sentence", field_name="text")
        limit = self.info.max_positions
        # A text far longer than the positions (a 16 MiB file) is judged by its start: tokenizing all of it
        # took minutes and gigabytes only to be refused
        probe = text[:limit * PROBE_CHARS_PER_POSITION] if limit < NO_POSITION_LIMIT else text
        encoded = self.tokenizer.encode(probe, special)
        if probe is not text and len(encoded.ids) <= limit:  # rare: tokens of over 64 characters; all of it then
            probe, encoded = text, self.tokenizer.encode(text, special)
        n = len(encoded.ids)
        if n > limit:
            cut = self.tokenizer.decode_prefix(probe, limit)
            count = f"{n} tokens" if probe is text else f"over {n:,} tokens (its first {len(probe):,} characters)"
            raise ModelError(f"{text[:40]}…", f"{count}, but {self.info.name} reads at most {limit} positions",
                             f"shorten the text, or truncate it to its first {limit} tokens", field_name="text",
                             suggestions=(cut,))
        if encoded.ids and max(encoded.ids) >= self.info.vocab_size:
            raise ModelError(self.folder.tokenizer, f"the tokenizer gives id {max(encoded.ids)} but the model has "
                             f"{self.info.vocab_size} token embeddings", "use the tokenizer.json saved with this model")
        return encoded

    def truncate(self, text: str) -> str:
        """`text` cut to the model's positions (the fix `encode` offers)."""
        return self.tokenizer.decode_prefix(text, self.info.max_positions)

    @torch.inference_mode()
    def forward(self, ids: Tensor, record=(), *, stack: str = "", decoder_ids: Tensor | None = None,
                ctx: ForwardContext | None = None) -> tuple[Tensor, list[Trace]]:
        """ids (1, L) -> the last hidden state (1, L, d) and the trace of the `record` stages of each layer
        of `stack` (default: the model's first), under the forward's context `ctx`. An encoder-decoder's decoder
        reads `decoder_ids` (1, Ld)."""
        hidden, by_stack, self.notes, _ = self.forward_stacks(ids, record, decoder_ids=decoder_ids, ctx=ctx)
        return hidden, by_stack[stack or self.info.stacks[0]]

    @torch.inference_mode()
    def forward_stacks(self, ids: Tensor, record=(), *, decoder_ids: Tensor | None = None,
                       ctx: ForwardContext | None = None):
        """One forward: the last hidden state, per stack each layer's trace, the notes of its calls and the
        residual stream after each layer (returned, not kept on this shared model: runs on several threads may
        share it)."""
        weights_only = "scores" not in self.info.stages
        if decoder_ids is not None:
            decoder_ids = decoder_ids.to(self.device)
        record = frozenset(record)
        value_weighted = "value_weighted" in record
        # the base model, without its head: no logits are computed unless a view asks for them
        with model_lock(self), self.compute_dtype():
            hidden, traces, notes, residuals, _ = run_layers(
                self.module.base_model, ids.to(self.device), record | ({"v"} if value_weighted else set()),
                self.attention_modules, weights_only, decoder_ids, ctx=ctx)
        by_stack: dict[str, list[Trace]] = {name: [] for name in self.info.stacks}
        for trace, name in zip(self._value_weighted(traces, record), self.stacks):
            by_stack[name].append(trace)
        return hidden, by_stack, notes, residuals

    def _value_weighted(self, traces: list[Trace], record: frozenset[str]) -> list[Trace]:
        if "value_weighted" in record:
            for trace, module in zip(traces, self.attention_modules):
                trace["value_weighted"] = weigh_by_values(trace.weights, trace.v, self.side.out_weights[module])
        return traces

    @torch.inference_mode()
    def step(self, ids: Tensor, cache, record=(), ctx: ForwardContext | None = None):
        """One generation step (core/runs/generation.py): the new ids over the KV cache (None at first) ->
        (hidden (1, n, d), one Trace per layer, the grown cache, the residual stream after each layer)."""
        record = frozenset(record)
        value_weighted = "value_weighted" in record
        with model_lock(self), self.compute_dtype():
            hidden, traces, self.notes, residuals, cache = run_layers(
                self.module.base_model, ids.to(self.device), record | ({"v"} if value_weighted else set()),
                self.attention_modules, "scores" not in self.info.stages, cache=cache, use_cache=True, ctx=ctx)
        return hidden, self._value_weighted(traces, record), cache, residuals or None

    @property
    def stop_ids(self) -> set[int]:
        """The end-of-text tokens generation stops at (as transformers' generate does)."""
        config = getattr(self.module, "generation_config", None) or self.module.config
        eos = getattr(config, "eos_token_id", None)
        ids = eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos]
        return {int(i) for i in ids if 0 <= int(i) < self.info.vocab_size}

    # --- the output head (core/runs/predictions.py): logits, targets, labels, the lens, a forward recording nothing

    @property
    def has_head(self) -> bool:
        return self.side.head is not None

    def logits(self, hidden: Tensor) -> Tensor | None:
        """The model's own head on the last hidden state (None: no trained head, or an encoder-decoder)."""
        if not self.has_head:
            return None
        with self.compute_dtype():
            return self.side.logits(hidden.to(self.device)).float()

    def lens_logits(self, residual: Tensor) -> Tensor:
        with model_lock(self), self.compute_dtype():  # the final norm: an analysis may be watching it
            return self.side.lens_logits(residual.to(self.device)).float()

    def hidden(self, ids: Tensor, ctx: ForwardContext | None = None) -> Tensor:
        """The last hidden state of a forward that records nothing (under ctx's ablation plan, if any)."""
        with model_lock(self), torch.inference_mode(), self.compute_dtype():
            return run_hidden(self.module.base_model, ids.to(self.device), ctx)

    def targets(self, ids: list[int]) -> list[int]:
        """A causal LM's next token; a masked LM's own token at each position (what it reconstructs)."""
        return ids[1:] + [-1] if self.info.causal else list(ids)

    def label(self, token_id: int) -> str:
        return self.tokenizer.label_of(token_id)

    def probe(self, half: int, seed: int) -> list[int]:
        """Distinct random ordinary tokens written twice inside the tokenizer's own special tokens (a BOS,
        [CLS] ... [SEP]), seeded; each copy at most `half` long and the whole within the model's positions."""
        prefix, suffix = self.tokenizer.template()
        specials = set(self.tokenizer.special_ids())
        room = (self.info.max_positions - len(prefix) - len(suffix)) // 2
        pool = [i for i in range(self.info.vocab_size) if i not in specials]
        n = max(1, min(half, room, len(pool)))
        chosen = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:n].tolist()
        first = [pool[i] for i in chosen]
        return prefix + first + first + suffix

    def compute_dtype(self):
        """On CUDA a bfloat16 / float16 checkpoint computes in its own dtype (autocast: the matrix products in
        it, softmax and norms in float32 as the family's code says); on the CPU everything runs in float32
        (half precision there is many times slower). The weights stay float32 either way."""
        half = HALF_DTYPES.get(self.info.dtype)
        if half is None or self.device.type != "cuda":
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=half)

    def view(self, stack: str = "", decoder_text: str = "", chat: bool = False):
        """This model as one run sees it: its stack, decoder input and chat switch (see run_model.py)."""
        from attnviz.models.run_model import run_model

        return run_model(self, stack, decoder_text, chat)

    def has_chat_template(self) -> bool:
        return self._chat_tokenizer() is not None

    def chat_text(self, text: str) -> str:
        """`text` as one user turn in the model's chat template, with the generation prompt (rendered in its own
        process with time, output and memory limits: chat_render.py)."""
        from attnviz.models.chat_render import render_user_turn

        return render_user_turn(self._chat_tokenizer(), text)

    def _chat_tokenizer(self):
        """transformers' tokenizer of the folder (or GGUF file) where it has a chat template, else None."""
        if self._chat is _UNREAD:
            tok = self._hf_tokenizer
            if tok is None:
                with contextlib.suppress(ModelError):  # no tokenizer transformers can build: no template either
                    tok = auto_tokenizer(self.folder)
            self._chat = tok if getattr(tok, "chat_template", None) else None
        return self._chat

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device


def _build(folder: ModelFolder, memory_budget: int | None) -> PretrainedModel:
    storage, compact_note = "float32", None
    if folder.gguf and fast_path(read_gguf(folder.gguf).architecture):  # its matrices may stay compact
        size, storage, compact_note = gguf_within_budget(folder, memory_budget)
    else:
        size = weights_within_budget(folder, memory_budget)
    pool = ThreadPoolExecutor(max_workers=1)  # a GGUF's tokenizer builds while its tensors dequantise
    pending = pool.submit(_hf_tokenizer, folder)
    name = folder.name if folder.gguf else model_name(folder.path)
    try:
        module, modules, stacks, info, side = load_transformers_model(folder, name, size, storage)
    finally:
        pool.shutdown(wait=False)  # on Cancel or the model's own error: not kept waiting for the tokenizer
    progress.stage("tokenizer", 0, 1)
    hf_tokenizer = pending.result()  # its error, if any, once the model's own has had its say
    progress.stage("tokenizer", 1, 1)
    if hf_tokenizer is not None:
        tokenizer = TextTokenizer.of(hf_tokenizer.backend_tokenizer, folder.tokenizer)
    else:
        tokenizer = TextTokenizer(folder.tokenizer)
    check_vocabulary(tokenizer.vocab_size, info, folder)
    model = PretrainedModel(folder, module, tokenizer, info, modules, stacks, hf_tokenizer, side)
    model.load_notes = _ignored_weights(folder) + ((compact_note,) if compact_note else ())
    return model


def _hf_tokenizer(folder: ModelFolder):
    """transformers' tokenizer where attnviz reads through one (a GGUF's vocabulary, a sentencepiece file), else
    None (tokenizer.json is read directly)."""
    if folder.gguf and fast_path(read_gguf(folder.gguf).architecture):
        return build_tokenizer(gguf_header(folder.gguf))
    if folder.gguf or folder.tokenizer.name != "tokenizer.json":
        return auto_tokenizer(folder)
    return None


def _ignored_weights(folder: ModelFolder) -> tuple[str, ...]:
    """A note naming the weights read where other weight files lie beside them (an adapter, a copy)."""
    if folder.gguf:
        return ()
    read = {p.name for p in folder.weights}
    others = sorted(p.name for p in folder.path.iterdir()
                    if p.suffix in (".safetensors", ".bin") and p.name not in read)
    if not others:
        return ()
    return (f"read {', '.join(sorted(read))}; ignored {', '.join(others)} (not this checkpoint's weights)",)


def check_vocabulary(tokens: int, info: ModelInfo, folder: ModelFolder) -> None:
    """A tokenizer that does not fit the model: more tokens than embeddings (ids out of range), or far fewer
    (another model's tokenizer: most words would become unknown). A few unused embeddings are normal
    (vocabularies padded to a multiple of 64 or 128)."""
    if tokens > info.vocab_size or tokens < info.vocab_size * MIN_VOCAB_SHARE:
        raise ModelError(folder.tokenizer, f"the tokenizer has {tokens} tokens but the model has {info.vocab_size} "
                         "token embeddings", "use the tokenizer saved with this model", field_name="tokenizer")


_cache: LRU[PretrainedModel] = LRU(CACHE_SIZE)


def load_model(folder: str | os.PathLike, *, memory_budget: int | None = None) -> PretrainedModel:
    """The model in `folder` (see the module docstring), from the cache when its files are unchanged; a vision or
    text-image model's folder gives a VisionModel (vision.py)."""
    from attnviz.models.vision import is_vision_folder, load_vision_model

    if str(folder).strip() and is_vision_folder(folder):
        return load_vision_model(folder, memory_budget=memory_budget)
    checked = read_folder(folder)
    key = (str(checked.path.resolve()), checked.stamp())
    return _cache.get_or_make(key, lambda: _build(checked, memory_budget))


def clear_cache() -> None:
    _cache.clear()
