"""Exports of a generation tell the prompt from what the model wrote, as the window does: the generated tokens'
labels in GENERATED_INK, a dashed line after the prompt's last row and column, "14 prompt + 4 generated tokens" in
the title; the NPZ says which tokens were generated and opened again marks them the same; the predictions CSV has
a generated column. At a step (the window's Step slider, render --step) an image fades the later rows and frames
the step's row as the window does and its title names the step; an NPZ and the predictions hold the generation as
it stood. The trained induction toy writes "ackm" after "pophijackmehij"."""

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
from attnviz.style import FADE, GENERATED_INK, ROW_MARK, STEP_MARK_PX, TICK_INK

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


# --- a generation at a step (the window's Step slider, render --step): what the window draws ----------------------

STEP = ExportOptions(what="head", head=1, step=2)  # 'c' at 15 written: rows 16 and 17 not yet


def pixels(result, options) -> np.ndarray:
    """The composed PNG as (h, w, 3) RGB."""
    image = compose_image(result, options)
    return np.frombuffer(image.constBits(), np.uint8).reshape(image.height(), -1, 4)[:, :image.width(), 2::-1].copy()


def hex_rgb(colour: str) -> np.ndarray:
    return np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])


def test_at_a_step_the_later_rows_fade_and_the_steps_row_is_framed_in_the_png(generated):
    full, at = layout(generated, HEAD), layout(generated, STEP)
    assert at.tiles == full.tiles and at.scale == full.scale  # every row still drawn, at the same place
    (ix, iy, w, h), s = at.tiles[0], at.scale
    before, after = pixels(generated, HEAD), pixels(generated, STEP)
    # clear of the step's frame at the map's sides and of the dashed line after the prompt's last column
    inside = (slice(None), np.r_[ix + 3:ix + 14 * s - 2, ix + 14 * s + 3:ix + w - 3])
    # the rows up to the step's (position 15) keep the view's colours, away from the frame and the dashed line
    rows = np.r_[iy:iy + 14 * s - 2, iy + 14 * s + 2:iy + 15 * s - 2]
    np.testing.assert_array_equal(after[rows][inside], before[rows][inside])
    # the rows after it lie under the window's FADE, composed over the same colours
    below = slice(iy + 16 * s + 2, iy + h)
    alpha = FADE[3] / 255
    expected = before[below][inside] * (1 - alpha) + np.array(FADE[:3]) * alpha
    assert np.abs(after[below][inside] - expected).max() <= 1
    assert (after[below][inside].astype(int) - before[below][inside]).min() >= 0  # lighter, never darker
    # the step's row framed in ROW_MARK at its top and bottom edges, across the map
    red = np.all(after == hex_rgb(ROW_MARK), axis=-1)
    assert red[iy + 15 * s, ix:ix + w].mean() > 0.95 and red[iy + 16 * s, ix:ix + w].mean() > 0.95
    assert not red[iy + 14 * s + s // 2, ix + 4:ix + w - 4].any()
    assert not np.all(before == hex_rgb(ROW_MARK), axis=-1)[iy:iy + h, ix:ix + w].any()


def test_the_steps_frame_and_the_title_are_items_of_every_map_and_of_the_svg(generated):
    lay = layout(generated, ExportOptions(what="grid", step=2))
    s = lay.scale
    frames = [it for it in lay.items if isinstance(it, Line) and it.color == ROW_MARK]
    assert len(frames) == 4 * generated.config.heads and not any(ln.dashed for ln in frames)
    for ix, iy, w, _ in lay.tiles:
        assert Line(ix, iy + 15 * s, ix + w, iy + 15 * s, ROW_MARK, STEP_MARK_PX) in frames
        assert Line(ix, iy + 16 * s, ix + w, iy + 16 * s, ROW_MARK, STEP_MARK_PX) in frames
    assert "14 prompt + 2 of 4 generated tokens \u00b7 step 2" in lay.summary
    text = svg_text(generated, STEP)
    assert text.count("14 prompt + 2 of 4 generated tokens \u00b7 step 2") == 2  # the title line and <title>
    assert len(re.findall(rf'<line [^>]*stroke="{ROW_MARK}"', text)) == 4
    plain_svg = svg_text(generated, HEAD)  # no step: no count of a step, no frame
    assert "of 4 generated" not in plain_svg and f'stroke="{ROW_MARK}"' not in plain_svg


@pytest.mark.parametrize(("step", "row"), [(0, 13), (4, 17)])
def test_the_first_and_last_steps_frame_the_prompts_last_row_and_the_last_row(generated, step, row):
    lay = layout(generated, ExportOptions(what="head", head=1, step=step))
    (ix, iy, w, _), s = lay.tiles[0], lay.scale
    assert Line(ix, iy + row * s, ix + w, iy + row * s, ROW_MARK, STEP_MARK_PX) in lay.items
    assert f"14 prompt + {step} of 4 generated tokens \u00b7 step {step}" in lay.summary


def test_a_step_that_is_not_one_is_one_clear_error(generated, plain, tmp_path):
    with pytest.raises(ValueError, match=r"step 5 does not exist: this generation has steps 0\.\.4"):
        layout(generated, ExportOptions(step=5))
    with pytest.raises(ValueError, match="no generation .*leave the step out"):
        export(plain, tmp_path / "plain.png", ExportOptions(step=1))
    assert not (tmp_path / "plain.png").exists()


def test_an_npz_at_a_step_holds_the_maps_as_they_stood(generated, tmp_path):
    path = export(generated, tmp_path / "step.npz", ExportOptions(step=2))
    with np.load(path) as z:
        assert z["weights"].shape[-2:] == (16, 16) and int(z["prompt_length"]) == 14
        np.testing.assert_array_equal(z["weights"], generated.weights[..., :16, :16])
    opened = read_maps(path)
    assert opened.generated_count == 2 and "".join(opened.tokens) == PROMPT + WRITTEN[:2]


def test_the_predictions_at_a_step_are_the_generations_up_to_it(generated):
    at = at_step(generated, 2)
    whole, cut = generated.predictions, at.predictions
    assert cut is not None and cut.top_ids.shape[0] == 16
    np.testing.assert_array_equal(cut.top_ids, whole.top_ids[:16])
    np.testing.assert_allclose(cut.top_probs, whole.top_probs[:16], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(cut.target_ids[:15], whole.target_ids[:15])
    assert cut.target_ids[15] == -1  # the next token was not written yet at step 2
    rows = predictions_csv(at).splitlines()
    assert len(rows) == 17 and rows[-1].startswith('15,"c",true,,')


def test_render_step_draws_the_step_as_the_window_does_and_writes_its_predictions(tmp_path, capsys):
    from attnviz.cli import main

    base = ["render", "--preset", "toy-induction", "--text", PROMPT, "--generate", "4", "--step", "2", "--head", "1"]
    assert main([*base, "-o", str(tmp_path / "step.svg"), "--predictions", str(tmp_path / "p.csv")]) == 0
    svg = (tmp_path / "step.svg").read_text()
    assert svg == svg_text(run(load_preset("toy-induction").replace(text=PROMPT, generate=4)), STEP)  # one path
    assert "14 prompt + 2 of 4 generated tokens \u00b7 step 2" in svg
    assert sorted(re.findall(rf'<text [^>]*fill="{GENERATED_INK}"[^>]*>([^<]*)</text>', svg)) == sorted(WRITTEN * 2)
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert len(rows) == 17 and rows[-1].startswith('15,"c",true,')
    assert main([*base, "-o", str(tmp_path / "bad.png"), "--step", "9"]) == 2
    assert "--step 9: this generation has steps 0..4" in capsys.readouterr().err
