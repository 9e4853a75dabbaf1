"""attnviz.export: PNG / SVG / NPZ from the data, exact colours, layout sizes, atomic writes."""

from __future__ import annotations

import base64
import os
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from attnviz import colormaps, export
from attnviz.core import RunConfig, load_preset, run, run_stages
from attnviz.core.kernel.stages import DEFAULT_RECORD
from attnviz.export import ExportError, ExportOptions
from attnviz.frames import ViewOptions, render

SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}href"
BARE = dict(title=False, colorbar=False, axis_labels=False)


@pytest.fixture(autouse=True)
def _qt(qapp):
    """A QApplication first (pytest-qt), so the exporter never creates a widget-less QGuiApplication."""
    return qapp


@pytest.fixture(scope="module")
def causal():
    return run(RunConfig(variant="causal", d_model=8, heads=4, seq_q=6, mask="causal", seed=3))


@pytest.fixture(scope="module")
def cross():
    return run(RunConfig.for_variant("cross", d_model=8, d_out=8, heads=2, seq_q=5, seq_kv=7, seed=1))


def pixels(image) -> np.ndarray:
    """A QImage as (h, w, 4) uint8 RGBA."""
    from PySide6.QtGui import QImage

    img = image.convertToFormat(QImage.Format.Format_RGBA8888)
    h, w = img.height(), img.width()
    raw = np.frombuffer(img.constBits(), np.uint8, count=h * img.bytesPerLine())
    return raw.reshape(h, img.bytesPerLine())[:, : w * 4].reshape(h, w, 4).copy()


def load_png(path) -> np.ndarray:
    from PySide6.QtGui import QImage

    img = QImage(str(path))
    assert not img.isNull(), f"{path} does not decode as an image"
    return pixels(img)


def cells(px: np.ndarray, rect, rows: int, cols: int, s: int) -> np.ndarray:
    """The colour at the centre of every cell of the tile at rect: (rows, cols, 3)."""
    x, y, w, h = rect
    assert (w, h) == (cols * s, rows * s)
    ys = y + np.arange(rows) * s + s // 2
    xs = x + np.arange(cols) * s + s // 2
    return px[np.ix_(ys, xs)][..., :3]


def test_bare_single_head_is_exactly_the_scaled_map(cross, tmp_path):
    path = export.export(cross, tmp_path / "h.png", ExportOptions(what="head", head=1, scale=3, **BARE))
    px = load_png(path)
    assert px.shape[:2] == (5 * 3, 7 * 3)  # (Lq*s, Lkv*s)
    frames = render(cross, ViewOptions(max_px=None))
    expected = np.repeat(np.repeat(frames.heads[1].lut[frames.heads[1].image], 3, 0), 3, 1)
    np.testing.assert_array_equal(px, expected)


def test_bare_grid_size_and_tiles(causal, tmp_path):
    s = 4
    lay = export.layout(causal, ExportOptions(scale=s, **BARE))
    w = h = 6 * s
    assert [r[:2] for r in lay.tiles] == [(0, 0), (w + export.GAP, 0), (0, h + export.GAP),
                                         (w + export.GAP, h + export.GAP)]
    px = load_png(export.export(causal, tmp_path / "g.png", ExportOptions(scale=s, **BARE)))
    assert px.shape[:2] == (2 * h + export.GAP, 2 * w + export.GAP) == (lay.height, lay.width)


def test_decorated_grid_has_exact_view_colours(causal, tmp_path):
    """Every cell of every tile is the LUT colour of the view; causal upper triangle = masked colour."""
    options = ExportOptions(scale=7)
    lay = export.layout(causal, options)
    px = load_png(export.export(causal, tmp_path / "grid.png", options))
    assert px.shape[:2] == (lay.height, lay.width)
    assert lay.width > 2 * 6 * 7 and lay.height > 2 * 6 * 7  # room for titles, ticks, colour bar
    frames = render(causal, ViewOptions(max_px=None))
    lut = colormaps.lut(colormaps.DEFAULT_SEQUENTIAL)
    upper = np.triu(np.ones((6, 6), bool), 1)
    assert len(lay.tiles) == 4
    for head, rect in zip(frames.heads, lay.tiles):
        got = cells(px, rect, 6, 6, 7)
        np.testing.assert_array_equal(got, lut[head.image][..., :3])
        assert (got[upper] == lut[colormaps.MASKED_INDEX, :3]).all()
        assert not (got[~upper] == lut[colormaps.MASKED_INDEX, :3]).all(-1).any()


