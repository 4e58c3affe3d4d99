"""Giving freed memory back to the system after a burst.

A controller that queued 100,000 tasks frees them all when they finish, but glibc keeps
the pages in its arenas, so the process looks as big as at its peak forever. Long-running
zpar processes call ``trim()`` when they go idle after a burst.
"""

from __future__ import annotations

import ctypes
import logging
import time

log = logging.getLogger(__name__)

_libc = None
try:
    # the process's own symbols: libc is already loaded (find_library would run ldconfig)
    _libc = ctypes.CDLL(None)
    _libc.malloc_trim  # noqa: B018 - glibc only: probe once
except (OSError, AttributeError):
    _libc = None


class Trimmer:
    """Call ``maybe_trim(busy_count)`` from a loop; trims once after each burst."""

    def __init__(self, min_interval: float = 2.0, burst: int = 1000) -> None:
        self.min_interval = min_interval
        self.burst = burst
        self._since = 0
        self._last = 0.0

    def count(self, n: int = 1) -> None:
        self._since += n

    def maybe_trim(self) -> None:
        if _libc is None or self._since < self.burst:
            return
        now = time.monotonic()
        if now - self._last < self.min_interval:
            return
        self._since = 0
        self._last = now
        _libc.malloc_trim(0)
