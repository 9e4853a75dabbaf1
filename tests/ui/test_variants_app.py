"""The modern variants in the real window: the Attention group, stage views, hover paths, bad input."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QWidget
from uihelpers import wait_shown

from attnviz.core import load_preset


def shown_tiles(window):
    return window.headGrid.tiles


def test_attention_group_shows_what_applies(window, qtbot):
    panel = window.panel
    assert panel.groups["Attention"].isVisibleTo(window)
    for name in ("kvHeadsSpin", "positionCombo", "qkScaleSpin", "softcapSpin", "sinkLogitSpin"):
        widget = panel.findChild(QWidget, name)
        assert widget is not None and widget.isVisibleTo(window) and widget.toolTip(), name
    assert not panel.findChild(QWidget, "ropeBaseSpin").isVisibleTo(window)  # only with RoPE
    panel.set_config(load_preset("stable-diffusion-context"))  # cross-attention: no positions
    wait_shown(qtbot, window)
    assert not panel.findChild(QWidget, "positionCombo").isVisibleTo(window)
    assert panel.findChild(QWidget, "kvHeadsSpin").isVisibleTo(window)


def test_hover_shows_the_stage_values_that_made_a_cell(window, qtbot):
    window.panel.set_config(load_preset("softcap-flatten"))
    wait_shown(qtbot, window)
    r = window.result
    text = window.headGrid.cell_text(2, 5, 3)
    for label in ("Q·Kᵀ", "scaled", "capped", "masked", "softmax"):  # the stages' titles, as the pipeline spells them
        assert label in text, label
    raw = float(np.dot(r.q[0, 2, 5], r.k[0, 2, 3]))
    assert f"Q·Kᵀ {raw:.4g}"[:9] in text
    assert f"capped {2 * np.tanh(raw / 2):.3g}"[:10] in text


def test_a_stage_view_recomputes_with_that_stage_and_draws_it(window, qtbot, counting_run):
    window.panel.set_config(load_preset("alibi-distance-decay"))
    wait_shown(qtbot, window)
    assert "biased" not in window.result.stages  # not kept unless a view needs it
    calls = len(counting_run.calls)
    window.viewCombo.setCurrentIndex(window.viewCombo.findData("biased"))
    wait_shown(qtbot, window)
    assert len(counting_run.calls) == calls + 1 and "biased" in window.result.stages
    assert len(shown_tiles(window)) == 8 and window.frames.signed
    window.viewCombo.setCurrentIndex(window.viewCombo.findData("weights"))
    wait_shown(qtbot, window)
    assert len(counting_run.calls) == calls + 1  # weights were kept too: view-only


def test_a_stage_the_config_lacks_falls_back_to_the_weights_with_a_note(window, qtbot):
    window.viewCombo.setCurrentIndex(window.viewCombo.findData("capped"))  # (the View box greys it out)
    qtbot.waitUntil(lambda: "no capped stage" in window.statusBar().currentMessage(), timeout=10000)
    wait_shown(qtbot, window)
    assert window.viewCombo.currentData() == "weights" and window.last_error is None
    assert len(shown_tiles(window)) == 4


def test_kv_heads_not_dividing_heads_offers_divisors(window, qtbot):
    before = window.shown_id
    window.panel.widgets["heads"].setValue(8)
    wait_shown(qtbot, window)
    window.panel.widgets["kv_heads"].setValue(3)
    qtbot.waitUntil(lambda: "kv_heads" in window.panel.errorLabel.text())
    assert "divisor of 8" in window.panel.errorLabel.text()
    assert window.shown_id > before and len(shown_tiles(window)) == 8  # the last good view stays
    fix = window.panel.findChild(QWidget, "fixButton_2")
    assert fix is not None
    fix.click()
    wait_shown(qtbot, window)
    assert window.result.config.kv_heads == 2 and window.result.k.shape[1] == 2


def test_differential_preset_draws_signed_maps(window, qtbot):
    window.panel.set_config(load_preset("differential-cancel"))
    wait_shown(qtbot, window)
    assert window.frames.signed and (window.result.dropped < 0).any()
    assert len(shown_tiles(window)) == 4
    window.viewCombo.setCurrentIndex(window.viewCombo.findData("scores"))
    wait_shown(qtbot, window)
    assert len(shown_tiles(window)) == 8  # two score maps per head
    assert window.headGrid.tiles[3].title.startswith("head 1.2")


def test_the_view_box_offers_only_the_stages_the_configuration_has(window, qtbot):
    items = window.viewCombo.model()

    def offered(view):
        return items.item(window.viewCombo.findData(view)).isEnabled()

    assert offered("scores") and not offered("biased") and not offered("capped")
    window.panel.set_config(load_preset("alibi-distance-decay"))
    wait_shown(qtbot, window)
    assert offered("biased") and not offered("capped")


def test_signed_maps_start_on_a_linear_scale_after_random_weights(window, qtbot):
    assert window.scaleCombo.currentData() == "log"  # random weights: nearly flat, log shows them
    window.panel.set_config(load_preset("differential-cancel"))
    wait_shown(qtbot, window)
    qtbot.waitUntil(lambda: window.frames.options.scale_mode == "linear")
    assert window.scaleCombo.currentData() == "linear"


def test_the_model_view_opened_on_random_weights_says_there_is_no_model(window, qtbot):
    window.modelDock.close()
    window.modelDock.show()  # View menu, before any model was shown
    assert "no model" in window.modelView.plot.titleLabel.text and window.modelView.image.image is None


def test_a_first_trained_result_lays_nothing_out_again(window, qtbot):
    """The model dock is open from the start and the caption line keeps its height: switching from
    random weights to a trained toy resizes no view (a dock that opened inside that result's swap
    re-laid out the whole window: the fuzz's longest stall)."""
    assert window.modelDock.isVisible() and "Random weights (seed 0)" in window.captionLabel.text()
    grid, output, caption = window.headGrid.size(), window.outputView.size(), window.captionLabel.height()
    window.panel.set_config(load_preset("toy-reverse"))
    wait_shown(qtbot, window)
    assert "anti-diagonal" in window.captionLabel.text() and window.modelView.source is not None
    assert (window.headGrid.size(), window.outputView.size(), window.captionLabel.height()) == (grid, output, caption)


def test_the_model_view_opened_after_a_model_result_shows_that_model(window, qtbot):
    window.modelDock.close()
    window.panel.set_config(load_preset("toy-reverse"))
    wait_shown(qtbot, window)
    assert window.modelView.source is None  # closed: nothing composed
    window.modelDock.show()
    qtbot.waitUntil(lambda: window.modelView.image.image is not None, timeout=10000)
    assert window.modelView.source is window.result.source


def test_toy_presets_open_on_their_own_layer_and_the_model_view_follows(window, qtbot):
    window.panel.set_config(load_preset("toy-induction"))  # 2 layers: the layer box is bounded to 0..1
    wait_shown(qtbot, window)
    assert window.modelDock.isVisible()
    window.panel.set_config(load_preset("toy-reverse"))  # its caption is about layer 2: not clamped to 1
    wait_shown(qtbot, window)
    assert window.result.config.layer == 2 and window.panel.widgets["layer"].value() == 2
    window.panel.set_config(load_preset("default"))  # random weights: no model behind the maps
    wait_shown(qtbot, window)
    view = window.modelView
    assert window.modelDock.isVisible()  # it stays (showing and hiding it resized every view), and says why
    assert view.source is None and view.image.image is None and "no model" in view.plot.titleLabel.text
    assert view.tile_at(view.plot.getViewBox().mapViewToScene(QPointF(1, 1))) is None  # no click opens a layer
    window.panel.set_config(load_preset("toy-reverse"))
    wait_shown(qtbot, window)
    qtbot.waitUntil(lambda: view.image.image is not None, timeout=10000)
    assert view.source is window.result.source and not view.plot.titleLabel.isVisible()


def test_a_variant_change_lays_each_group_out_at_most_once(window, qtbot):
    """Rows that come back are laid out in one pass (Qt lays every parent out again per widget shown)."""
    from PySide6.QtCore import QEvent, QObject

    class Resizes(QObject):
        count: dict = {}

        def eventFilter(self, watched, event):  # noqa: N802 (Qt's name)
            if event.type() == QEvent.Resize:
                self.count[watched] = self.count.get(watched, 0) + 1
            return False

    counter = Resizes()
    for box in window.panel.groups.values():
        box.installEventFilter(counter)
    combo = window.panel.widgets["variant"]
    for variant in ("toy-reverse", "causal", "cross-context", "self"):  # rows hidden, then many shown
        Resizes.count = {}
        combo.setCurrentIndex(combo.findData(variant))
        assert max(Resizes.count.values(), default=0) <= 1, variant
