"""Per-pair credit flow control, as IMPI's packet protocol defines it (seed 003, section 3.6).

The source counts packets sent and not yet acknowledged and stops at ``hiwater``; the
destination sends a protocol ACK for every ``ackmark`` packets it receives, which takes
``ackmark`` off the source's count. ACKs themselves are not counted. So a fast sender never
has more than ``hiwater`` packets queued at a slow receiver, whatever the application does.
Sans-IO: the p2p layer asks these counters what to do and does the sending itself.
"""

from __future__ import annotations

from dataclasses import dataclass


def check_window(ackmark: int, hiwater: int) -> None:
    """IMPI's mandated property 1 <= ackmark <= hiwater (section 3.9): with it a receiver
    that holds fewer than ackmark unacknowledged packets never starves the sender."""
    if not 1 <= ackmark <= hiwater:
        raise ValueError(f"flow control needs 1 <= ackmark <= hiwater, got {ackmark}, {hiwater}")


@dataclass(slots=True)
class SendWindow:
    """The source's packets-sent counter for one destination."""

    hiwater: int
    inflight: int = 0
    #: times the window was found full (a sender that had to wait for an ACK)
    stalls: int = 0

    def can_send(self) -> bool:
        return self.inflight < self.hiwater

    def sent(self) -> None:
        if self.inflight >= self.hiwater:
            raise RuntimeError(f"packet sent beyond hiwater {self.hiwater}")
        self.inflight += 1

    def stalled(self) -> None:
        self.stalls += 1

    def acked(self, count: int) -> None:
        if not 0 < count <= self.inflight:
            raise ValueError(f"ACK for {count} packets, {self.inflight} in flight")
        self.inflight -= count


@dataclass(slots=True)
class RecvCounter:
    """The destination's packets-received counter for one source."""

    ackmark: int
    unacked: int = 0

    def received(self) -> int:
        """Count one packet; return how many to acknowledge now in an ACK of their own
        (0, or ackmark once that many wait)."""
        self.unacked += 1
        if self.unacked >= self.ackmark:
            n, self.unacked = self.unacked, 0
            return n
        return 0

    def take(self, limit: int = 255) -> int:
        """Credits to ride on a packet going back to the source anyway (a piggybacked ACK:
        a reply then costs the source no separate ACK to read)."""
        n = min(self.unacked, limit)
        self.unacked -= n
        return n
