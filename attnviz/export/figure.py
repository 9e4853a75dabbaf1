"""One export composed as a Layout: tile sizes and places, titles, ticks, axis names and the colour bar.

Heat maps come from frames.render at full resolution (no pooling), upscaled nearest-neighbour by an
integer scale, so every cell is a crisp square of exactly the view's colours.
"""

from __future__ import annotations

import math

import numpy as np

from attnviz.core.runs.runner import RunResult
from attnviz.explain import render_extras
from attnviz.export.colourbar import colour_bar, legend_swatches
from attnviz.export.generated import PromptEnd, boundary_lines, prompt_end, step_faded, step_lines
from attnviz.export.items import Layout, Line, Raster, Text, check_size
from attnviz.export.options import ExportOptions
from attnviz.export.qt import Metrics
from attnviz.export.ticks import all_labels_scale, position_ticks, token_ticks
from attnviz.export.titles import title_items, title_lines, title_parts
from attnviz.frames import ColourScale, HeatImage, ViewOptions, not_kept_note, pool_maps, quantise_scaled, render
from attnviz.style import COMPACT_DIGITS, FRAME, LABEL_PX, SOFT_INK, TICK_PX, TILE_PX, number

MIN_TILE_PX = 240  # auto scale: the longer side of a tile reaches at least this ...
MAX_AUTO_SCALE = 32  # ... with at most this many pixels per cell
MIN_SHORT_PX, MAX_AUTO_LONG_PX = 64, 1024  # thin maps: widen the short side, within this long side
GAP = 10  # between tiles
MARGIN = 16  # around everything, when anything besides the tiles is drawn
TICK_LEN = 4  # tick marks, px


