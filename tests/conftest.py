"""Test configuration: Qt runs offscreen so the suite needs no display and no variables set by hand."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
