"""patchView: a vision model's attention on the picture it saw, and the panel's Image row.

The worker computes the arrays (models/patches.py: each head's row for the query over the patch grid, their
mean, rollout's row); this panel only colours and draws them: the picture with the overlay blended over it,
drawn with whole patches (no smoothing: crisp patch edges), and a head strip of small overlays, one per head.
Click a patch to make it the query ([CLS] by default), a strip tile to focus that head; Export… writes
the overlay through attnviz.export (export/patches.py). Also the Image row
(ImageChooser: a file name, Open… and Clear) and drops of an image file onto the window (image_drop).
"""

from __future__ import annotations

from functools import partial

import numpy as np
from PySide6.QtCore import QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QImage, QPainter, QPen
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSlider,
    QSpinBox,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from attnviz import style
from attnviz.core.runs.config import IMAGE_SUFFIXES
from attnviz.models.patches import ALPHA, MODES, PatchFrames, overlay_rgba
from attnviz.ui.widgets.basic import named
from attnviz.ui.widgets.file_chooser import FileDrop, PathChooser

IMAGE_FILTER = f"Images ({' '.join('*' + s for s in IMAGE_SUFFIXES)});;All files (*)"
STRIP_PX = 84  # a head strip tile's side


def _qimage(array: np.ndarray) -> QImage:
    """An (h, w, 3|4) uint8 array as a QImage that owns a copy of its pixels."""
    array = np.ascontiguousarray(array)
    h, w, c = array.shape
    fmt = QImage.Format_RGB888 if c == 3 else QImage.Format_RGBA8888
    return QImage(array.data, w, h, w * c, fmt).copy()


class PatchCanvas(QWidget):
    """The picture with one overlay over it, fitted to the widget; a click or hover names a patch."""

    sigPatch = Signal(int)  # the token index of the patch clicked

    def __init__(self, small: bool = False, parent: QWidget | None = None):
        super().__init__(parent)
        self.small = small
        self.setMouseTracking(not small)
        self.picture: QImage | None = None
        self.overlay: QImage | None = None
        self.frames: PatchFrames | None = None
        self.values: np.ndarray | None = None
        self.selected = False  # a strip tile of the focused head: outlined
        self.setMinimumSize(QSize(STRIP_PX, STRIP_PX) if small else QSize(160, 160))

    def set_overlay(self, frames: PatchFrames, values: np.ndarray, alpha: float) -> None:
        if self.frames is None or self.frames.picture is not frames.picture:
            self.picture = _qimage(frames.picture)
        self.frames, self.values = frames, values
        self.overlay = _qimage(overlay_rgba(values, frames.lut, alpha))
        self.update()

    def clear(self) -> None:
        self.picture = self.overlay = self.frames = self.values = None
        self.update()

    def target(self) -> QRect:
        """Where the picture is drawn: the largest rectangle of its aspect that fits, centred."""
        if self.picture is None:
            return QRect()
        w, h = self.picture.width(), self.picture.height()
        s = min(self.width() / w, self.height() / h)
        tw, th = max(int(w * s), 1), max(int(h * s), 1)
        return QRect((self.width() - tw) // 2, (self.height() - th) // 2, tw, th)

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor(style.BACKGROUND))
        if self.picture is None:
            return
        rect = self.target()
        painter.setRenderHint(QPainter.SmoothPixmapTransform, True)  # the photo itself: smooth
        painter.drawImage(rect, self.picture)
        painter.setRenderHint(QPainter.SmoothPixmapTransform, False)  # the patches: crisp edges
        painter.drawImage(rect, self.overlay)
        self._mark_query(painter, rect)
        if self.selected:
            painter.setPen(QPen(QColor(style.SELECTED), 3))
            painter.drawRect(rect.adjusted(1, 1, -2, -2))

    def _mark_query(self, painter: QPainter, rect: QRect) -> None:
        f = self.frames
        patch = f.query - f.prefix
        if patch < 0:
            return
        rows, cols = f.grid
        r, c = divmod(patch, cols)
        pw, ph = rect.width() / cols, rect.height() / rows
        painter.setPen(QPen(QColor(style.LIGHT_INK), 2 if not self.small else 1))
        painter.drawRect(QRect(int(rect.x() + c * pw), int(rect.y() + r * ph), int(pw), int(ph)))

    def patch_at(self, pos: QPoint) -> int | None:
        """The token index of the patch under `pos` (None: outside the picture)."""
        rect = self.target()
        if self.frames is None or not rect.contains(pos):
            return None
        rows, cols = self.frames.grid
        r = min(int((pos.y() - rect.y()) * rows / rect.height()), rows - 1)
        c = min(int((pos.x() - rect.x()) * cols / rect.width()), cols - 1)
        return self.frames.prefix + r * cols + c

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        token = self.patch_at(event.position().toPoint())
        if token is not None and event.button() == Qt.LeftButton:
            self.sigPatch.emit(token)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        token = self.patch_at(event.position().toPoint())
        if token is None or self.values is None:
            self.setToolTip("")
            return
        f = self.frames
        r, c = divmod(token - f.prefix, f.grid[1])
        text = f"{f.tokens[token]}: {self.values[r, c]:.4g} (click: make it the query)"
        self.setToolTip(text)
        QToolTip.showText(event.globalPosition().toPoint(), text, self)