def test_no_key_rows_have_the_nan_colour(tmp_path):
    result = run(load_preset("no-key-rows").replace(d_model=8, d_out=8))
    lay = export.layout(result, ExportOptions(scale=2))
    px = pixels(export.compose_image(result, ExportOptions(scale=2)))
    empty = result.fully_masked_rows[0, 0]
    assert empty.any() and not empty.all()
    nan = colormaps.lut(colormaps.DEFAULT_SEQUENTIAL)[colormaps.NAN_INDEX, :3]
    for rect in lay.tiles:
        got = cells(px, rect, 12, 8, 2)
        assert (got[empty] == nan).all()
        assert not (got[~empty] == nan).all(-1).any()


def test_scores_grid_uses_the_diverging_map(causal):
    options = ExportOptions(what="scores", scale=3, diverging="coolwarm")
    lay = export.layout(causal, options)
    px = pixels(export.compose_image(causal, options))
    frames = render(causal, ViewOptions(view="scores", diverging="coolwarm", max_px=None))
    for head, rect in zip(frames.heads, lay.tiles):
        np.testing.assert_array_equal(cells(px, rect, 6, 6, 3), colormaps.lut("coolwarm")[head.image][..., :3])


def test_output_tensor_tile(cross):
    options = ExportOptions(what="output", scale=2, **BARE)
    image = export.compose_image(cross, options)
    assert (image.width(), image.height()) == (8 * 2, 5 * 2)  # (d_out*s, Lq*s)


def test_wide_tensor_is_exported_at_full_resolution():
    result = run(RunConfig(d_model=1100, heads=1, seq_q=2, mask="none"))
    image = export.compose_image(result, ExportOptions(what="output", scale=1, **BARE))
    assert (image.width(), image.height()) == (1100, 2)  # never pooled like the on-screen view


def test_mean_tile_and_auto_scale(causal):
    lay = export.layout(causal, ExportOptions(what="mean", **BARE))
    assert lay.scale == export.auto_scale(6, 6) and lay.scale * 6 >= min(export.MIN_TILE_PX, 6 * export.MAX_AUTO_SCALE)
    assert len(lay.tiles) == 1 and (lay.width, lay.height) == (6 * lay.scale, 6 * lay.scale)
    assert export.auto_scale(16, 16) * 16 >= 240
    assert export.auto_scale(4, 300) >= 2  # a thin map is not left 4 px tall


def test_svg_is_valid_with_one_image_per_head_and_vector_text(causal, tmp_path):
    from PySide6.QtGui import QImage

    path = export.export(causal, tmp_path / "grid.svg", ExportOptions(scale=5))
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg" and root.get("version") == "1.1"
    lay = export.layout(causal, ExportOptions(scale=5))
    assert (int(root.get("width")), int(root.get("height"))) == (lay.width, lay.height)  # same layout as PNG
    images = root.findall(f".//{SVG}image")
    assert len(images) == 4
    for image, rect in zip(images, lay.tiles):
        assert "pixelated" in image.get("style") and "crisp-edges" in image.get("style")
        assert tuple(int(image.get(k)) for k in ("x", "y", "width", "height")) == rect
        href = image.get(XLINK)
        assert href.startswith("data:image/png;base64,")
        png = QImage.fromData(base64.b64decode(href.split(",", 1)[1]), "PNG")
        assert (png.width(), png.height()) == rect[2:]
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "Attention weights \u00b7 4 heads" in texts
    assert {"head 0", "head 1", "head 2", "head 3", "key position j", "query position i"} <= set(texts)
    assert "masked" in texts  # the colour bar's legend


def test_npz_holds_every_array_and_the_config(cross, tmp_path):
    path = export.export(cross, tmp_path / "run.npz")
    with np.load(path) as data:
        expected = {"config", "mask", "fully_masked_rows", *run_stages(cross.config)} & (
            {"config", "mask", "fully_masked_rows"} | DEFAULT_RECORD)
        assert set(data.files) == expected | {"device"}
        for name in expected - {"config"}:
            np.testing.assert_array_equal(data[name], getattr(cross, name))
        assert str(data["device"]) == cross.device == "cpu"  # what titles say the maps were computed on
        assert RunConfig.from_json(str(data["config"])) == cross.config


