"""The tiny_models fixture: random checkpoints per family, built once per session (see tiny.py)."""

from __future__ import annotations

import pytest
from tiny import BUILDERS


@pytest.fixture(autouse=True)
def _qt(qapp):
    """A QApplication first (pytest-qt), so in-process renders never create a widget-less QGuiApplication
    that a later window test could not build its widgets on."""
    return qapp


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """family -> folder, built lazily (only the families a test asks for)."""
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("tiny-models")
    built = {}

    def get(kind: str):
        if kind not in built:
            folder = root / kind
            folder.mkdir()
            BUILDERS[kind](folder)
            built[kind] = folder
        return built[kind]
    return get
