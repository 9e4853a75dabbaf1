"""Exports of a generation tell the prompt from what the model wrote, as the window does: the generated tokens'
labels in GENERATED_INK, a dashed line after the prompt's last row and column, "14 prompt + 4 generated tokens" in
the title; the NPZ says which tokens were generated and opened again marks them the same; the predictions CSV has
a generated column. The trained induction toy writes "ackm" after "pophijackmehij"."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from attnviz.core import ConfigError, load_preset, run
from attnviz.core.runs.generation import at_step
from attnviz.core.runs.predictions import predictions_csv
from attnviz.core.runs.saved import read_maps
from attnviz.export import ExportOptions, compose_image, export, layout, svg_text
from attnviz.export.generated import prompt_end
from attnviz.export.items import Line, Text
from attnviz.style import GENERATED_INK, TICK_INK

PROMPT, WRITTEN = "pophijackmehij", "ackm"
HEAD = ExportOptions(what="head", head=1)


@pytest.fixture(autouse=True)
def _qt(qapp):
    """A QApplication first (pytest-qt): a widget-less QGuiApplication made here would abort later Qt tests."""
    return qapp


@pytest.fixture(scope="module")
def generated():
    result = run(load_preset("toy-induction").replace(text=PROMPT, generate=4))
    assert "".join(result.tokens) == PROMPT + WRITTEN and result.prompt_length == len(PROMPT)
    return result


@pytest.fixture(scope="module")
def plain():
    return run(load_preset("toy-induction").replace(text=PROMPT + WRITTEN))


def tick_labels(lay, tokens) -> dict[str, list[tuple[str, str]]]:
    """The tick labels of a one-tile layout by axis ("x" under the map, "y" left of it): (text, colour) in order."""
    ix, iy, w, h = lay.tiles[0]
    labels = {"x": [], "y": []}
    for it in lay.items:
        if isinstance(it, Text) and it.text in tokens:
            if it.y > iy + h:
                labels["x"].append((it.text, it.color))
            elif it.x < ix:
                labels["y"].append((it.text, it.color))
    return labels


def dashed(lay) -> list[Line]:
    return [it for it in lay.items if isinstance(it, Line) and it.dashed]


def test_the_generated_tokens_labels_are_blue_on_both_axes(generated):
    lay = layout(generated, HEAD)
    labels = tick_labels(lay, set(generated.tokens))
    for axis in ("x", "y"):
        assert [t for t, _ in labels[axis]] == list(PROMPT + WRITTEN)  # every label drawn, in order
        colours = [c for _, c in labels[axis]]
        assert colours == [TICK_INK] * len(PROMPT) + [GENERATED_INK] * len(WRITTEN), axis


def test_a_dashed_line_after_the_prompts_last_row_and_column_of_every_map(generated):
    lay = layout(generated, ExportOptions(what="grid"))
    p, s = generated.prompt_length, lay.scale
    lines = dashed(lay)
    assert len(lines) == 2 * generated.config.heads and {ln.color for ln in lines} == {GENERATED_INK}
    for ix, iy, w, h in lay.tiles:
        assert Line(ix, iy + p * s, ix + w, iy + p * s, GENERATED_INK, lines[0].width, True) in lines
        assert Line(ix + p * s, iy, ix + p * s, iy + h, GENERATED_INK, lines[0].width, True) in lines


def test_the_png_draws_the_line_dashed_and_a_plain_run_has_no_blue(generated, plain):
    def blue(result) -> tuple[np.ndarray, tuple]:
        image = compose_image(result, HEAD)
        rgb = np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), -1, 4)[:, :image.width(), 2::-1]
        return np.all(rgb == tuple(int(GENERATED_INK[i:i + 2], 16) for i in (1, 3, 5)), axis=-1), layout(result, HEAD)

    marks, lay = blue(generated)
    (ix, iy, w, h), edge = lay.tiles[0], generated.prompt_length * lay.scale
    row, col = marks[iy + edge, ix:ix + w].mean(), marks[iy:iy + h, ix + edge].mean()
    assert 0.5 < row < 1 and 0.5 < col < 1  # a dashed line across the map, both ways
    assert not blue(plain)[0].any()


def test_the_svg_carries_the_blue_labels_the_dashed_lines_and_the_count(generated):
    text = svg_text(generated, HEAD)
    blue = re.findall(rf'<text [^>]*fill="{GENERATED_INK}"[^>]*>([^<]*)</text>', text)
    assert sorted(blue) == sorted(WRITTEN * 2)  # each generated token under the map and beside it
    assert len(re.findall(rf'<line [^>]*stroke="{GENERATED_INK}"[^>]*stroke-dasharray="[^"]+"', text)) == 2
    assert "14 prompt + 4 generated tokens" in text  # the title line and the SVG's <title>
    assert "18 tokens" not in text


def test_a_plain_run_and_a_generation_cut_to_its_prompt_are_not_marked(plain, generated):
    for result, count in ((plain, "18 tokens"), (at_step(generated, 0), "14 tokens")):
        lay = layout(result, HEAD)
        assert not dashed(lay) and all(it.color != GENERATED_INK for it in lay.items if isinstance(it, Text))
        assert count in lay.summary and "generated" not in lay.summary


def test_a_step_marks_the_tokens_written_by_then(generated):
    lay = layout(at_step(generated, 2), HEAD)
    assert "14 prompt + 2 generated tokens" in lay.summary
    labels = tick_labels(lay, set(generated.tokens))
    assert [t for t, c in labels["y"] if c == GENERATED_INK] == list(WRITTEN[:2])
    assert len(dashed(lay)) == 2


def test_the_window_and_the_export_say_the_count_alike(generated):
    """One wording: the status line's (captions.generation_text) is the result's, as the title's is."""
    assert generated.token_count_text() == "14 prompt + 4 generated tokens"
    assert dataclasses.replace(generated, tokens=generated.tokens[:15]).token_count_text() == \
        "14 prompt + 1 generated token"