def test_bad_extension_is_a_clear_value_error(causal, tmp_path):
    with pytest.raises(ValueError, match=r"'\.gif'.*\.png, \.svg, \.npz"):
        export.export(causal, tmp_path / "x.gif")
    with pytest.raises(ValueError, match="no extension"):
        export.export(causal, tmp_path / "x")
    assert list(tmp_path.iterdir()) == []


def test_bad_options_are_value_errors(causal, tmp_path):
    with pytest.raises(ValueError, match="head 4 does not exist"):
        export.export(causal, tmp_path / "x.png", ExportOptions(what="head", head=4))
    with pytest.raises(ValueError, match="batch index 1"):
        export.export(causal, tmp_path / "x.npz", ExportOptions(batch_index=1))
    assert list(tmp_path.iterdir()) == []


def test_unwritable_target_is_an_export_error(causal, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    (tmp_path / "folder.png").mkdir()
    cases = {blocker / "x.png": "is a file, not a folder", tmp_path / "missing" / "x.npz": "does not exist",
             tmp_path / "folder.png": "it is a folder"}
    for target, reason in cases.items():
        with pytest.raises(ExportError, match=reason) as info:
            export.export(causal, target, ExportOptions(scale=1))
        assert str(info.value).startswith(f"cannot write {target}: ")
        assert info.value.path == str(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder.png"]
    assert blocker.read_text() == "not a folder"


@pytest.mark.parametrize("name", ["old.png", "old.svg", "old.npz"])
def test_failed_write_keeps_the_old_file_and_leaves_no_temp(causal, tmp_path, monkeypatch, name):
    target = tmp_path / name
    target.write_bytes(b"previous contents")

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)  # fails after the data went to the temp file
    with pytest.raises(ExportError, match="no space left on device"):
        export.export(causal, target, ExportOptions(scale=2))
    assert target.read_bytes() == b"previous contents"
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_interrupted_npz_write_keeps_the_old_file(causal, tmp_path, monkeypatch):
    target = tmp_path / "run.npz"
    target.write_bytes(b"previous contents")

    def half_then_interrupt(file, **arrays):
        file.write(b"PK\x03\x04 half an archive")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez_compressed", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        export.export(causal, target)
    assert target.read_bytes() == b"previous contents"
    assert [p.name for p in tmp_path.iterdir()] == ["run.npz"]


def test_replacing_a_file_works_and_keeps_ordinary_permissions(causal, tmp_path):
    target = tmp_path / "x.png"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    export.export(causal, target, ExportOptions(scale=1, **BARE))
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert target.stat().st_mode & 0o777 == 0o640  # an existing file keeps its mode
    fresh = export.export(causal, tmp_path / "new.npz")
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~_umask()  # not mkstemp's 0600


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_too_large_an_image_is_refused_before_writing(tmp_path, monkeypatch):
    result = run(RunConfig(d_model=8, heads=1, seq_q=40))
    monkeypatch.setattr("attnviz.export.items.MAX_PIXELS", 1000)  # where the limit is checked
    with pytest.raises(ExportError, match="pixels, over the limit"):
        export.export(result, tmp_path / "big.png", ExportOptions(scale=10))
    assert list(tmp_path.iterdir()) == []


def test_from_view_copies_what_the_view_shows():
    view = ViewOptions(view="scores", batch_index=2, colormap="magma", diverging="PuOr_r", shared_scale=False)
    opts = ExportOptions.from_view(view, what="head", head=3)
    assert (opts.view, opts.batch_index, opts.colormap, opts.diverging, opts.shared_scale, opts.head) == (
        "scores", 2, "magma", "PuOr_r", False, 3)


def test_default_filename(causal):
    assert export.default_filename(causal) == "attnviz-causal-weights-grid.png"
    assert export.default_filename(causal, ExportOptions(what="head", head=2), ".svg") == \
        "attnviz-causal-weights-head2.svg"


def test_a_bare_token_labelled_grid_keeps_no_room_for_ticks():
    toy = run(load_preset("toy-reverse"))  # token labels along its axes
    s = 4
    lay = export.layout(toy, ExportOptions(scale=s, **BARE))
    w, h = toy.config.lkv * s, toy.config.seq_q * s
    assert [r[:2] for r in lay.tiles] == [(0, 0), (w + export.GAP, 0), (0, h + export.GAP),
                                         (w + export.GAP, h + export.GAP)]
    assert (lay.width, lay.height) == (2 * w + export.GAP, 2 * h + export.GAP)


def test_a_write_through_a_symlink_replaces_its_target_and_keeps_the_link(tmp_path):
    """-o link.png where link.png is a link: the file it points to is replaced with its own mode, the
    link stays a link (it was replaced by a new file whose mode came from the link's target)."""
    import os
    import stat

    from attnviz.atomic import write_bytes

    real = tmp_path / "real.png"
    real.write_bytes(b"old")
    os.chmod(real, 0o640)
    link = tmp_path / "link.png"
    link.symlink_to(real)
    write_bytes(link, b"new")
    assert link.is_symlink() and real.read_bytes() == b"new"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_a_write_to_a_device_or_pipe_is_refused_before_anything_is_opened(tmp_path):
    import os
    import stat

    from attnviz.atomic import ExportError, check_target, write_bytes

    fifo = tmp_path / "maps.png"
    os.mkfifo(fifo)
    link = tmp_path / "full.png"
    link.symlink_to("/dev/full")
    for target in (fifo, link):
        with pytest.raises(ExportError, match="not a regular file"):
            check_target(target)
        with pytest.raises(ExportError, match="not a regular file"):
            write_bytes(target, b"x")
    assert link.is_symlink() and stat.S_ISFIFO(fifo.stat().st_mode)
    from attnviz.cli import main

    stats_fifo, stats_link = tmp_path / "stats.csv", tmp_path / "full.csv"
    os.mkfifo(stats_fifo)
    stats_link.symlink_to("/dev/full")
    for target, stats in ((fifo, stats_fifo), (link, stats_link)):  # the CLI: a bad path, exit 2 before compute
        assert main(["render", "--d-model", "8", "--heads", "2", "--seq-q", "4", "-o", str(target)]) == 2
        assert main(["render", "--d-model", "8", "--heads", "2", "--stats", str(stats)]) == 2
    assert link.is_symlink() and os.readlink(link) == "/dev/full" and stat.S_ISFIFO(fifo.stat().st_mode)
    assert stats_link.is_symlink() and stat.S_ISFIFO(stats_fifo.stat().st_mode)


def test_under_umask_000_a_new_export_is_readable_and_writable_by_all(tmp_path):
    """umask 000 asks for 0666 files; it was once taken for 'unknown' and gave 0644."""
    import os
    import stat

    from attnviz.atomic import write_bytes

    old = os.umask(0)
    try:
        write_bytes(tmp_path / "open.csv", b"x")
        os.umask(0o077)
        write_bytes(tmp_path / "private.csv", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "open.csv").stat().st_mode) == 0o666
    assert stat.S_IMODE((tmp_path / "private.csv").stat().st_mode) == 0o600


