"""Token ids -> readable labels, and the folder's tokenizer.json as the model saw its training text.

The ids are exactly `Tokenizer.encode(text).ids` with the file's own special-token template and any
padding or truncation it carries switched off (sentence-transformers' MiniLM pads to 128). Labels
turn the tokenizer's space markers into text: GPT-2's byte-level 'Ġ' (space) and 'Ċ' (newline) back
into the characters they stand for, SentencePiece's '▁' into a space. WordPiece's '##' continuation
marker is kept as the tokenizer writes it: it is the only sign that a piece joins the one before
("cat ##s" is one word, "cat s" two), and WordPiece writes no space marker that could say so instead.
Special tokens ([CLS], <s>, <|endoftext|>) are shown as they are.

A tokenizer.json is untrusted input: a pre-tokenizer regex such as `(a+)+b` makes Oniguruma give up on some
texts, and `tokenizers` then panics (pyo3's PanicException, a BaseException that `except Exception` misses).
Every encode goes through `_encode`, which turns that panic into one ModelError.
"""

from __future__ import annotations

import json
from functools import cached_property, lru_cache
from pathlib import Path

from attnviz.core.runs.backed import Encoded
from attnviz.models.folder import ModelError
from attnviz.system import native_stderr_caught

SENTENCEPIECE_SPACE = "▁"


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in character -> the byte it encodes (inverse of bytes_to_unicode)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def label(token: str, special: bool, byte_level: bool) -> str:
    """One token's display label (see the module docstring)."""
    if special:
        return token
    if byte_level:
        table = byte_decoder()
        if all(ch in table for ch in token):
            return bytes(table[ch] for ch in token).decode("utf-8", errors="replace")
        return token
    return token.replace(SENTENCEPIECE_SPACE, " ")  # a WordPiece '##' stays: see the module docstring


def display(text: str) -> str:
    """A label as drawn on an axis: whitespace made visible where it is all there is."""
    shown = text.replace("\n", "↵").replace("\t", "⇥")
    return shown.strip() or shown.replace(" ", "␣")


class TextTokenizer:
    """tokenizer.json through the `tokenizers` library, padding and truncation off."""

    def __init__(self, path: Path, tokenizer=None):
        from tokenizers import Tokenizer

        try:
            self._tok = tokenizer if tokenizer is not None else Tokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception
            raise ModelError(path, f"tokenizer.json cannot be read ({exc})", "restore the file") from exc
        self.source = path
        self._tok.no_padding()
        self._tok.no_truncation()
        # the decoder alone: serialising the whole tokenizer to read it took seconds for a large vocabulary
        # (benchmarks/README.md, Behind the code)
        decoder = json.loads(self._tok.decoder.__getstate__()) if self._tok.decoder is not None else {}
        self.byte_level = _has_type(decoder, "ByteLevel")

    @classmethod
    def of(cls, tokenizer, source: Path) -> TextTokenizer:
        """A `tokenizers.Tokenizer` built elsewhere (a GGUF file's vocabulary), named by its file."""
        return cls(source, tokenizer)

    def encode(self, text: str, special: bool = True) -> Encoded:
        """Ids and labels; `special` adds the file's template tokens ([CLS] ... [SEP], a BOS)."""
        enc = self._encode(text, special)
        if all(enc.special_tokens_mask):  # control characters alone, say: the maps would show [CLS] [SEP]
            raise ModelError(repr(text[:40]), "the text has no tokens of its own, only the tokenizer's special "
                             f"tokens ({' '.join(enc.tokens) or 'none'})", "type some words", field_name="text")
        special = enc.special_tokens_mask
        labels = tuple(label(t, bool(s), self.byte_level) for t, s in zip(enc.tokens, special))
        return Encoded(tuple(enc.ids), labels)

    def _encode(self, text: str, special: bool):
        """`tokenizers`' own encode; a panic inside it (its regex giving up) becomes one ModelError."""
        try:
            with native_stderr_caught(drop=is_panic):  # a panic's own lines: ours is the one line
                return self._tok.encode(text, add_special_tokens=special)
        except BaseException as exc:  # noqa: BLE001 - PanicException derives from BaseException alone
            if not is_panic(exc):
                raise
            reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else "no reason given"
            raise ModelError(self.source, f"the tokenizer ({Path(self.source).name}) crashed on this text ({reason}): "
                             "a pattern in its pre-tokenizer or normalizer cannot handle it", "restore the tokenizer "
                             "saved with the model, or change the text") from None

    def label_of(self, token_id: int) -> str:
        """One id's display label (a decoder's start token, say), as `encode` would label it."""
        token = self._tok.id_to_token(token_id)
        if token is None:
            return f"<{token_id}>"
        return label(token, token in self._special_tokens, self.byte_level)

    @cached_property
    def _special_tokens(self) -> frozenset[str]:
        """Asked once: the predictions label thousands of ids, and the set cost time to build each time
        (benchmarks/README.md, Behind the code)."""
        return frozenset(t.content for t in self._tok.get_added_tokens_decoder().values() if t.special)

    @property
    def vocab_size(self) -> int:
        """Every token id the tokenizer can give, its added tokens included."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def template(self) -> tuple[list[int], list[int]]:
        """The special ids the tokenizer puts before and after a text's own (a BOS; [CLS] and [SEP])."""
        enc = self._encode("a", True)
        mask = enc.special_tokens_mask
        first = mask.index(0) if 0 in mask else len(mask)
        last = len(mask) - mask[::-1].index(0) if 0 in mask else len(mask)
        return list(enc.ids[:first]), list(enc.ids[last:])

    def special_ids(self) -> list[int]:
        return [i for i, t in self._tok.get_added_tokens_decoder().items() if t.special]

    def decode_prefix(self, text: str, n_tokens: int) -> str:
        """The longest start of `text` whose tokens fit `n_tokens` ids (specials included)."""
        enc = self._encode(text, True)
        offsets = [end for (start, end), s in zip(enc.offsets, enc.special_tokens_mask) if not s]
        specials = len(enc.ids) - len(offsets)
        keep = max(n_tokens - specials, 0)
        return text[: offsets[keep - 1]] if keep and offsets else ""


def is_panic(exc: BaseException) -> bool:
    """Whether `exc` is a Rust panic surfaced by pyo3 (pyo3_runtime.PanicException), not a Python error."""
    return type(exc).__name__ == "PanicException" and not isinstance(exc, Exception)


def _has_type(node: dict, kind: str) -> bool:
    if node.get("type") == kind:
        return True
    return any(_has_type(d, kind) for d in node.get("decoders", []) or [] if isinstance(d, dict))
