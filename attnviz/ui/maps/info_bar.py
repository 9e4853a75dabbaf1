"""The bar above the maps: what to look for in them (the caption) and, while the mouse is on a map, the
hovered cell's exact values in its place.

The two never need the room at once, so they share one bar two lines high. (As two rows, a hover line and a
caption under it, they took four lines and a gap: at 1280 x 800 the panels below the maps had ~139 px.)
While the maps are stale, the stale banner covers the caption (not the maps' first row of titles and cells).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt, QTimer
from PySide6.QtGui import QPainter, QPalette
from PySide6.QtWidgets import QLabel, QSizePolicy, QStackedLayout, QWidget

from attnviz.ui.widgets.basic import OverlayBanner, named

HOVER_HINT = ("Hover a cell for its exact value and how it was computed; click a head to enlarge it (Esc: back); "
              "drag a rectangle on a map to see that block exactly.")
PAD = 3  # px above and below the text


class CaptionBar(QWidget):
    """captionLabel: what to look for in the maps, painted here (a new caption never lays the window out
    again: a word-wrapped QLabel that came, went or rewrapped resized the head grid inside the result swap,
    benchmarks/README.md, Behind the code). A line the caption leaves free says, muted, what hovering does."""

    def __init__(self, hint: str = HOVER_HINT) -> None:
        super().__init__()
        self._text, self._strong, self.hint = "", False, hint
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Ignored)  # the bar sizes it; never widens the window
        self.setToolTip(hint)

    def text(self) -> str:
        return self._text

    def set_caption(self, text: str, strong: bool) -> None:
        """`strong`: a trained model's own caption (bold); otherwise a muted hint."""
        if (text, strong) == (self._text, self._strong):
            return
        self._text, self._strong = text, strong
        self.setToolTip(f"{text}\n\n{self.hint}" if text else self.hint)  # the whole text where the lines cut it
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(0, self.height())

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        painter = QPainter(self)
        area = self.rect().adjusted(4, PAD, -4, -PAD)
        used = self._draw(painter, area, self._text, self._strong,
                          QPalette.WindowText if self._strong else QPalette.PlaceholderText)
        line = painter.fontMetrics().lineSpacing()
        if area.height() - used >= line:  # a line to spare: what hovering does
            self._draw(painter, area.adjusted(0, used, 0, 0), self.hint, False, QPalette.PlaceholderText)

    def _draw(self, painter: QPainter, area, text: str, bold: bool, role) -> int:
        """Draw `text` word-wrapped in `area`, cut with "…" where it needs more lines; returns the height used."""
        if not text:
            return 0
        font = self.font()
        font.setBold(bold)
        painter.setFont(font)
        painter.setPen(self.palette().color(role))
        flags = Qt.AlignLeft | Qt.AlignTop | Qt.TextWordWrap
        metrics = painter.fontMetrics()
        used = metrics.boundingRect(area, flags, text).height()
        if used > area.height():
            lines = max(1, area.height() // metrics.lineSpacing())
            text = metrics.elidedText(text, Qt.ElideRight, int(area.width() * lines * 0.9))
            used = area.height()
        painter.drawText(area, flags, text)  # clipped to the area
        return used


class CoverBanner(OverlayBanner):
    """A message laid over the whole of `host` (the info bar's caption): showing, hiding or rewording it never
    resizes anything (a row of its own resized the head grid, which lays out and re-renders every tile). A text
    longer than the host's lines is cut with "…" (the status line holds it whole). Mouse events pass through."""

    def __init__(self, host: QWidget):
        super().__init__(host)
        self._full = ""
        self.setAlignment(Qt.AlignLeft | Qt.AlignTop)
        self.setTextFormat(Qt.PlainText)

    def text(self) -> str:
        return self._full

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self._full = text
        self._place()

    def _place(self) -> None:
        host = self.parentWidget().rect()
        self.setGeometry(host)
        text, metrics = self._full, self.fontMetrics()
        room = self.contentsRect().width()  # inside the style sheet's padding
        QLabel.setText(self, text)
        lines = max(1, (host.height() - 6) // metrics.lineSpacing())
        budget = max(room, 1) * lines
        while self.heightForWidth(host.width()) > host.height() and budget > room:  # wrapping wastes line ends
            budget = int(budget * 0.9)
            QLabel.setText(self, metrics.elidedText(text, Qt.ElideRight, budget))
        self.raise_()


class InfoBar(QWidget):
    """infoBar: the caption, or while the mouse is on a map its hovered cell (hoverLabel, selectable); back to
    the caption once the mouse leaves the maps (and this bar). Two lines high; a longer hover text grows it
    once, up to MAX_LINES, and it never shrinks back: a bar that followed each text resized the head grid,
    which lays out and re-renders every tile, as the mouse moved."""

    MAX_LINES = 4

    def __init__(self) -> None:
        super().__init__()
        named(self, "infoBar")
        self.caption = named(CaptionBar(), "captionLabel")
        self.hover = named(QLabel(), "hoverLabel")
        self.hover.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.hover.setWordWrap(True)
        self.hover.setAlignment(Qt.AlignLeft | Qt.AlignTop)
        self.hover.setTextFormat(Qt.PlainText)  # token texts such as '<s>' are not markup
        self.hover.setContentsMargins(4, PAD, 4, PAD)
        self.hover.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Ignored)
        self.hover.setAutoFillBackground(True)  # raised over the stale banner while a cell is hovered
        self.hover.setToolTip("The hovered cell's exact values (select to copy); the caption returns once the "
                              "mouse leaves the maps")
        self._ink = self.hover.palette()
        self._hint_ink = QPalette(self._ink)
        self._hint_ink.setColor(QPalette.WindowText, self._ink.color(QPalette.PlaceholderText))
        self._stack = QStackedLayout(self)
        self._stack.addWidget(self.caption)
        self._stack.addWidget(self.hover)
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Fixed)
        self.setFixedHeight(self.lines(2))
        self._watched: tuple[QWidget, ...] = ()
        self.show_hint()

    def lines(self, n: int) -> int:
        """The bar's height for n lines of text (a bold caption's line is as high as a plain one)."""
        return n * self.fontMetrics().lineSpacing() + 2 * PAD

    def hovering(self) -> bool:
        """Whether the bar shows a hovered cell (else the caption)."""
        return self._stack.currentWidget() is self.hover

    def show_hover(self, text: str) -> None:
        """A hovered cell's values, in the caption's place."""
        self.hover.setPalette(self._ink)
        self.hover.setText(text)
        self._stack.setCurrentWidget(self.hover)
        self.hover.raise_()  # the hovered cell's values over a stale banner; the banner returns with the caption
        needed = min(self.hover.heightForWidth(self.width()), self.lines(self.MAX_LINES))
        if needed > self.height():  # grows once for longer texts; never shrinks back
            self.setFixedHeight(needed)

    def show_caption(self) -> None:
        self._stack.setCurrentWidget(self.caption)

    def show_hint(self) -> None:
        """A new run: the hover text described the previous run's cells. The caption, with what hovering does."""
        self.hover.setPalette(self._hint_ink)
        self.hover.setText(HOVER_HINT)
        self.show_caption()

    def watch(self, *views: QWidget) -> None:
        """The views whose hovering shows here: the mouse leaving them (and this bar) brings the caption back."""
        self._watched = views
        for view in views:
            view.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Leave:
            QTimer.singleShot(0, self, self._left)  # after Qt has told the widget entered that it is
        return False

    def leaveEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().leaveEvent(event)
        QTimer.singleShot(0, self, self._left)

    def _left(self) -> None:
        if not any(w.underMouse() for w in (*self._watched, self)):
            self.show_caption()
