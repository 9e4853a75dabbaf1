"""A hostile chat template in the app: one message at the Chat template control, the last good maps stay, and
its quick fix (the template off) draws again; attnviz's own process never runs the template."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from uihelpers import wait_shown

from attnviz.core import RunConfig
from attnviz.models import chat_render

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # the tiny checkpoints' writers
from tiny import SENTENCE, make_llama  # noqa: E402

SHOTS = os.environ.get("ATTNVIZ_SHOTS")  # a folder to keep the screenshots in, for looking at them
ENDLESS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def test_a_chat_template_that_never_ends_gives_one_message_and_keeps_the_maps(window, qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(chat_render, "TIME_LIMIT_S", 1.0)
    folder = tmp_path / "endless-chat"
    folder.mkdir()
    make_llama(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": ENDLESS}))
    window.panel.set_config(RunConfig(variant="pretrained", model=str(folder), text=SENTENCE))
    qtbot.waitUntil(lambda: window.is_settled() and window.result is not None
                    and window.result.config.model == str(folder), timeout=60000)
    shown, tokens = window.shown_id, window.result.tokens
    window.panel.widgets["chat"].setChecked(True)
    qtbot.waitUntil(lambda: window.failed_id == window.latest_id, timeout=30000)
    message = window.panel.errorLabel.text()
    assert "chat template did not finish within 1 s" in message and "turn the chat template off" in message
    assert len(window.last_error.splitlines()) == 1
    assert window.shown_id == shown and window.result.tokens == tokens  # the last good maps stay
    if SHOTS:
        window.grab().save(os.path.join(SHOTS, "chat-template-endless.png"))
    fixes = [window.panel.fixButtons.itemAt(i).widget() for i in range(window.panel.fixButtons.count())]
    assert fixes, "the template off is offered as a quick fix"
    fixes[0].click()
    wait_shown(qtbot, window, timeout=30000)
    assert window.result.config.chat is False and window.last_error is None
