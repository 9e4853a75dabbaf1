"""The window's status bar, where a long line is never cut at the edge: the status text (statusLabel) and a
passing message (showMessage) are elided in the middle where they do not fit, so both their start and their
end (the note that ends a run's line, e.g. how a GGUF's weights were read) stay in sight, and the tooltip holds
the whole line. One line always: a wrapped message would take a row from the maps and lay them out again."""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QStatusBar, QStyle, QStyleOption, QToolTip, QWidget

from attnviz.ui.widgets.basic import ElidedLabel, named

MESSAGE_LEFT_PX = 6  # where QStatusBar starts a message's text (its own margin)


class StatusLabel(ElidedLabel):
    """The status text: elided in the middle, its tooltip the whole text."""

    def __init__(self) -> None:
        super().__init__(min_chars=12)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setText(text)
        self.setToolTip(text)


class StatusLine(QStatusBar):
    """A QStatusBar that elides a passing message in the middle (QStatusBar cuts it at its right end) and says
    it whole in the tooltip; `label` (statusLabel) shows between messages."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = named(StatusLabel(), "statusLabel")
        self.addWidget(self.label, 1)
        self.messageChanged.connect(self._message_changed)

    def _message_changed(self, message: str) -> None:
        # QStatusBar hides the label for a message only while the bar is shown: a message said before the window
        # first showed (a file opened at start) was drawn over the label's line
        self.label.setVisible(not message)
        self.update()

    def message_rect(self):
        """Where the message is drawn: left of the permanent widgets and the size grip that are shown."""
        rect = self.rect().adjusted(MESSAGE_LEFT_PX, 0, -12, 0)
        others = [w for w in self.findChildren(QWidget, options=Qt.FindDirectChildrenOnly)
                  if w.isVisible() and w is not self.label]  # the busy indicator, the size grip
        right = min([w.x() - 2 for w in others], default=rect.right())
        rect.setRight(max(right, rect.left()))
        return rect

    def shown_message(self) -> str:
        """The passing message as painted (elided where it does not fit); "" when none."""
        message = self.currentMessage()
        return self.fontMetrics().elidedText(message, Qt.ElideMiddle, self.message_rect().width()) if message else ""

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        if not self.currentMessage():
            super().paintEvent(event)
            return
        painter = QPainter(self)
        option = QStyleOption()
        option.initFrom(self)
        self.style().drawPrimitive(QStyle.PE_PanelStatusBar, option, painter, self)
        painter.setPen(self.palette().windowText().color())
        painter.drawText(self.message_rect(), Qt.AlignLeading | Qt.AlignVCenter | Qt.TextSingleLine,
                         self.shown_message())

    def event(self, event) -> bool:
        if event.type() == QEvent.ToolTip and self.currentMessage():  # the whole message (the label has its own)
            QToolTip.showText(event.globalPos(), self.currentMessage(), self)
            return True
        return super().event(event)
