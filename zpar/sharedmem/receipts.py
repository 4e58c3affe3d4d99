"""The receiver's side: a segment named in a checked envelope, mapped privately, held while used.

A received buffer is a view on a copy-on-write (MAP_PRIVATE) mapping of the sender's
segment: reading it copies nothing, writing into it copies only the pages written, into
this process, so what the receiver observes is what a received frame gives (a writable
array of its own) and neither side sees the other's later writes. The hold (see segment)
is let go when the last reference to the view goes (a finalizer on the memoryview).

Pages fault in as they are read, never ahead: a buffer passed on unread (a pushed value
pulled back, an argument returned) costs no page-table work, and reading one costs what
filling its page tables ahead would (MADV_POPULATE_READ: ~5-10 ms per 100 MB here, 2-4 ms
even when every page is mapped already). Mappings are kept for the next buffer of the same
segment (the sender's pool reuses it), so pages read once stay mapped: a kept mapping is
reused only by a receipt while no other receipt uses it, after the pages this process
wrote (if any; /proc/self/pagemap, ~1 ms per 100 MB mapped) are dropped.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import mmap
import os
import threading
import time
import weakref
from typing import Any

import numpy as np

from ..errors import SegmentGone
from .segment import HEADER, SEGMENT_MAGIC, TOKEN_SIZE, slot_index

log = logging.getLogger(__name__)

#: mapped bytes kept for reuse while no receipt uses them
RETAINED_BYTES = 512 * 2**20
#: a kept mapping unused this long (seconds) is unmapped
IDLE_RELEASE = 5.0
PAGE = mmap.PAGESIZE
#: runs of written pages dropped one madvise each, at most; more: the whole range at once
MAX_DROPS = 64
_PRESENT, _SWAPPED, _FILE = 1 << 63, 1 << 62, 1 << 61


class Mapped:
    """One private mapping of a segment, and a shared one of its header (to let go)."""

    __slots__ = ("token", "capacity", "map", "hdr_map", "hdr", "base", "live", "idle_since")

    def __init__(self, fd: int, token: bytes) -> None:
        hdr_map = mmap.mmap(fd, HEADER)
        try:
            hdr = memoryview(hdr_map).cast("Q")
            if hdr[0] != SEGMENT_MAGIC or bytes(hdr_map[8 : 8 + TOKEN_SIZE]) != token:
                hdr.release()
                raise SegmentGone("the named shared-memory segment is not the one sent")
            capacity = hdr[3]
            self.map = mmap.mmap(
                fd,
                HEADER + capacity,
                flags=mmap.MAP_PRIVATE,
                prot=mmap.PROT_READ | mmap.PROT_WRITE,
            )
        except BaseException:
            hdr_map.close()
            raise
        self.token, self.capacity = token, capacity
        self.hdr_map, self.hdr = hdr_map, hdr
        self.base = _address(self.map)
        self.live: list[Receipt] = []
        self.idle_since = time.monotonic()

    def close(self) -> None:
        self.hdr.release()
        self.hdr_map.close()
        try:
            self.map.close()
        except BufferError:
            pass


class Receipt:
    """One received buffer: where it is, and the holds it owes back."""

    __slots__ = ("mapped", "offset", "nbytes", "owner", "fd", "slot", "ticket", "rslot", "rticket")

    def __init__(self, mapped: Mapped, desc: list[Any]) -> None:
        self.mapped = mapped
        (self.owner, self.fd, _, self.offset, self.nbytes) = desc[:5]
        (self.slot, self.ticket, self.rslot, self.rticket) = desc[5:9]


def _address(buf: Any) -> int:
    return int(np.frombuffer(buf, dtype=np.uint8).ctypes.data)


class Receipts:
    """This process's mappings of segments, by token."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.mapped: dict[bytes, list[Mapped]] = {}
        self._pagemap: int | None = None

    def take(self, desc: list[Any]) -> memoryview:
        """The buffer ``desc`` (a checked SegmentRef descriptor) names, held until the
        returned view and everything made from it are gone."""
        owner, fd, token, offset, nbytes, slot, ticket = desc[:7]
        with self.lock:
            m = self._mapping(owner, fd, token)
            if offset + nbytes > m.capacity:
                raise SegmentGone(f"buffer at {offset}+{nbytes} beyond a segment of {m.capacity}")
            if m.hdr[slot_index(slot)] != ticket:
                raise SegmentGone(f"the hold on the segment of pid {owner} was let go")
            start = HEADER + offset
            if m.idle_since != 0.0:  # kept: pages this process wrote go back to the segment's
                self._drop_written(m, start, nbytes)
            receipt = Receipt(m, desc)
            m.live.append(receipt)
            m.idle_since = 0.0
            holder = holder_type(nbytes).from_buffer(m.map, start)
        # the holder exports the buffer itself, so every view made from it (numpy's
        # included) keeps it alive; a memoryview would not be kept (numpy re-exports
        # the mapping), and the hold would be let go under a live array
        weakref.finalize(holder, self._release, receipt)
        return memoryview(holder).cast("B")

    def _mapping(self, owner: int, fd: int, token: bytes) -> Mapped:
        """A mapping of the segment no receipt uses: a kept one, or a new one."""
        kept = self.mapped.setdefault(token, [])
        for m in kept:
            if not m.live:
                return m
        try:
            f = os.open(f"/proc/{owner}/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            raise SegmentGone(f"cannot open the segment of pid {owner} (fd {fd}): {e}") from None
        try:
            m = Mapped(f, token)
        finally:
            os.close(f)
        m.idle_since = 0.0  # fresh: nothing of it mapped or written yet
        kept.append(m)
        return m

    def _release(self, receipt: Receipt) -> None:
        with self.lock:
            m = receipt.mapped
            hdr = m.hdr
            if hdr[slot_index(receipt.slot)] == receipt.ticket:
                hdr[slot_index(receipt.slot)] = 0
            if receipt.rticket and hdr[slot_index(receipt.rslot)] == receipt.rticket:
                hdr[slot_index(receipt.rslot)] = 0  # the return hold, not used
            m.live.remove(receipt)
            if not m.live:
                m.idle_since = time.monotonic()

    def release_all(self) -> None:
        """Let go of every hold now: this process image is about to be replaced (exec),
        and its mappings with it, while its pid (which the owners' sweep checks) lives on."""
        with self.lock:
            for kept in self.mapped.values():
                for m in kept:
                    for r in m.live:
                        for slot, ticket in ((r.slot, r.ticket), (r.rslot, r.rticket)):
                            if ticket and m.hdr[slot_index(slot)] == ticket:
                                m.hdr[slot_index(slot)] = 0

    def find(self, addr: int, nbytes: int, owner: int) -> Receipt | None:
        """A live receipt from ``owner`` whose buffer holds [addr, addr + nbytes) unwritten
        and whose return hold is unused: the buffer can go back to its owner by name."""
        with self.lock:
            for kept in self.mapped.values():
                for m in kept:
                    lo = m.base + HEADER
                    if not (m.live and lo <= addr and addr + nbytes <= lo + m.capacity):
                        continue
                    for r in list(m.live):  # a finalizer may run in between
                        off = addr - lo
                        if (
                            r.owner == owner
                            and r.rticket
                            and r.offset <= off
                            and off + nbytes <= r.offset + r.nbytes
                            and self.unmodified(addr, nbytes)
                        ):
                            return r
            return None

    def returned(self, r: Receipt) -> list[Any]:
        """The descriptor naming ``r``'s buffer back to its owner under the return hold,
        which is the owner's to let go from now on."""
        rslot, rticket = r.rslot, r.rticket
        r.rslot = r.rticket = 0
        return [r.owner, r.fd, r.mapped.token, r.offset, r.nbytes, rslot, rticket, 0, 0]

    def unmodified(self, addr: int, nbytes: int) -> bool:
        """Whether this process wrote none of the pages of [addr, addr + nbytes) in a
        private mapping (each page absent, or the file's own page)."""
        return not self._written(addr, nbytes).any()

    def _written(self, addr: int, nbytes: int) -> np.ndarray:
        """Per page of [addr, addr + nbytes) of a private mapping: whether this process
        wrote it (its own anonymous copy, present or swapped). Reading /proc/self/pagemap
        costs ~1 ms per 100 MB of mapped pages, ~0.1 ms where none is mapped."""
        if self._pagemap is None:
            self._pagemap = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
        first, last = addr // PAGE, (addr + nbytes - 1) // PAGE
        raw = os.pread(self._pagemap, (last - first + 1) * 8, first * 8)
        e = np.frombuffer(raw, dtype=np.uint64)
        return ((e & np.uint64(_PRESENT | _FILE)) == np.uint64(_PRESENT)) | (
            (e & np.uint64(_SWAPPED)) != 0
        )

    def _drop_written(self, m: Mapped, start: int, nbytes: int) -> None:
        """Drop the pages of a kept mapping's [start, start + nbytes) this process wrote,
        so they show the segment again; the others keep their page tables (reading them
        faults nothing)."""
        lo = start // PAGE * PAGE
        written = self._written(m.base + lo, start + nbytes - lo)
        if not written.any():
            return
        # runs of written pages: each edge where the flag changes
        edges = np.flatnonzero(np.diff(written.astype(np.int8), prepend=0, append=0))
        if len(edges) > 2 * MAX_DROPS:  # scattered writes: one call for the whole range
            m.map.madvise(mmap.MADV_DONTNEED, lo, start + nbytes - lo)
            return
        for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
            m.map.madvise(mmap.MADV_DONTNEED, lo + a * PAGE, (b - a) * PAGE)

    def sweep(self, now: float | None = None) -> None:
        """Unmap kept mappings idle past IDLE_RELEASE or beyond RETAINED_BYTES."""
        now = time.monotonic() if now is None else now
        with self.lock:
            kept_bytes = 0
            for token in list(self.mapped):
                keep = []
                for m in self.mapped[token]:
                    if m.live or m.idle_since == 0.0:
                        keep.append(m)
                    elif (
                        now - m.idle_since > IDLE_RELEASE
                        or kept_bytes + m.capacity > RETAINED_BYTES
                    ):
                        m.close()
                    else:
                        kept_bytes += m.capacity
                        keep.append(m)
                if keep:
                    self.mapped[token] = keep
                else:
                    del self.mapped[token]

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.mapped.values())


@functools.lru_cache(maxsize=256)
def holder_type(nbytes: int) -> type:
    """A ctypes byte array type of ``nbytes``, subclassed so its instances take weak
    references (the finalizer that lets go of the hold)."""
    return type("SegmentBuffer", (ctypes.c_ubyte * nbytes,), {})