def test_marks_follow_pooled_cells_and_leave_an_encoders_keys_alone(generated):
    assert prompt_end(generated, "grid").rows == 14 and prompt_end(generated, "output") is None
    pooled = prompt_end(dataclasses.replace(generated, pool_factor=(2, 4)), "mean")
    assert (pooled.rows, pooled.cols) == (7, 3.5)
    assert prompt_end(dataclasses.replace(generated, key_tokens=tuple("xyz")), "head").cols is None


def test_the_npz_says_which_tokens_were_generated_and_opened_again_marks_them(generated, tmp_path):
    path = export(generated, tmp_path / "gen.npz")
    with np.load(path) as z:
        assert z["generated"].dtype == bool and int(z["prompt_length"]) == 14
        np.testing.assert_array_equal(z["generated"], np.arange(18) >= 14)
    opened = read_maps(path)
    assert opened.prompt_length == 14 and opened.generated_count == 4
    assert read_maps(path, 0).prompt_length == 14  # another layer of the file
    first, again = layout(generated, HEAD), layout(opened, HEAD)
    assert tick_labels(again, set(generated.tokens)) == tick_labels(first, set(generated.tokens))
    assert dashed(again) == dashed(first) and again.summary == first.summary
    export(opened, tmp_path / "again.npz")  # written again: the same flags
    with np.load(tmp_path / "again.npz") as z:
        np.testing.assert_array_equal(z["generated"], np.arange(18) >= 14)


@pytest.mark.parametrize("bad", [np.asarray(99), np.asarray(-1), np.asarray(3.5), np.asarray([14, 14])])
def test_an_npz_whose_prompt_length_does_not_fit_its_tokens_is_one_clear_error(generated, tmp_path, bad):
    path = export(generated, tmp_path / "gen.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(tmp_path / "bad.npz", **{**arrays, "prompt_length": bad})
    with pytest.raises(ConfigError, match="'prompt_length' is .* not a token count from 0 to the file's 18 tokens"):
        read_maps(tmp_path / "bad.npz")


def test_the_predictions_csv_of_a_generation_has_a_generated_column(generated, plain):
    rows = [line.split(",") for line in predictions_csv(generated).splitlines()]
    assert rows[0][:4] == ["position", "token", "generated", "target"]
    assert [r[2] for r in rows[1:]] == ["false"] * 14 + ["true"] * 4
    assert "generated" not in predictions_csv(plain).splitlines()[0]
