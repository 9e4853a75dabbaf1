"""What the window remembers between launches (a QSettings): parameters, view choices, geometry, the docks.
Mixed into MainWindow; a window made without settings remembers nothing."""

from __future__ import annotations

import contextlib
import json

from PySide6.QtCore import QByteArray, QSettings

from ..core import ConfigError, RunConfig, load_preset
from ..frames import MAP_VIEWS, SCALE_MODES
from .window_layout import SHARE_RANGE

SETTINGS_VERSION = 1
START_PRESET = "toy-reverse"  # what a first launch shows


class WindowSettings:
    """Restoring and saving MainWindow's state (needs its panel, splitters, combos and docks)."""

    def _restore(self, s: QSettings) -> None:
        # a first launch opens on a trained toy: learned attention with labelled tokens, at once
        self.panel.set_config(load_preset(START_PRESET), emit=False)
        if s.value("version", 0, int) != SETTINGS_VERSION:
            return
        geometry = s.value("geometry")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        state = s.value("mainSplit")
        if isinstance(state, QByteArray):
            self.mainSplit.restoreState(state)
        text = s.value("config")
        if text:
            with contextlib.suppress(ConfigError):  # from another version or machine: keep the defaults
                self.panel.set_config(RunConfig.from_json(str(text)), emit=False)
        self._restore_views(s)
        self._generate_count = max(1, s.value("generateCount", self._generate_count, int))
        self.modelDock.setVisible(s.value("modelDock", True, bool))
        self.stripAction.setChecked(s.value("predictionStrip", True, bool))
        self.predictionStrip.setVisible(self.stripAction.isChecked())
        docks = s.value("docks")  # where the docks are, floated, split, tabbed, and their sizes
        if isinstance(docks, QByteArray):
            self.restoreState(docks, SETTINGS_VERSION)  # where the docks are; their height follows the share
        self.grid_share = min(max(s.value("gridShare", self.grid_share, float), SHARE_RANGE[0]), SHARE_RANGE[1])

    def _restore_views(self, s: QSettings) -> None:
        for key, combo in (("view", self.viewCombo), ("colormap", self.colormapCombo), ("tensor", self.tensorCombo)):
            index = combo.findData(s.value(key))
            if index >= 0:
                combo.setCurrentIndex(index)
        with contextlib.suppress(TypeError, ValueError):  # the scale chosen per view
            scales = json.loads(str(s.value("scales", "{}")))
            self._scales = {v: m for v, m in scales.items() if v in MAP_VIEWS and m in SCALE_MODES}
            self._view_changed()
        self.perHeadCheck.setChecked(s.value("perHead", False, bool))
        self.meanCheck.setChecked(s.value("mean", False, bool))

    def save_settings(self) -> None:
        s = self.settings
        if s is None:
            return
        s.setValue("version", SETTINGS_VERSION)
        s.setValue("geometry", self.saveGeometry())
        s.setValue("mainSplit", self.mainSplit.saveState())
        s.setValue("docks", self.saveState(SETTINGS_VERSION))
        s.setValue("gridShare", self.grid_share)
        with contextlib.suppress(ConfigError):  # invalid now: keep the last valid one
            s.setValue("config", self.panel.config().to_json())
        s.setValue("view", self.viewCombo.currentData())
        s.setValue("colormap", self.colormapCombo.currentData())
        s.setValue("tensor", self.tensorCombo.currentData())
        s.setValue("modelDock", not self.modelDock.isHidden())  # the window may be hidden already
        s.setValue("predictionStrip", not self.predictionStrip.isHidden())
        s.setValue("scales", json.dumps(self._scales))
        s.setValue("perHead", self.perHeadCheck.isChecked())
        s.setValue("mean", self.meanCheck.isChecked())
        s.setValue("generateCount", self._generate_count)
        s.sync()
