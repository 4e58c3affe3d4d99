"""The owner's segments: one written per large buffer sent, reused once nobody holds it.

Fresh memory is the cost here, not the copy: on this project's hosts a new 100 MB segment
costs 49-55 ms of zeroing and page tables (86-172 ms faulted page by page), against ~10 ms
to copy into pages touched before (docs/decisions.md, "Large buffers through shared memory"). So segments are kept
once free and handed out again to a buffer that fits (capacity up to twice its size), up
to RETAINED_BYTES of free ones; a free one unused for IDLE_RELEASE seconds is closed.

``sweep`` frees the holds of receivers that died and closes idle segments: ``acquire``
calls it, and so does the carrier's sweeper thread while this process owns segments.
"""

from __future__ import annotations

import logging
import threading
import time

from .segment import HEADER, Segment, alive

log = logging.getLogger(__name__)

#: free segments kept for the next buffer, in bytes (W5 alternates two 100 MB ones)
RETAINED_BYTES = 512 * 2**20
#: a free segment unused this long (seconds) is closed: its memory goes back
IDLE_RELEASE = 5.0
#: capacities are rounded up to this, so a buffer of a slightly different size still fits
GRANULE = 2**20


class Pool:
    """This process's segments, by token."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.segments: dict[bytes, Segment] = {}

    def acquire(self, nbytes: int) -> Segment:
        """A segment nobody holds with room for ``nbytes``: reused if one fits, else new."""
        with self.lock:
            self.sweep()
            best = None
            for seg in self.segments.values():
                if (
                    not seg.pinned
                    and nbytes <= seg.capacity <= 2 * nbytes + GRANULE
                    and not seg.held()
                    and (best is None or seg.capacity < best.capacity)
                ):
                    best = seg
            if best is not None:
                return best
            cap = -(-nbytes // GRANULE) * GRANULE
            seg = Segment(cap)
            self.segments[seg.token] = seg
            log.debug("shared-memory segment of %d bytes made (%d here)", cap, len(self.segments))
            return seg

    def pinned(self, nbytes: int) -> Segment:
        """A new segment for a shared_array: never reused for another buffer."""
        with self.lock:
            seg = Segment(max(nbytes, 1))
            seg.pinned = True
            self.segments[seg.token] = seg
            return seg

    def get(self, token: bytes) -> Segment | None:
        return self.segments.get(token)

    def sweep(self, now: float | None = None) -> None:
        """Free the holds of dead receivers; close segments idle past IDLE_RELEASE, those
        beyond RETAINED_BYTES, and unpinned shared_arrays' segments nobody holds."""
        now = time.monotonic() if now is None else now
        with self.lock:
            kept = 0
            for token, seg in sorted(
                self.segments.items(), key=lambda kv: -kv[1].idle_since
            ):  # the most recently used are kept first
                seg.sweep(alive)
                if seg.held():
                    continue
                if seg.pinned:
                    continue
                if seg.idle_since == 0.0:
                    seg.idle_since = now
                if now - seg.idle_since > IDLE_RELEASE or kept + seg.capacity > RETAINED_BYTES:
                    del self.segments[token]
                    seg.close()
                    continue
                kept += seg.capacity

    def unpin(self, token: bytes) -> None:
        """A shared_array's last reference went: its segment is closed once free."""
        with self.lock:
            seg = self.segments.get(token)
            if seg is not None:
                seg.pinned = False
                seg.idle_since = float("-inf")  # closed at the next sweep once free

    def used(self, seg: Segment) -> None:
        seg.idle_since = 0.0

    def total(self) -> int:
        """Bytes of every segment this process owns (header pages included)."""
        with self.lock:
            return sum(HEADER + s.capacity for s in self.segments.values())

    def close(self) -> None:
        with self.lock:
            for seg in self.segments.values():
                seg.close()
            self.segments.clear()
