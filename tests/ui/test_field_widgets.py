"""The panel's widgets keep their objectNames (tests and users' scripts find them by name); core's field
metadata names no widget."""

from dataclasses import fields

from PySide6.QtWidgets import QWidget

from attnviz.core import RunConfig
from attnviz.core.runs.config import field_meta
from attnviz.ui.window.field_widgets import OBJECT_NAMES
from attnviz.ui.window.panel import ParameterPanel


def test_every_config_field_has_one_widget_name_and_core_knows_none():
    names = [f.name for f in fields(RunConfig) if f.metadata]
    assert set(OBJECT_NAMES) == set(names)
    assert len(set(OBJECT_NAMES.values())) == len(OBJECT_NAMES)
    assert not any("widget" in field_meta(name) for name in names)


def test_the_panel_names_each_field_widget_as_before(qtbot):
    panel = ParameterPanel()
    qtbot.addWidget(panel)
    for name, object_name in OBJECT_NAMES.items():
        assert panel.widgets[name].objectName() == object_name
        assert panel.findChild(QWidget, object_name) is panel.widgets[name]
    # a few of the names scripts use, spelled out (not read from the mapping under test)
    for field, object_name in (("variant", "variantCombo"), ("seq_q", "seqQSpin"), ("kv_heads", "kvHeadsSpin"),
                               ("mask", "maskCombo"), ("text", "textEdit"), ("dtype", "dtypeCombo")):
        assert panel.widgets[field].objectName() == object_name
