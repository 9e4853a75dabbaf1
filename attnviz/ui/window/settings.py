"""What the window remembers between launches (a QSettings): parameters, view choices, geometry, the docks.
Mixed into MainWindow; a window made without settings remembers nothing."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, QStandardPaths, QTemporaryDir

from attnviz.core import ConfigError, RunConfig, load_preset
from attnviz.core.runs.configfile import file_kind
from attnviz.frames import MAP_VIEWS, SCALE_MODES
from attnviz.models.errors import ModelError
from attnviz.models.folder import check_model_path
from attnviz.style import format_bytes
from attnviz.ui.window.layout import SHARE_RANGE

SETTINGS_VERSION = 1
START_PRESET = "toy-reverse"  # what a first launch shows
SETTINGS_MAX_BYTES = 1 << 20  # the window's settings are a few KB


def settings_files() -> list[Path]:
    """The files QSettings() reads for attnviz on this machine: the user's, then the system's (XDG), each
    the application's file and the organisation's."""
    user = QStandardPaths.writableLocation(QStandardPaths.GenericConfigLocation)
    system = (os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(os.pathsep)
    return [Path(d) / name for d in (user, *system) if d for name in ("attnviz/attnviz.conf", "attnviz.conf")]


def settings_problem(paths: list[Path]) -> str:
    """Why the settings cannot be read safely ("" when they can): QSettings would wait forever on a FIFO and
    read a device or a huge file to its end, so each file is looked at (never opened) first."""
    for path in paths:
        try:
            st = path.stat()
        except OSError:
            continue  # absent (the usual first launch) or unreachable: QSettings skips it as well
        if not stat.S_ISREG(st.st_mode):
            return f"{path} is {file_kind(st.st_mode)}, not a settings file"
        if st.st_size > SETTINGS_MAX_BYTES:
            return f"{path} is {format_bytes(st.st_size)}, not a settings file (they are a few KB)"
    return ""


def open_settings() -> tuple[QSettings, str]:
    """(QSettings(), "") for the window to restore and save. When a settings file cannot be read: settings in a
    scratch folder (the window opens as on a first launch, and forgets this session) and a note naming the file
    and the fix."""
    problem = settings_problem(settings_files())
    if not problem:
        return QSettings(), ""
    scratch = QTemporaryDir()
    settings = QSettings(scratch.filePath("attnviz.conf"), QSettings.IniFormat)
    settings.scratch = scratch  # the folder lives as long as the settings do, then is removed
    return settings, (f"Settings not read: {problem}. Remove or rename it; this session starts from the defaults and "
                      "is not remembered")


def _usable(config: RunConfig) -> RunConfig:
    """The remembered configuration, unless its model is gone or no model now (deleted, emptied, overwritten
    since, or remembered before such a path was refused): ModelError, and the window keeps the start preset."""
    if config.applies("model") and config.model:
        check_model_path(config.model)
    return config


class WindowSettings:
    """Restoring and saving MainWindow's state (needs its panel, splitters, combos and docks)."""

    def _restore(self, s: QSettings) -> None:
        # a first launch opens on a trained toy: learned attention with labelled tokens, at once (a damaged
        # install without its presets opens on the panel's defaults: the window opens either way)
        with contextlib.suppress(ConfigError, OSError):
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
            try:
                self.panel.set_config(_usable(RunConfig.from_json(str(text))), emit=False)
            except ModelError as exc:  # said as `attnviz PATH` says a refused PATH
                self.refused = f"the last session's model, {exc.describe(exc.value)}"
            except (ConfigError, TypeError):  # another version or machine: keep the defaults
                pass
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
        with contextlib.suppress(TypeError, ValueError, RecursionError):  # the scale chosen per view
            scales = json.loads(str(s.value("scales", "{}")))
            if isinstance(scales, dict):  # a hand-edited file may hold null, a list, a number...
                self._scales = {v: m for v, m in scales.items()
                                if v in MAP_VIEWS and isinstance(m, str) and m in SCALE_MODES}
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
        # a model the run refused (damaged past what check_model_path looks at) is not opened again at the next
        # launch: the configuration saved last stays
        if self.panel.error_field != "model":
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