def test_a_dangling_link_is_refused_rather_than_creating_its_target(tmp_path):
    from attnviz.atomic import BadPath, write_bytes

    link = tmp_path / "maps.png"
    link.symlink_to(tmp_path / "elsewhere" / "gone.png")
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(BadPath, match="symbolic link to .*gone.png, which does not exist"):
        write_bytes(link, b"x")
    assert list((tmp_path / "elsewhere").iterdir()) == [] and link.is_symlink()


def tick_labels_under(lay, tile: tuple[int, int, int, int]) -> list[str]:
    """The token labels standing under one tile of a composed export, left to right."""
    x, y, w, h = tile
    texts = [t for t in lay.items if isinstance(t, export.items.Text) and t.rotated and x <= t.x <= x + w + 8
             and y + h < t.y < y + h + 40]
    return [t.text for t in sorted(texts, key=lambda t: t.x)]


def test_all_labels_labels_every_token_where_the_default_thins_them():
    toy = run(load_preset("toy-induction").replace(text="abcdefghijklmnopabcdefghijklmnop"))
    tokens = list(toy.axis_tokens()[1])
    assert len(tokens) == 32
    thinned = export.layout(toy, ExportOptions(what="head", head=0))
    assert 0 < len(tick_labels_under(thinned, thinned.tiles[0])) < 32  # every k-th where cells are small
    every = export.layout(toy, ExportOptions(what="head", head=0, all_labels=True))
    assert tick_labels_under(every, every.tiles[0]) == tokens and every.scale >= export.ticks.all_labels_scale()


def test_render_all_labels_flag_asks_for_every_label():
    from attnviz.cli import _export_options
    from attnviz.cli_flags import render_parser

    args = render_parser().parse_args(["--preset", "toy-induction", "--all-labels", "-o", "x.png"])
    assert _export_options(args).all_labels
    assert not _export_options(render_parser().parse_args(["--preset", "toy-induction", "-o", "x.png"])).all_labels
