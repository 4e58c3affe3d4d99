"""Shared-memory rings for long messages between ranks on one host.

After a long message is matched (SYNCACK), its remaining packets between two processes on
one host need not cross a socket: the sender copies each chunk into the next slot of a ring
it shares with that receiver and sends only a small SHMDATA packet naming the slot. The
receiver copies the slot into the posted buffer at once, before it acknowledges the packet.
The ring has ``hiwater`` slots, so the credit window makes slot reuse safe: a slot comes
round again only after ``hiwater`` more packets, and the sender cannot have that many
unacknowledged, so the slot's previous packet was acknowledged, hence copied out.

One ring per (sender, receiver) pair, made by the sender on its first long message to that
peer: a file in /dev/shm, space reserved with posix_fallocate (a full /dev/shm fails here
with ENOSPC instead of killing the process with SIGBUS later), mapped by both, unlinked by
the receiver once mapped. Any failure falls back to the socket for that peer.
"""

from __future__ import annotations

import logging
import mmap

from zpar.privatefile import SHM_DIR, attach_mapped, create_mapped, unlink_quietly

log = logging.getLogger(__name__)

__all__ = ["SHM_DIR", "ShmRing"]

_PREFIX = "zpar-comm-"


class ShmRing:
    """``slots`` slots of ``slot_size`` bytes in one shared mapping."""

    def __init__(self, path: str, slots: int, slot_size: int, mm: mmap.mmap) -> None:
        self.path, self.slots, self.slot_size = path, slots, slot_size
        self._mm = mm
        self._view = memoryview(mm)
        self.next = 0  # the sender's next slot
        self.announced = False  # the sender told the receiver the path

    @classmethod
    def create(cls, slots: int, slot_size: int) -> ShmRing:
        path, mm = create_mapped(_PREFIX, slots * slot_size)
        return cls(path, slots, slot_size, mm)

    @classmethod
    def attach(cls, path: str, slots: int, slot_size: int) -> ShmRing:
        return cls(path, slots, slot_size, attach_mapped(path, _PREFIX, slots * slot_size))

    def slot(self, k: int) -> memoryview:
        return self._view[k * self.slot_size : (k + 1) * self.slot_size]

    def take(self) -> int:
        """The sender's next slot (round robin)."""
        k = self.next
        self.next = (k + 1) % self.slots
        return k

    def close(self) -> None:
        self._view.release()
        try:
            self._mm.close()
        except BufferError:  # a view of a slot is still alive somewhere: the GC frees it
            pass
        unlink_quietly(self.path)
