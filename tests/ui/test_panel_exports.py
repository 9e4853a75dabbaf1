"""Every panel's Export… through attnviz.export: each file read back and checked against the panel's data (the
weights, the formulas of core.stats, the frames' colours), not only that a file exists. Offscreen, on the toy
induction model (several layers, tokens, a logit lens)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image
from uihelpers import open_dock, wait_shown

from attnviz import colormaps
from attnviz.core import load_preset
from attnviz.core.analysis.stats import rollout
from attnviz.export.panels import compare_figure, focus_figure, lens_figure, stats_figure
from attnviz.export.table import value_index


@pytest.fixture
def toy(window, qtbot):
    window.panel.set_config(load_preset("toy-induction"))
    wait_shown(qtbot, window)
    return window


def _entropy(w: np.ndarray) -> np.ndarray:
    w = w.astype(np.float64)
    return -(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0)).sum(-1).mean(-1)


def _cells(png, lay, rows: int, cols: int) -> np.ndarray:
    """The colour of each cell of a heat table figure, read near its corner (its text sits in the middle)."""
    pixels = np.asarray(Image.open(png).convert("RGB"))
    x0, y0, w, h = lay.tiles[0]
    cw, ch = w / cols, h / rows
    return np.array([[pixels[int(y0 + r * ch + 2), int(x0 + c * cw + 2)] for c in range(cols)] for r in range(rows)])


def _open(window, qtbot, dock: str):
    open_dock(window, qtbot, dock)
    window.explain.docks[dock].raise_()
    qtbot.waitUntil(lambda: window.explain.shown(dock))
    wait_shown(qtbot, window)


def test_statistics_export_their_numbers_and_a_heat_table(toy, qtbot, tmp_path):
    _open(toy, qtbot, "statsDock")
    ex, frames = toy.explain, toy.explain.stats.frames
    lines = ex.export("stats", str(tmp_path / "stats.csv")).read_text().splitlines()
    assert lines[0].split(",")[1] == "entropy (nats)" and len(lines) == 1 + toy.result.config.heads
    entropy = [float(line.split(",")[1]) for line in lines[1:]]
    assert toy.result.config.mask == "causal"  # the first row has one key (no choice): left out
    np.testing.assert_allclose(entropy, _entropy(toy.result.weights[0][:, 1:]), rtol=1e-4)  # the formula

    png = ex.export("stats", str(tmp_path / "stats.png"))
    values = np.stack([frames.columns[n] for n in frames.columns], axis=1).astype(np.float64)
    lut = colormaps.lut(colormaps.DEFAULT_SEQUENTIAL)
    lay = stats_figure(toy.result, frames)
    seen = _cells(png, lay, *values.shape)
    for c in range(values.shape[1]):  # each column over its own range: its lowest cell lut[0], its highest lut[253]
        col = values[:, c]
        if np.isfinite(col).all() and col.max() > col.min():
            np.testing.assert_array_equal(seen[col.argmin(), c], lut[0, :3])
            np.testing.assert_array_equal(seen[col.argmax(), c], lut[colormaps.DATA_LEVELS - 1, :3])
    svg = ex.export("stats", str(tmp_path / "stats.svg")).read_text()
    assert all(f">{v:.3g}<" in svg for v in values[:, 0])  # every head's entropy written in its cell
    assert "Per-head statistics" in svg and all(f">{label}<" in svg for label in frames.labels)


def test_token_focus_exports_the_queries_row_of_every_head(toy, qtbot, tmp_path):
    _open(toy, qtbot, "focusDock")
    assert not toy.explain.focus.exportButton.isEnabled()  # no query focused yet: nothing to export
    toy.explain.focus.toggle(5)
    wait_shown(qtbot, toy)
    assert toy.explain.focus.exportButton.isEnabled()
    ex, row = toy.explain, toy.result.weights[0, :, 5, :]  # (heads, keys)
    lines = ex.export("focus", str(tmp_path / "focus.csv")).read_text().splitlines()
    np.testing.assert_allclose([[float(v) for v in line.split(",")[1:]] for line in lines[1:]], row, rtol=1e-5)
    png = ex.export("focus", str(tmp_path / "focus.png"))
    lay = focus_figure(toy.result, toy.explain.focus.frames)
    allowed = np.broadcast_to(toy.result.mask, toy.result.weights.shape)[0, :, 5, :]
    assert not allowed.all()  # causal: the keys after the query are masked
    index = value_index(row.astype(np.float64), (0.0, row.max()))
    index[~allowed] = colormaps.MASKED_INDEX  # grey, as the grid draws them: not a dark 0.00
    expected = colormaps.lut(colormaps.DEFAULT_SEQUENTIAL)[index]
    np.testing.assert_array_equal(_cells(png, lay, *row.shape), expected[..., :3])
    svg = ex.export("focus", str(tmp_path / "focus.svg")).read_text()
    assert f">{row.max():.2f}<" in svg and "attention weight" in svg


def test_the_logit_lens_exports_its_tokens_and_their_probabilities(toy, qtbot, tmp_path):
    _open(toy, qtbot, "lensDock")
    ex, frames = toy.explain, toy.explain.lens.frames
    lines = ex.export("lens", str(tmp_path / "lens.csv")).read_text().splitlines()
    assert len(lines) == 1 + len(frames.tokens)
    first = lines[1].split(",")[1:]
    assert [cell.rsplit(" ", 1)[0] for cell in first] == [t.replace(",", " ") for t in frames.tokens[0]]
    np.testing.assert_allclose([float(cell.rsplit(" ", 1)[1]) for cell in first], frames.probs[0], rtol=1e-3)
    png = ex.export("lens", str(tmp_path / "lens.png"))
    lay = lens_figure(toy.result, frames)
    np.testing.assert_array_equal(_cells(png, lay, *frames.index.shape), frames.lut[frames.index][..., :3])
    svg = ex.export("lens", str(tmp_path / "lens.svg")).read_text()
    assert "Logit lens" in svg and "top-1 probability" in svg


def test_rollout_exports_the_rollout_of_every_layer(toy, qtbot, tmp_path):
    _open(toy, qtbot, "rolloutDock")
    expected = rollout(toy.result.layer_weights)[0]
    rows = toy.explain.export("rollout", str(tmp_path / "r.csv")).read_text().splitlines()
    tokens = [t.replace(",", " ") for t in toy.result.tokens]
    assert rows[0].split(",") == ["query \\ key", *tokens]  # labelled as the lens, focus and stats tables are
    cells = [row.split(",") for row in rows[1:]]
    assert [c[0] for c in cells] == tokens
    np.testing.assert_allclose(np.array([c[1:] for c in cells], float), expected, rtol=1e-4, atol=1e-7)
    svg = toy.explain.export("rollout", str(tmp_path / "r.svg")).read_text()
    assert "Attention rollout" in svg and "data:image/png;base64" in svg  # the maps' own figure, not a grab
    png = np.asarray(Image.open(toy.explain.export("rollout", str(tmp_path / "r.png"))).convert("RGB"))
    assert png.shape[1] > 240 and png.shape[0] > 240


def test_compare_exports_every_heads_difference_and_the_three_maps(toy, qtbot, tmp_path):
    _open(toy, qtbot, "compareDock")
    toy.explain.compare.pinButton.click()
    wait_shown(qtbot, toy)
    ex = toy.explain
    arrays = np.load(ex.export("compare", str(tmp_path / "c.npz")))
    assert arrays["difference"].shape == toy.result.weights[0].shape and (arrays["difference"] == 0).all()
    svg = ex.export("compare", str(tmp_path / "c.svg")).read_text()
    assert svg.count("data:image/png;base64") == 3 and "current \u2212 pinned (" in svg
    pixels = np.asarray(Image.open(ex.export("compare", str(tmp_path / "c.png"))).convert("RGB"))
    (x0, y0, w, h), (x1, y1, _, _), (x2, y2, _, _) = compare_figure(toy.result, ex.compare.frames).tiles
    np.testing.assert_array_equal(pixels[y0:y0 + h, x0:x0 + w], pixels[y1:y1 + h, x1:x1 + w])  # pinned = current
    masked = ex.compare.frames.difference.lut[colormaps.MASKED_INDEX, :3]  # the causal mask's cells
    colours = {tuple(c) for c in pixels[y2:y2 + h, x2:x2 + w].reshape(-1, 3)} - {tuple(masked)}
    assert len(colours) == 1  # their difference: zero, one colour wherever a key is seen
    with pytest.raises(ValueError, match="exports npz, png, svg, not csv"):
        ex.export("compare", str(tmp_path / "c.csv"))


def test_a_panel_figure_is_drawn_from_its_data_not_the_widget(toy, qtbot, tmp_path):
    """The same data gives the same file whatever size the panel has on screen (a grab would not)."""
    _open(toy, qtbot, "statsDock")
    first = toy.explain.export("stats", str(tmp_path / "a.png")).read_bytes()
    before = toy.explain.stats.size()
    toy.resize(toy.width() - 300, toy.height() - 200)
    qtbot.waitUntil(lambda: toy.explain.stats.size() != before)  # a grab of the panel would change with it
    assert toy.explain.export("stats", str(tmp_path / "b.png")).read_bytes() == first


def test_each_panel_keeps_its_name_title_and_shortcut(window):
    """Users' muscle memory and the tests find the panels by these: one record each, unchanged."""
    expected = {"pipelineDock": ("Pipeline", "Ctrl+Shift+P"), "statsDock": ("Statistics", "Ctrl+Shift+T"),
                "focusDock": ("Token focus", "Ctrl+Shift+F"), "compareDock": ("Compare", "Ctrl+Shift+D"),
                "rolloutDock": ("Rollout", "Ctrl+Shift+R"), "headEffectsDock": ("Which heads matter", "Ctrl+Shift+H"),
                "lensDock": ("Logit lens", "Ctrl+Shift+L"), "patchDock": ("Patches", "Ctrl+Shift+G"),
                "circuitsDock": ("Circuits", "Ctrl+Shift+K"), "attributionDock": ("Logit attribution", "Ctrl+Shift+A"),
                "patchingDock": ("Patching", "Ctrl+Shift+X")}
    actions = {a.text(): a for a in window.menuBar().actions()[1].menu().actions()}
    for name, (title, shortcut) in expected.items():
        dock = window.explain.docks[name]
        assert dock.objectName() == name and dock.windowTitle() == title
        assert actions[title].shortcut().toString() == shortcut
