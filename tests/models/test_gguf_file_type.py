"""A GGUF file's quantisation is named as the file names it (general.file_type), not by its commonest tensors."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.models.gguf_files import read_gguf


def write(path, file_type: int | None) -> None:
    """A small llama-named GGUF file whose tensors are all F32 (as a Q4_K_M file's many norms are)."""
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    if file_type is not None:
        w.add_file_type(file_type)
    for i in range(2):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(8, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_the_quantisation_is_the_file_type_the_file_names(tmp_path):
    gguf = pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    named = tmp_path / "q4km.gguf"
    write(named, int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    assert read_gguf(named).quantization == "Q4_K_M"  # its tensors are F32, the file says Q4_K_M
    plain = tmp_path / "f32.gguf"
    write(plain, int(gguf.LlamaFileType.ALL_F32))
    assert read_gguf(plain).quantization == "F32"
    unnamed = tmp_path / "none.gguf"
    write(unnamed, None)
    assert read_gguf(unnamed).quantization == "F32"  # no file type: the commonest tensor type