class PatchView(QWidget):
    """patchView: the query's attention over the picture (focused head, mean or rollout) and the head strip."""

    sigChanged = Signal()  # the query changed: the window asks the worker for new frames
    sigExport = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        named(self, "patchView")
        self.frames: PatchFrames | None = None
        self.query: int | None = None  # None: the first token ([CLS])
        self.canvas = named(PatchCanvas(), "patchCanvas")
        self.canvas.sigPatch.connect(self.set_query)
        self.infoLabel = named(QLabel("Open a vision model (ViT, DeiT, DINOv2, CLIP, SigLIP) and an image"),
                               "patchInfoLabel")
        self.infoLabel.setWordWrap(True)
        self.strip = QWidget()
        self.stripLayout = QHBoxLayout(self.strip)
        self.stripLayout.setContentsMargins(0, 0, 0, 0)
        self.stripLayout.setSpacing(4)
        self.tiles: list[PatchCanvas] = []
        scroll = named(QScrollArea(), "patchHeadStrip")
        scroll.setWidget(self.strip)
        scroll.setWidgetResizable(True)
        scroll.setFixedHeight(STRIP_PX + 40)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAsNeeded)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(self._controls())
        layout.addWidget(self.infoLabel)
        layout.addWidget(self.canvas, 1)
        layout.addWidget(scroll)

    def _controls(self) -> QHBoxLayout:
        self.modeCombo = named(QComboBox(), "patchModeCombo")
        for mode, text in MODES.items():
            self.modeCombo.addItem(text, mode)
        self.modeCombo.setToolTip("The focused head's weights, their mean over heads, or attention rollout over "
                                  "every layer, from the query token to each patch")
        self.headSpin = named(QSpinBox(), "patchHeadSpin")
        self.headSpin.setPrefix("head ")
        self.headSpin.setToolTip("The focused head (or click its tile in the strip below)")
        self.opacitySlider = named(QSlider(Qt.Horizontal), "patchOpacitySlider")
        self.opacitySlider.setRange(0, 100)
        self.opacitySlider.setValue(int(ALPHA * 100))
        self.opacitySlider.setMinimumWidth(80)
        self.opacitySlider.setMaximumWidth(140)
        self.opacitySlider.setToolTip("The overlay's opacity over the picture")
        self.clsButton = named(QPushButton("Query [CLS]"), "patchClsButton")
        self.clsButton.setToolTip("Make the first token ([CLS]) the query again; click a patch to make it the query")
        self.exportButton = named(QPushButton("Export…"), "patchExportButton")
        self.exportButton.setToolTip("Save the overlay on the picture as PNG or SVG (crisp patch edges)")
        for signal in (self.modeCombo.currentIndexChanged, self.headSpin.valueChanged, self.opacitySlider.valueChanged):
            signal.connect(self._redraw)
        self.clsButton.clicked.connect(lambda: self.set_query(None))
        self.exportButton.clicked.connect(self.sigExport)
        row = QHBoxLayout()
        for w in (self.modeCombo, self.headSpin, QLabel("Opacity"), self.opacitySlider, self.clsButton):
            row.addWidget(w)
        row.addStretch(1)
        row.addWidget(self.exportButton)
        return row

    @property
    def mode(self) -> str:
        return self.modeCombo.currentData()

    @property
    def alpha(self) -> float:
        return self.opacitySlider.value() / 100

    def set_query(self, token: int | None) -> None:
        if token != self.query:
            self.query = token
            self.sigChanged.emit()

    def _tile_clicked(self, head: int, _token: int) -> None:
        self.focus_head(head)

    def focus_head(self, head: int) -> None:
        self.headSpin.setValue(head)
        self.modeCombo.setCurrentIndex(self.modeCombo.findData("head"))

    def show_frames(self, frames: PatchFrames | None) -> None:
        self.frames = frames
        if frames is None or frames.message:
            self.canvas.clear()
            self._set_tiles(0)
            self.infoLabel.setText(frames.message if frames is not None else "")
            return
        heads = frames.heads.shape[0]
        self.headSpin.setMaximum(heads - 1)
        self._set_tiles(heads)
        self._redraw()

    def _set_tiles(self, n: int) -> None:
        while len(self.tiles) > n:
            self.tiles.pop().deleteLater()
        while len(self.tiles) < n:
            head = len(self.tiles)
            tile = named(PatchCanvas(small=True), f"patchHeadTile{head}")
            tile.setFixedSize(STRIP_PX, STRIP_PX)
            tile.sigPatch.connect(partial(self._tile_clicked, head))
            self.stripLayout.insertWidget(len(self.tiles), tile)
            self.tiles.append(tile)
        if self.stripLayout.count() == n:  # a stretch after the tiles keeps them left
            self.stripLayout.addStretch(1)

    def _redraw(self) -> None:
        f = self.frames
        if f is None or f.message:
            return
        head = self.headSpin.value()
        self.canvas.set_overlay(f, f.values(self.mode, head), self.alpha)
        for h, tile in enumerate(self.tiles):
            tile.selected = self.mode == "head" and h == head
            tile.set_overlay(f, f.heads[h], self.alpha)
            tile.setToolTip(f"head {h}: click to focus it")
        values = f.values(self.mode, head)
        self.infoLabel.setText(f"{f.title(self.mode, head)} · peak {float(values.max()):.3g} at "
                               f"{f.tokens[f.prefix + int(values.argmax())]} · {f.grid[0]}×{f.grid[1]} patches of "
                               f"{f.picture.shape[1] // f.grid[1]} px · click a patch to make it the query")


class ImageChooser(PathChooser):
    """The panel's Image row: the file's name, Open… and a clear button; path() is "" for none."""

    def __init__(self, parent: QWidget | None = None, buttons_apart: bool = False):
        super().__init__("image", "Open image", IMAGE_FILTER, "Choose a PNG, JPEG or WebP picture (or drop one onto "
                         "the window)", "No image: open one, or drop one onto the window", parent, buttons_apart)


def image_drop(window, chooser: ImageChooser) -> FileDrop:
    """An image file dropped anywhere on the window becomes the Image."""
    return FileDrop(window, lambda path: path.lower().endswith(IMAGE_SUFFIXES), chooser.set_path)
