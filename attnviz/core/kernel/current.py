"""One value per thread made current while a block runs: a forward's ablation plan, its pooling, its
progress watch. The kernel reads them on every attention call without the callers passing them down."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class ThreadCurrent(threading.local):
    value: Any = None  # each thread starts with none

    @contextmanager
    def using(self, value: Any) -> Iterator[Any]:
        """`value` current for this thread inside the block; the previous one again after it."""
        previous, self.value = self.value, value
        try:
            yield value
        finally:
            self.value = previous
