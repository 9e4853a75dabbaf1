"""The one error a model folder raises: names the folder or file (or config.json's key), the problem and the fix."""

from __future__ import annotations

from typing import Any

from attnviz.core.runs.config import ConfigError


class ModelError(ConfigError):
    """A model folder that cannot be used: names the folder or file, the problem and the fix."""

    def __init__(self, value: Any, problem: str, fix: str, field_name: str = "model", suggestions: tuple = ()):
        super().__init__(field_name, str(value), problem, fix, suggestions)
