"""Shared-memory mailboxes: small packets between two ranks on one host without a socket.

A ZMQ message from Python costs tens of microseconds before any work (the send wakes ZMQ's
I/O thread, the receiver's poll sleeps in the kernel); MPICH moves a small message in a few
microseconds through shared memory with a receiver that polls. So each (sender, receiver)
pair on one host gets a single-producer single-consumer ring of small slots in /dev/shm:

    offset 0    written   u64  packets the sender has put (only the sender writes it)
    offset 64   read      u64  packets the receiver has taken (only the receiver writes it)
    offset 128  state     u64  the receiver's: ST_SOCKET, ST_SPINNING, ST_SLEEPING, ST_BUSY
    offset 192  sent      u64  the sender's: packets of the link sent by either path
    offset 200  bell      u32  the sender's: bumped to wake a receiver asleep on its futex
    offset 256  slots     ``slots`` x ``slot_size``: u32 length, then the packet's bytes

The sender copies a packed packet into slot ``written % slots`` and then bumps ``written``;
the receiver reads ``written``, copies the slot out, then bumps ``read``. Each counter has one
writer and the slot is written before the counter that publishes it, which x86-64's store
order (TSO) keeps visible in that order to the other process: the mailbox is used only on
x86-64 (``SUPPORTED``), elsewhere every packet goes through the socket.

Waking (zpar.comm.lane does it, compiled): when every peer of a communicator is on this
host, a waiting receiver spins, then sets ``state`` to ST_SLEEPING and sleeps on the
``bell`` words of its mailboxes (futex_waitv); a sender that finds ST_SLEEPING after
publishing bumps the bell and wakes it (FUTEX_WAKE); a packet that had to take the socket
is announced by ``sent``, so the receiver knows to look there. With peers on other hosts a
receiver blocks on its sockets instead (ST_SOCKET) and a sender sends an empty ZMQ frame to
wake it. Each side puts a full memory barrier (``fence``) between its store and its load, so
of the two orders (publish, then read the state; set the state, then look) one side always
sees the other.
"""

from __future__ import annotations

import mmap
import platform
import struct
import threading

from zpar.privatefile import SHM_DIR, attach_mapped, create_mapped, unlink_quietly

#: the store order the mailbox relies on (see above); elsewhere the sockets carry everything
SUPPORTED = platform.machine().lower() in ("x86_64", "amd64")

__all__ = ["SHM_DIR", "Mailbox"]

#: where the words are (see above), and the bytes before the slots
O_WRITTEN, O_READ, O_STATE, O_SENT, O_BELL = 0, 64, 128, 192, 200
HEAD = 256
#: the receiver's state: blocked on its sockets (wake it with a frame), spinning, asleep on
#: the bell (ring it), busy in Python (it looks before it sleeps: nothing to do)
ST_SOCKET, ST_SPINNING, ST_SLEEPING, ST_BUSY = 0, 1, 2, 3
#: slots per pair: the credit window (hiwater 8) bounds data packets; ACKs and the rest fit
SLOTS = 32
#: a slot holds a one-frame packet: 36-byte header, 32-byte signature, INLINE (2 KiB) payload
SLOT_SIZE = 2176
_LEN = struct.Struct("<I")
_FENCE = threading.Lock()


def fence() -> None:
    """A full memory barrier between a store and a later load of the other side's word
    (x86-64 may reorder exactly those): the lock's atomic read-modify-write instructions
    order them. Without it a sender's "publish, read spinning" and a receiver's "clear
    spinning, look" could both miss, and the wait would last until its 100 ms timeout."""
    _FENCE.acquire()
    _FENCE.release()


_PREFIX = "zpar-mbox-"


class Mailbox:
    """One direction of one pair: the sender's ``put``, the receiver's ``peek``/``consume``."""

    def __init__(self, path: str, mm: mmap.mmap, slots: int, slot_size: int) -> None:
        self.path, self.slots, self.slot_size = path, slots, slot_size
        self._mm = mm
        self._mv = memoryview(mm)
        self._ctl = self._mv[:HEAD].cast("Q")  # [0] written, [8] read, [16] state

    @staticmethod
    def size_for(slots: int, slot_size: int) -> int:
        return HEAD + slots * slot_size

    @classmethod
    def create(cls, slots: int = SLOTS, slot_size: int = SLOT_SIZE) -> Mailbox:
        """The sender's side: a new file, space reserved (ENOSPC now rather than SIGBUS
        later), zeroed counters."""
        path, mm = create_mapped(_PREFIX, cls.size_for(slots, slot_size))
        return cls(path, mm, slots, slot_size)

    @classmethod
    def attach(cls, path: str, slots: int = SLOTS, slot_size: int = SLOT_SIZE) -> Mailbox:
        """The receiver's side: map the sender's file, then unlink it (both hold the mapping,
        nothing is left behind at exit)."""
        mapping = attach_mapped(path, _PREFIX, cls.size_for(slots, slot_size), what="mailbox")
        return cls(path, mapping, slots, slot_size)

    # -- sender ---------------------------------------------------------------------------

    def put(self, data: bytes) -> bool:
        """Copy one packet in and publish it; False when it is full or ``data`` too big."""
        n = len(data)
        written = self._ctl[0]
        if n + 4 > self.slot_size or written - self._ctl[8] >= self.slots:
            return False
        off = HEAD + (written % self.slots) * self.slot_size
        _LEN.pack_into(self._mv, off, n)
        self._mv[off + 4 : off + 4 + n] = data
        self._ctl[0] = written + 1  # published: the slot was written first
        return True

    @property
    def unread(self) -> int:
        """Packets put and not yet taken."""
        return self._ctl[0] - self._ctl[8]

    @property
    def receiver_spinning(self) -> bool:
        """The receiver needs no wake-up frame (spinning, busy, or asleep on its bell)."""
        return self._ctl[16] != ST_SOCKET

    # -- receiver -------------------------------------------------------------------------

    @property
    def receiver_state(self) -> int:
        """What the receiver is doing (ST_SOCKET, ST_SPINNING, ST_SLEEPING, ST_BUSY), as a
        sender reads it before deciding how to wake it."""
        return self._ctl[O_STATE // 8]

    def ready(self) -> bool:
        return self._ctl[0] != self._ctl[8]

    def peek(self) -> memoryview | None:
        """The oldest packet not yet consumed (a view valid until ``consume``), or None."""
        read = self._ctl[8]
        if self._ctl[0] == read:
            return None
        off = HEAD + (read % self.slots) * self.slot_size
        (n,) = _LEN.unpack_from(self._mv, off)
        if n + 4 > self.slot_size:
            raise ValueError(f"mailbox {self.path}: slot length {n} out of range")
        return self._mv[off + 4 : off + 4 + n]

    def consume(self) -> None:
        """Free the oldest slot for the sender."""
        self._ctl[8] = self._ctl[8] + 1

    def set_spinning(self, on: bool) -> None:
        self._ctl[16] = ST_SPINNING if on else ST_SOCKET

    @property
    def mapping(self) -> mmap.mmap:
        """The shared mapping itself (zpar.comm.lane works on it directly)."""
        return self._mm

    def close(self, unlink: bool = True) -> None:
        self._ctl.release()
        self._mv.release()
        try:
            self._mm.close()
        except BufferError:  # a packet view is still alive somewhere: the GC frees it
            pass
        if unlink:
            unlink_quietly(self.path)
