"""Token labels: the tokenizers' markers turned into the text they stand for; specials as they are."""

from __future__ import annotations

from tiny import SENTENCE

from attnviz.models import load_model
from attnviz.models.tokens import display, label


def test_markers_become_text():
    assert label("Ġcat", False, byte_level=True) == " cat"
    assert label("Ċ", False, byte_level=True) == "\n"
    assert label("Ã©", False, byte_level=True) == "é"  # two byte-level characters, one UTF-8 letter
    assert label("▁the", False, byte_level=False) == " the"
    assert label("##ing", False, byte_level=False) == "ing"
    assert label("##", False, byte_level=False) == "##"  # a bare '##' is a token of its own
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
