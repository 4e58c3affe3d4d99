"""The engine process's CPU and memory, reported to the hub for the dashboard.

The engine's signal thread calls ``due(now)`` each time it wakes: every
ENGINE_STATS_INTERVAL it returns an engine_stats content (CPU percent of one core since
the last report, every thread of the process counted; resident bytes). The main thread may
run user code for hours; this thread still reports, so a busy engine shows busy.
"""

from __future__ import annotations

import time
from typing import Any

from zpar.constants import ENGINE_STATS_INTERVAL
from zpar.wire.messages import EngineStats


class StatsReporter:
    def __init__(self, interval: float = ENGINE_STATS_INTERVAL) -> None:
        self.interval = interval
        self._next = 0.0
        self._cpu = time.process_time()
        self._wall = time.monotonic()
        self._proc: Any = None

    def due(self, now: float) -> dict[str, Any] | None:
        """The report's content if one is due at ``now`` (monotonic), else None."""
        if now < self._next:
            return None
        self._next = now + self.interval
        cpu, wall = time.process_time(), time.monotonic()
        spent, elapsed = cpu - self._cpu, wall - self._wall
        self._cpu, self._wall = cpu, wall
        percent = 100.0 * spent / elapsed if elapsed > 0 else 0.0
        return EngineStats(cpu=round(percent, 1), rss=self._rss()).as_dict()

    def _rss(self) -> int:
        if self._proc is None:
            import psutil  # imported here: an engine that is never watched never pays it

            self._proc = psutil.Process()
        try:
            return int(self._proc.memory_info().rss)
        except Exception:  # psutil.Error: the process is going away
            return 0
