"""One shared-memory segment: a memory file (memfd) with a header page, as its owner holds it.

Layout (the header is one page, so the data is page-aligned for numpy and for mmap)::

    offset 0     magic     u64   SEGMENT_MAGIC
    offset 8     token     16 B  random: names this segment (a reused fd number is caught)
    offset 24    capacity  u64   data bytes
    offset 64    slots     SLOTS x u64: a hold each, a ticket while held, 0 when free
    offset 4096  data

The file is a memfd: it has no name in /dev/shm, so a SIGKILLed process leaves nothing
behind: the kernel frees the memory with the last fd or mapping. Another process of the
same user opens it as ``/proc/<owner pid>/fd/<fd>`` (the envelope names both), which the
kernel allows only to processes that may read the owner's memory anyway.

Each send of a segment to a receiver is a *hold*: the owner writes a fresh ticket into a
free slot and names slot and ticket in the envelope; the receiver writes 0 there once
nothing of what it received is referenced any more. A slot has one writer at a time (the
owner while it is 0, the receiver while it holds the ticket), so no atomics are needed:
aligned 8-byte stores, which every 64-bit CPU makes whole. The owner rewrites a segment
only when every slot is 0.
"""

from __future__ import annotations

import itertools
import mmap
import os

#: bytes before the data: one page
HEADER = 4096
#: b"zparshm1", little-endian
SEGMENT_MAGIC = int.from_bytes(b"zparshm1", "little")
#: holds a segment can have at once: one per receiver of a send (a push to 62 engines of
#: this host of one array); beyond it the buffer is written into another segment
SLOTS = 62
_SLOT0 = 8  # index of slot 0 in the header seen as u64s
#: madvise(2): fill a mapping's page tables for writing, in one call (Linux 5.14)
MADV_POPULATE_WRITE = 23
TOKEN_SIZE = 16

_tickets = itertools.count(1)


def next_ticket() -> int:
    return next(_tickets)


class Segment:
    """A segment as its owner holds it: the fd (kept open: receivers open it through
    /proc), a shared read-write mapping, and who each issued hold is for."""

    __slots__ = ("fd", "token", "capacity", "map", "ctl", "data", "dest", "pinned", "idle_since")

    def __init__(self, capacity: int) -> None:
        fd = os.memfd_create("zpar-shm", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, HEADER + capacity)
            # the pages exist now (zeroed): ENOSPC or ENOMEM here, never a SIGBUS later
            os.posix_fallocate(fd, 0, HEADER + capacity)
            self.map = mmap.mmap(fd, HEADER + capacity)
        except BaseException:
            os.close(fd)
            raise
        try:  # the page tables too, in one call: half the cost of faulting page by page
            self.map.madvise(MADV_POPULATE_WRITE)
        except OSError:  # a kernel before 5.14: the first write faults them in
            pass
        os.fchmod(fd, 0o600)
        self.fd = fd
        self.token = os.urandom(TOKEN_SIZE)
        self.capacity = capacity
        self.ctl = memoryview(self.map)[:HEADER].cast("Q")
        self.ctl[0] = SEGMENT_MAGIC
        self.map[8 : 8 + TOKEN_SIZE] = self.token
        self.ctl[3] = capacity
        self.data = memoryview(self.map)[HEADER:]
        #: slot -> (receiver pid, its start time) of each hold issued (for the sweep)
        self.dest: dict[int, tuple[int, int]] = {}
        #: a shared_array's segment: never rewritten, closed once its array and holds go
        self.pinned = False
        #: when the segment was last seen free (monotonic), for the pool's idle release
        self.idle_since = 0.0

    def held(self) -> bool:
        """Whether any receiver still holds it."""
        ctl = self.ctl
        return any(ctl[_SLOT0 : _SLOT0 + SLOTS])

    def issue(self, pid: int, start: int) -> tuple[int, int] | None:
        """A new hold for process ``pid``: (slot, ticket), or None when every slot is taken."""
        ctl = self.ctl
        for i in range(SLOTS):
            if ctl[_SLOT0 + i] == 0:
                ticket = next_ticket()
                ctl[_SLOT0 + i] = ticket
                self.dest[i] = (pid, start)
                return i, ticket
        return None

    def clear(self, slot: int, ticket: int) -> None:
        """Let go of one hold (the owner's own receipt of its segment)."""
        if self.ctl[_SLOT0 + slot] == ticket:
            self.ctl[_SLOT0 + slot] = 0

    def adopt(self, slot: int) -> None:
        """A hold issued to another process now held by the owner itself (an engine sent
        the segment back): the sweep must not free it when that process ends."""
        self.dest[slot] = (os.getpid(), 0)

    def sweep(self, alive: object) -> None:
        """Free the holds of receivers that are gone (``alive(pid, start)`` says)."""
        ctl = self.ctl
        me = os.getpid()
        for slot, (pid, start) in list(self.dest.items()):
            if ctl[_SLOT0 + slot] == 0:
                del self.dest[slot]
            elif pid != me and not alive(pid, start):  # type: ignore[operator]
                ctl[_SLOT0 + slot] = 0
                del self.dest[slot]

    def close(self) -> None:
        self.ctl.release()
        self.data.release()
        try:
            self.map.close()
        except BufferError:  # an array of the owner's still views it: the GC unmaps it
            pass
        os.close(self.fd)


def slot_index(slot: int) -> int:
    """The u64 index of a hold slot in a header seen as u64s."""
    return _SLOT0 + slot


def process_start(pid: int) -> int:
    """The start time of process ``pid`` (clock ticks after boot), 0 if it is gone: with the
    pid it names one process, even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return 0
    fields = stat[stat.rfind(b")") + 2 :].split()
    if fields[0] == b"Z":  # a zombie: its memory is gone already
        return 0
    return int(fields[19])


def alive(pid: int, start: int) -> bool:
    return process_start(pid) == start if start else process_start(pid) != 0
