"""The window's zoom to exact (a block dragged on a map, shown exactly; Esc or Back returns) and the model view
filling in layer by layer during a long forward. Mixed into MainWindow.

A drag on the head grid gives a region (HeadGrid.sigZoom); from then on every request carries it (a ZoomAsk),
so the worker renders the block with each view change, and a run is needed only where the shown maps are
pooled (zoom.py). An edit that changes the run leaves the zoom (the region belonged to the maps shown).
"""

from __future__ import annotations

from PySide6.QtWidgets import QPushButton

from attnviz.core import RunConfig
from attnviz.session import Failure, Outcome
from attnviz.ui.maps.zoom import ZoomAsk, ZoomFrames
from attnviz.ui.widgets.basic import named

ZOOM_HINT = "Esc or Back: the full maps; drag inside the block to zoom further."


class WindowZoom:
    """Zoom state of MainWindow (needs its head grid, panel, caption bar, status bar, delivery and model view)."""

    _zoom: tuple[tuple[int, int, int, int], RunConfig] | None = None  # (region, the panel's config then)
    _zoom_rid = 0  # the newest request that asked for the zoom

    def _make_back_button(self) -> QPushButton:
        self.backButton = named(QPushButton("Back"), "zoomBackButton")
        self.backButton.setToolTip("Leave the zoomed block: the full maps again (Esc)")
        self.backButton.clicked.connect(self.leave_zoom)
        self.backButton.hide()
        return self.backButton

    def zoom_to(self, region: tuple[int, int, int, int]) -> None:
        """Show `region` (q0, q1, k0, k1) of the shown maps exactly: computed on the worker (a request)."""
        if self.result is None:
            return
        try:
            config = self.panel.config()
        except Exception:  # noqa: BLE001 - an invalid edit is reported by the normal request path
            return
        self._zoom = (tuple(int(v) for v in region), config)
        self.request()

    def leave_zoom(self) -> None:
        """Back to the full maps: the frames that came with the zoom are the full view's (no request)."""
        self._zoom = None
        self.backButton.hide()
        if self.headGrid.zoom is not None and self.result is not None:
            self._show_caption(self.result)
            self.headGrid.show_frames(self.result, self.frames)
            self._mark_step()

    def zoomed(self) -> bool:
        return self._zoom is not None or self.headGrid.zoom is not None

    def _zoom_ask(self, config: RunConfig, rid: int) -> ZoomAsk | None:
        """The zoom a request carries: none once the run differs from the zoomed one (the layer aside)."""
        if self._zoom is None:
            return None
        region, base = self._zoom
        if config.replace(layer=0) != base.replace(layer=0):
            self._zoom = None  # another run: its maps are shown whole
            return None
        heads = self._shapes(config).heads
        self._zoom_rid = rid
        return ZoomAsk(region, self.headGrid.zoom_pixels(region[1] - region[0], region[3] - region[2], heads))

    def _grid_zoom(self, outcome: Outcome) -> ZoomFrames | None:
        """The zoom of an outcome to show: only the one still asked for."""
        zoom = outcome.zoom
        if zoom is None or self._zoom is None or zoom.region != self._zoom[0]:
            return None
        return zoom

    def _show_zoom_controls(self, zoom: ZoomFrames | None) -> None:
        self.backButton.setVisible(zoom is not None)
        if zoom is not None:
            c = self.result.config
            layer = f" of layer {c.layer}" if self.result.source is not None else ""
            self.captionLabel.set_caption(f"Zoomed: {zoom.title}, every head{layer}. {ZOOM_HINT}", True)

    def _zoom_failed(self, failure: Failure) -> bool:
        """A zoom request failed: the maps stay as they are, one message says why. False: not a zoom's."""
        if failure.request.zoom is None:
            return False
        if self.delivery.failed(failure.request.id):
            self._zoom = None
            self.statusBar().showMessage(f"Zoom not shown: {failure.message} (the maps stay as they were)", 10000)
            self.sigFailed.emit(failure.request.id, failure.message)
        return True

    def _zoom_cancelled(self, rid: int) -> None:
        """A zoom's forward was cancelled (Esc): the full maps stay."""
        if rid == self._zoom_rid and self.headGrid.zoom is None:
            self._zoom = None

    # --- the model view during a long forward ---------------------------------------------------

    def _on_layers(self, rid: int, layers, total: int) -> None:
        """A pooled forward's finished layers: their tiles in the model view, the rest grey (composed off this
        thread, model_view.py)."""
        if rid == self.delivery.latest_id and self.modelDock.isVisible() and self.model_view_wanted():
            self.modelView.show_partial(rid, layers, total, self.colormapCombo.currentData())
