"""When to replace an engine that died (``--keep``): at once, unless it keeps crashing.

An engine that lived less than CRASH_WINDOW seconds counts as a crash; each crash in a row
doubles the wait before the next start (FIRST_DELAY, 2x, 4x … up to MAX_DELAY), so a broken
environment does not spin the machine; an engine that ran long enough resets the count.
Sans-IO: the launcher asks ``next_delay`` and does the waiting and starting itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: An engine that lived less than this many seconds crashed (rather than died in service).
CRASH_WINDOW = 10.0
#: Seconds before the restart after the first crash in a row; doubled per further crash.
FIRST_DELAY = 0.5
#: Longest wait between restarts of a crash-looping engine slot.
MAX_DELAY = 30.0


@dataclass
class RestartPolicy:
    crash_window: float = CRASH_WINDOW
    first_delay: float = FIRST_DELAY
    max_delay: float = MAX_DELAY
    crashes: dict[object, int] = field(default_factory=dict)  # slot -> crashes in a row

    def next_delay(self, slot: object, lifetime: float) -> float:
        """Seconds to wait before replacing the engine of ``slot`` that lived ``lifetime``."""
        if lifetime >= self.crash_window:
            self.crashes[slot] = 0
            return 0.0
        n = self.crashes[slot] = self.crashes.get(slot, 0) + 1
        return min(self.first_delay * 2 ** (n - 1), self.max_delay)

    def crash_count(self, slot: object) -> int:
        return self.crashes.get(slot, 0)