def grid_shape(n: int, tile_w: int, tile_h: int) -> tuple[int, int]:
    """(columns, rows) whose overall shape is closest to 3:2, penalising empty slots."""
    best, best_cost = (n, 1), float("inf")
    for cols in range(1, n + 1):
        rows = -(-n // cols)
        if cols > 1 and (cols - 1) * rows >= n:  # a column fewer fits too: not a distinct layout
            continue
        aspect = (cols * tile_w) / max(rows * tile_h, 1)
        cost = abs(math.log(aspect / 1.5)) + 0.3 * (cols * rows - n)
        if cost < best_cost:
            best, best_cost = (cols, rows), cost
    return best


def _token_labels(result: RunResult, options: ExportOptions) -> tuple[list[str], list[str]] | None:
    """(row labels, column labels) of a token-labelled map (pretrained models, toys); None for positions."""
    axes = result.axis_tokens()
    if axes is None or options.what == "output":
        return None
    from attnviz.models.tokens import display  # on first use: token-labelled runs only

    return [display(t) for t in axes[0]], [display(t) for t in axes[1]]


def _axis_names(options: ExportOptions, tokens: bool = False) -> tuple[str, str]:
    """(x label, y label)."""
    if options.what != "output":
        return ("key token", "query token") if tokens else ("key position j", "query position i")
    rows = "key position j" if options.tensor in ("k", "v") else "query position i"
    return "feature", rows


def _select(result: RunResult, options: ExportOptions) -> tuple[list[HeatImage], str, bool, ColourScale]:
    """The tiles to draw (full resolution), the colour bar caption, whether levels are shared, and
    the colour scale (non-linear scales label the bar with their own ticks)."""
    view = ViewOptions(view=options.map_view, batch_index=options.batch_index, colormap=options.colormap,
                       diverging=options.diverging, shared_scale=options.shared_scale, tensor=options.tensor,
                       tensor_head=options.tensor_head, max_px=None, tensor_px=None,
                       mean=options.what == "mean", scale_mode=options.scale_mode,
                       rollout=options.what == "rollout")
    frames = render(result, view)
    frames.extras = render_extras(result, view)
    if options.what == "output":
        if frames.tensor is None:
            raise ValueError(not_kept_note(result, options.tensor))
        return [frames.tensor], "value", True, ColourScale()
    if options.what == "rollout":
        rollout = frames.extras["rollout"]
        if rollout.message:
            raise ValueError(rollout.message)
        scale = rollout_scale(rollout, options.scale_mode)
        return [rollout.image], "rollout share" + (f" {scale.unit}" if scale.unit else ""), True, scale
    scale = frames.scale
    caption = {"weights": "attention weight", "scores": "score"}.get(options.map_view, options.map_view)
    if scale.unit:
        caption += f" {scale.unit}"
    if options.what == "mean":
        return [frames.mean], caption, True, scale
    if options.what == "head":
        return [frames.heads[options.head]], caption, True, scale
    return list(frames.heads), caption, options.shared_scale, scale


def rollout_scale(rollout, mode: str) -> ColourScale:
    """The colour scale of a rollout map (it is quantised alone, so its ticks are recomputed here)."""
    return quantise_scaled(pool_maps(rollout.data[None], None, None, None, False, row=mode == "row"), True, mode)[2]


def auto_scale(rows: int, cols: int) -> int:
    """Pixels per cell: the longer side of a tile reaches MIN_TILE_PX, and a thin map (say 4 x 300)
    is scaled further so its shorter side reaches MIN_SHORT_PX while the longer stays within
    MAX_AUTO_LONG_PX; never more than MAX_AUTO_SCALE."""
    long, short = max(rows, cols, 1), max(min(rows, cols), 1)
    s = max(math.ceil(MIN_TILE_PX / long), min(math.ceil(MIN_SHORT_PX / short), MAX_AUTO_LONG_PX // long))
    return max(1, min(MAX_AUTO_SCALE, s))


def _tick_texts(result: RunResult, options: ExportOptions, rows: int, cols: int,
                s: int) -> tuple[dict[int, str], dict[int, str], bool]:
    """(x, y) tick labels by cell index, and whether they are tokens: positions where labels are
    on; token labels, thinned to what fits, for token-labelled maps."""
    names = _token_labels(result, options)
    fq, fk = result.pool_factor or (1, 1)  # a pooled map's cell j covers positions j*f ..
    if names is not None and (fq, fk) != (1, 1):  # a pooled cell is labelled with its first token
        names = (names[0][::fq], names[1][::fk])
    if not options.axis_labels:  # no ticks, and no room kept for them
        return {}, {}, names is not None
    x_ticks, y_ticks = position_ticks(cols, cols * s), position_ticks(rows, rows * s)
    if names is not None:
        y_ticks, x_ticks = token_ticks(rows, s, options.all_labels), token_ticks(cols, s, options.all_labels)
    ytext = {j: names[0][j] if names else str(j * fq) for j in y_ticks}
    xtext = {j: names[1][j] if names else str(j * fk) for j in x_ticks}
    return xtext, ytext, names is not None


def _tick_extent(m: Metrics, xtext: dict, ytext: dict, rotated: bool) -> tuple[int, int]:
    """(width of a tile block's y tick column, height of its x tick row)."""
    ytick_w = (math.ceil(max(m.width(t, TICK_PX) for t in ytext.values())) + TICK_LEN + 4) if ytext else 0
    if not xtext:
        return ytick_w, 0
    if rotated:  # x labels stand rotated, reading bottom to top
        return ytick_w, math.ceil(max(m.width(t, TICK_PX) for t in xtext.values())) + TICK_LEN + 4
    return ytick_w, m.height(TICK_PX) + TICK_LEN + 2


def _axis_name_items(items: list, m: Metrics, grid: tuple, margin: int, xname: str, yname: str) -> None:
    """The axis names: x centred below the grid (never left of it), y rotated at the left margin."""
    grid_x, grid_y, grid_w, grid_h = grid
    x_mid = max(grid_x + grid_w / 2, grid_x + m.width(xname, LABEL_PX) / 2)
    items.append(Text(x_mid, grid_y + grid_h + 2 + m.ascent(LABEL_PX), xname, LABEL_PX,
                      anchor="middle", color=SOFT_INK))
    items.append(Text(margin + m.ascent(LABEL_PX), grid_y + grid_h / 2, yname, LABEL_PX,
                      anchor="middle", color=SOFT_INK, rotated=True))


def _tile_items(items: list, m: Metrics, tiles, titles: list[str] | None, grid: tuple, block: tuple,
                ticks: tuple | None, end: PromptEnd | None = None) -> list[tuple[int, int, int, int]]:
    """Each tile's image (cells upscaled s times), title and ticks at its place in the grid
    (x, y, columns); block = (y tick column, inner width, block width and height, title height, s);
    `end`: a generation's marks. Returns the images' rectangles."""
    grid_x, grid_y, ncols = grid
    ytick_w, inner_w, block_w, block_h, tt_h, s = block
    rects = []
    for i, t in enumerate(tiles):
        r, col = divmod(i, ncols)
        img_h, img_w = (n * s for n in t.image.shape)
        by = grid_y + r * (block_h + GAP)
        ix = grid_x + col * (block_w + GAP) + ytick_w + (inner_w - img_w) // 2
        iy = by + tt_h
        rgba = step_faded(t.lut[t.image], end)
        if s > 1:
            rgba = np.repeat(np.repeat(rgba, s, axis=0), s, axis=1)
        items.append(Raster(ix, iy, np.ascontiguousarray(rgba)))
        rects.append((ix, iy, img_w, img_h))
        if end is not None:  # over the map as the window paints them: the prompt's end, then the step's row
            items += boundary_lines(end, rects[-1], s) + step_lines(end, rects[-1], s)
        if titles is not None:
            items.append(Text(ix + img_w / 2, by + m.ascent(TILE_PX, True), titles[i], TILE_PX, True, "middle"))
        if ticks is not None:
            _tick_items(items, m, (ix, iy, img_w, img_h, s), *ticks, end=end)
    return rects


def _tick_items(items: list, m: Metrics, image: tuple, xtext: dict, ytext: dict, rotated: bool,
                end: PromptEnd | None = None) -> None:
    """Tick marks and labels below and left of one tile's image (x, y, width, height, cell px); a generation's
    (`end`) in blue from the prompt's end on."""
    ix, iy, img_w, img_h, s = image
    end = end or PromptEnd(None, None)
    tick_len = TICK_LEN
    ta = m.ascent(TICK_PX)
    for j, text in xtext.items():
        x = ix + (j + 0.5) * s
        items.append(Line(x, iy + img_h, x, iy + img_h + tick_len, FRAME))
        if rotated:  # token labels stand, reading bottom to top
            items.append(Text(x + ta * 0.36, iy + img_h + tick_len + 3, text, TICK_PX, anchor="end",
                              color=end.ink(j, "x"), rotated=True))
        else:
            items.append(Text(x, iy + img_h + tick_len + 1 + ta, text, TICK_PX, anchor="middle",
                              color=end.ink(j, "x")))
    for j, text in ytext.items():
        y = iy + (j + 0.5) * s
        items.append(Line(ix - tick_len, y, ix, y, FRAME))
        items.append(Text(ix - tick_len - 3, y + ta * 0.36, text, TICK_PX, anchor="end", color=end.ink(j, "y")))


def layout(result: RunResult, options: ExportOptions | None = None) -> Layout:
    """Compose the export: sizes, positions and drawing items. ValueError for bad options or a too-large image."""
    options = options or ExportOptions()
    options.check(result.config)
    options.check_held(result)
    options.check_step(result)
    m = Metrics()
    tiles, caption, shared, colour_scale = _select(result, options)
    rows, cols = tiles[0].image.shape
    s = options.scale or auto_scale(rows, cols)
    if options.all_labels and options.axis_labels and not options.scale:
        s = max(s, all_labels_scale())  # every label fits its cell
    img_w, img_h = cols * s, rows * s
    many = len(tiles) > 1
    tile_titles = _tile_titles(tiles, shared) if options.title and many else None
    margin = MARGIN if options.title or options.colorbar or options.axis_labels else 0

    xtext, ytext, tokens = _tick_texts(result, options, rows, cols, s)
    tt_h, ytick_w, inner_w, block_w, block_h = _tile_block(m, (xtext, ytext, tokens), img_w, img_h, tile_titles)
    ncols, nrows = grid_shape(len(tiles), block_w, block_h) if many else (1, 1)
    grid_w = ncols * block_w + (ncols - 1) * GAP
    grid_h = nrows * block_h + (nrows - 1) * GAP
    check_size(grid_w, grid_h)  # before allocating any upscaled tile

    label_h = m.height(LABEL_PX) + 4 if options.axis_labels else 0  # x label below, y label left
    xname, yname = _axis_names(options, tokens)
    # a grid shorter than the rotated y label gets room above and below so the label never overhangs
    pad = max(0, math.ceil(m.width(yname, LABEL_PX)) + 8 - grid_h) if options.axis_labels else 0
    summary, lines, title_h = _heading(m, result, options, tiles, max(label_h + grid_w + 200, 520))
    top = margin
    grid_x = margin + label_h
    grid_y = top + title_h + pad // 2

    items: list = []
    tile_rects = _tile_items(items, m, tiles, tile_titles, (grid_x, grid_y, ncols),
                             (ytick_w, inner_w, block_w, block_h, tt_h, s),
                             (xtext, ytext, tokens) if options.axis_labels else None,
                             prompt_end(result, options.what, options.step))

    content_bottom = grid_y + grid_h
    if options.axis_labels:
        _axis_name_items(items, m, (grid_x, grid_y, grid_w, grid_h), margin, xname, yname)
        content_bottom = max(content_bottom + label_h, grid_y + grid_h + pad - pad // 2)

    right = grid_x + max(grid_w, math.ceil(m.width(xname, LABEL_PX)) if options.axis_labels else 0)
    if options.colorbar:
        last_img_bottom = grid_y + (nrows - 1) * (block_h + GAP) + tt_h + img_h
        right, bar_bottom = colour_bar(items, m, right + 24, (grid_y, grid_y + tt_h, last_img_bottom),
                                       caption if shared else f"{caption} (per-head scale)", tiles[0].lut,
                                       tiles[0].levels if shared else None, colour_scale.ticks,
                                       legend_swatches(tiles, options))
        content_bottom = max(content_bottom, bar_bottom)

    width = max(right + margin, title_items(items, m, lines, margin, top)[0] + margin)
    height = content_bottom + margin
    check_size(width, height)
    return Layout(int(width), int(height), items, tile_rects, s, summary)


def _tile_titles(tiles: list[HeatImage], shared: bool) -> list[str]:
    """Each tile's title; with a colour scale per head, that head's range beside it."""
    def span(t: HeatImage) -> str:
        lo, hi = (number(v, COMPACT_DIGITS, typeset=True) for v in t.levels)
        return f"{t.title} ({lo} to {hi})"

    return [t.title if shared else span(t) for t in tiles]


def _heading(m: Metrics, result: RunResult, options: ExportOptions, tiles: list[HeatImage],
             wrap_w: float) -> tuple[str, list, int]:
    """(summary, title lines, their height): the summary says it all in one line (the SVG's <title>)."""
    heading, parts = title_parts(result, options, tiles)
    summary = heading + " \u2014 " + " \u00b7 ".join(parts)
    lines = title_lines(m, heading, parts, wrap_w) if options.title else []
    return summary, lines, sum(m.height(px, bold) + 2 for _, px, bold, _ in lines) + (8 if lines else 0)


def _tile_block(m: Metrics, ticks: tuple, img_w: int, img_h: int, titles: list[str] | None) -> tuple:
    """One tile block, [y ticks][image] with its title above and x ticks below:
    (title height, y tick width, inner width, block width, block height)."""
    tt_h = m.height(TILE_PX, True) + 4 if titles else 0
    ytick_w, xtick_h = _tick_extent(m, *ticks)
    title_w = max((math.ceil(m.width(t, TILE_PX, True)) for t in titles), default=0) if titles else 0
    inner_w = max(img_w, title_w)
    return tt_h, ytick_w, inner_w, ytick_w + inner_w, tt_h + img_h + xtick_h
