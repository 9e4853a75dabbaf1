"""Small widget helpers shared by the window, its panels and the maps: a widget named in one call (its
objectName, which tests and users' scripts find it by, and its accessible name), and combo box items with
their own tooltips (shown while the list is open); a one-line label and a combo box that elide a text too long
for their room in the middle (a file name keeps its start and its end) instead of cutting it at the edge; a
message laid over a widget without resizing it (OverlayBanner)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtWidgets import QComboBox, QLabel, QStyle, QStyleOptionComboBox, QStylePainter, QWidget


def named(widget: QWidget, name: str) -> QWidget:
    """`widget` with objectName and accessible name `name`."""
    widget.setObjectName(name)
    widget.setAccessibleName(name)
    return widget


def add_choice(combo: QComboBox, text: str, data, tooltip: str) -> None:
    """Append an item to `combo` with its own tooltip."""
    combo.addItem(text, data)
    combo.setItemData(combo.count() - 1, tooltip, Qt.ToolTipRole)


class ElidedLabel(QLabel):
    """One line that shows `…` in the middle when the text does not fit (a file name keeps its start and its
    end, the extension's side); text() is the whole text. It takes as little as `min_chars` characters' room, so
    a long text never widens the window or its panel."""

    def __init__(self, text: str = "", min_chars: int = 4, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full, self.min_chars = "", min_chars
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self._full = text
        self._elide()
        self.updateGeometry()

    def text(self) -> str:
        return self._full

    def shown_text(self) -> str:
        """What is painted (the whole text where it fits)."""
        return QLabel.text(self)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(self.fontMetrics().averageCharWidth() * self.min_chars, super().minimumSizeHint().height())

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        room = self.contentsRect().width()
        super().setText(self.fontMetrics().elidedText(self._full, Qt.ElideMiddle, room))


class ElidedCombo(QComboBox):
    """A combo box whose current text is elided in the middle where it does not fit (Qt's styles cut it at the
    edge, e.g. a model's name to 'SmolLM2-1'); the list shows every item whole."""

    def shown_text(self) -> str:
        """The current text as painted."""
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        room = self.style().subControlRect(QStyle.CC_ComboBox, option, QStyle.SC_ComboBoxEditField, self)
        return self.fontMetrics().elidedText(option.currentText, Qt.ElideMiddle, max(room.width() - 2, 0))

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        painter = QStylePainter(self)
        option = QStyleOptionComboBox()
        self.initStyleOption(option)
        painter.drawComplexControl(QStyle.CC_ComboBox, option)
        option.currentText = self.shown_text()
        painter.drawControl(QStyle.CE_ComboBoxLabel, option)


class OverlayBanner(QLabel):
    """A message laid over the top edge of `host`: showing, hiding or rewording it never resizes
    the host. (As a row above the head grid, the stale banner resized the grid each time it came
    or went, and a resized grid lays out and re-renders every tile: benchmarks/README.md, Behind the code.)"""

    def __init__(self, host: QWidget):
        super().__init__(host)
        self.setWordWrap(True)
        self.setAttribute(Qt.WA_TransparentForMouseEvents)  # hover and clicks reach the maps below
        host.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        if event.type() == QEvent.Resize:
            self._place()
        return False

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setText(text)
        self._place()

    def _place(self) -> None:
        width = self.parentWidget().width()
        self.setGeometry(0, 0, width, self.heightForWidth(width))
        self.raise_()
