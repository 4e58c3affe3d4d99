"""Refused messages, counted where they are refused and gathered for the controller's status.

Every process checks what it receives (zpar.wire.Session.refused counts what fails, by
reason: bad-signature, replayed, malformed, version, misrouted, ...). A process other than
the controller tells the hub its counts in a ``refused_report`` when they changed, at most
every REFUSAL_REPORT_INTERVAL seconds: a flood of garbage costs the hub one message per
process per interval, and a quiet process sends nothing. The hub answers
``controller_status_request`` with every process's last counts (hub/status.py).
Sans-IO: the caller sends what ``due`` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from zpar.constants import REFUSAL_REPORT_INTERVAL
from zpar.wire.messages import RefusedReport

#: Longest reason token kept from a report (a reason is a short stable word).
MAX_REASON = 64
#: Most reasons kept from one report.
MAX_REASONS = 64


def merged(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The sum of several {reason: count} maps, without the zero counts."""
    out: dict[str, int] = {}
    for c in counts:
        for reason, n in dict(c).items():  # dict(): a copy another thread may be adding to
            if n:
                out[reason] = out.get(reason, 0) + n
    return out


def checked_counts(value: Any) -> dict[str, int]:
    """A report's ``refused`` map, or ValueError naming what is wrong with it."""
    if not isinstance(value, dict):
        raise ValueError(f"refused must be a map of reason to count, got {type(value).__name__}")
    if len(value) > MAX_REASONS:
        raise ValueError(f"refused lists {len(value)} reasons, at most {MAX_REASONS}")
    for reason, n in value.items():
        if not isinstance(reason, str) or not 0 < len(reason) <= MAX_REASON:
            raise ValueError(f"a refusal reason must be a short string, got {reason!r:.80}")
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"the count of {reason!r} must be an int >= 0, got {n!r:.80}")
    return dict(value)


class RefusalReporter:
    """When one process reports its counts: ``due(now)`` returns the report's content if
    the counts changed since the last report and the interval has passed, else None."""

    def __init__(
        self,
        counts: Callable[[], dict[str, int]],
        interval: float = REFUSAL_REPORT_INTERVAL,
    ) -> None:
        self.counts = counts
        self.interval = interval
        self._sent: dict[str, int] = {}
        self._next_look = float("-inf")

    def due(self, now: float) -> dict[str, Any] | None:
        if now < self._next_look:
            return None
        counts = self.counts()
        if counts == self._sent:
            # unchanged: looked at again a tenth of an interval later (a loop that calls
            # this per message copied and compared the counts each time)
            self._next_look = now + self.interval / 10
            return None
        self._sent = counts
        self._next_look = now + self.interval
        return RefusedReport(counts).as_dict()
