"""`attnviz render --patch-heads`: the CSV holds core.patch_heads' numbers; bad values give one line and exit 2
with nothing written."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.core import RunConfig, patch_heads

CLEAN, CORRUPTED = "pophijackmehijackm", "pophijackmehijacbm"
TOY = ["--variant", "toy-induction", "--text", CLEAN]


def test_patch_heads_csv_holds_the_api_numbers(tmp_path, capsys):
    path = tmp_path / "patch.csv"
    assert main(["render", *TOY, "--patch-heads", str(path), "--corrupted-text", CORRUPTED, "--answer", "e",
                 "--wrong", "b"]) == 0
    rows = [line.split(",") for line in path.read_text().splitlines()]
    assert rows[0] == ["layer", "head", "restored"] and len(rows) == 1 + 2 * 4
    written = np.array([float(r[2]) for r in rows[1:]]).reshape(2, 4)
    expected = patch_heads(RunConfig.for_variant("toy-induction", text=CLEAN), CORRUPTED, "e", "b")
    np.testing.assert_allclose(written, expected, rtol=1e-5)


@pytest.mark.parametrize(("extra", "says"), [
    (["--corrupted-text", CORRUPTED, "--answer", "e"], "--patch-heads needs --wrong"),
    (["--corrupted-text", CORRUPTED[:-1], "--answer", "e", "--wrong", "b"],
     "--corrupted-text pophijackmehijacb: it makes 17 tokens where the clean text makes 18"),
    (["--corrupted-text", CORRUPTED, "--answer", "ef", "--wrong", "b"], "--answer ef: the tokenizer makes 2 tokens"),
])
def test_bad_patching_flags_say_which_and_write_nothing(tmp_path, capsys, extra, says):
    path = tmp_path / "patch.csv"
    assert main(["render", *TOY, "--patch-heads", str(path), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err, err
    assert not path.exists()
