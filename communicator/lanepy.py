"""The pure-Python twin of the compiled lane (communicator/_lane.pyx): same interface, same
bytes in the mailboxes, so a rank with either talks to a rank with the other.

Used where the extension was not built (no C compiler at install) or when
``ZPAR_COMM_PURE=1`` asks for it (CI runs both). Its spin holds the GIL (bounded, as the
compiled one's), its futex calls go through ctypes, which releases the GIL while asleep.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pickle
import struct
import time
from typing import Any

import numpy as np

from . import hostload
from . import mailbox as mb
from .peerwire import ENC_PICKLE, Kind
from .peerwire import HEADER as _HDR

_HDR_SIZE = _HDR.size
_LEN = struct.Struct("<I")
_SEQ = struct.Struct(">Q")
_U32 = struct.Struct("<I")
KIND_EAGER = int(Kind.EAGER)

#: recv_object's answers: the general path must take over; a raw buffer message. The
#: compiled lane's own objects when it is built, so a caller that imported one lane's
#: markers reads the other's answers right (a process may hold both: ZPAR_COMM_PURE, tests)
try:
    from ._lane import NOT_TAKEN, RAW  # type: ignore[import-not-found]
except ImportError:  # not built: the twin's own
    NOT_TAKEN = object()
    RAW = object()

_SYS_FUTEX = 202  # x86-64; the mailbox is x86-64 only (mailbox.SUPPORTED)
_SYS_FUTEX_WAITV = 449
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
#: how long a reading of the host's runnable tasks stands, ns (_lane.pyx's ROOM_CHECK_NS)
ROOM_CHECK_NS = 1_000_000
#: the phases of a wait (Lane.last_phase, as _lane.pyx's): none (a packet was there), the
#: caller's spin alone, the spin with room, the yields
PH_NONE, PH_SPIN, PH_ROOM, PH_YIELD = 0, 1, 2, 3


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Waitv(ctypes.Structure):
    _fields_ = [
        ("val", ctypes.c_uint64),
        ("uaddr", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


#: op * 8 + dtype: what Lane.allreduce combines (_lane.pyx's COMBINE_OPS / COMBINE_DTYPES)
COMBINE_OPS = {"SUM": 1, "PROD": 2, "MAX": 3, "MIN": 4}
COMBINE_DTYPES = {"<f8": 1, "<f4": 2, "<i8": 3, "<i4": 4}
_DTYPE_OF = {v: np.dtype(k) for k, v in COMBINE_DTYPES.items()}
_UFUNC_OF = {1: np.add, 2: np.multiply, 3: np.maximum, 4: np.minimum}


def combine_ok(code: int, nbytes: int) -> bool:
    dt = _DTYPE_OF.get(code & 7)
    return code >> 3 in _UFUNC_OF and dt is not None and nbytes > 0 and nbytes % dt.itemsize == 0


def combine(code: int, lower: Any, higher: Any, out: Any) -> None:
    """``out = lower op higher`` (numpy's ufunc: the compiled lane's C does the same)."""
    dt = _DTYPE_OF[code & 7]
    lo, hi, o = (np.frombuffer(b, dtype=dt) for b in (lower, higher, out))
    if not (len(lo) == len(hi) == len(o)) or not combine_ok(code, lo.nbytes):
        raise ValueError(f"combine {code}: {lo.nbytes}, {hi.nbytes}, {o.nbytes} bytes")
    _UFUNC_OF[code >> 3](lo, hi, out=o)


class _Box:
    """One mapped mailbox: its counters as a u64 view, the bell's address for futexes."""

    __slots__ = ("mv", "ctl", "slots", "slot_size", "bell_addr", "_keep")

    def __init__(self, mapping: Any, slots: int, slot_size: int) -> None:
        self.mv = memoryview(mapping)
        self.ctl = self.mv[: mb.HEAD].cast("Q")
        self.slots, self.slot_size = slots, slot_size
        arr = np.frombuffer(mapping, dtype=np.uint8, count=mb.HEAD)
        self.bell_addr = arr.ctypes.data + mb.O_BELL
        self._keep = arr

    def bell(self) -> int:
        return _U32.unpack_from(self.mv, mb.O_BELL)[0]

    def release(self) -> None:
        self._keep = None
        self.ctl.release()
        self.mv.release()


_W, _R, _ST, _SENT = mb.O_WRITTEN // 8, mb.O_READ // 8, mb.O_STATE // 8, mb.O_SENT // 8


class Lane:
    """The mailboxes of one rank and its links' sequence numbers (see _lane.pyx)."""

    def __init__(self, size: int) -> None:
        if not 0 < size <= 4096:
            raise ValueError(f"a lane holds 1..4096 ranks, got {size}")
        self.size = size
        self.send_seq = np.zeros(size, dtype=np.int64)
        self.recv_seq = np.zeros(size, dtype=np.int64)
        self._out: list[_Box | None] = [None] * size
        self._in: list[_Box | None] = [None] * size
        self._inlist: list[int] = []
        self.last_tag = self.last_enc = self.last_acks = self.last_src = 0
        self.last_payload: bytes | None = None
        #: send_object's pickle when the lane did not take it (for the general path)
        self.last_pickle: bytes | None = None
        self.last_n = 0
        self.futex_mode = False
        #: whether the last wait went to sleep (its spin found nothing)
        self.last_slept = False
        #: the wait's spin: pause with room, else yield, then the futex (see _lane.pyx)
        self.spin_room_ns = self.yield_ns = 0
        self.host_cpus = 0
        #: the last wait's phase, and how many waits spun with room, yielded, slept
        self.last_phase = PH_NONE
        self.room_waits = self.yield_waits = self.sleeps = 0
        #: the peer the last allreduce left on its sockets, to be woken by a frame
        self.wake_peer = -1
        self._loadfd = hostload.open_loadavg()
        self._running_at = 0
        self._running = -1
        #: this rank (the source of what it sends); fast sends and receives allowed at all
        self.rank = 0
        self.enabled = True
        self._blocked = [False] * size

    def set_out(self, peer: int, mapping: Any, slots: int, slot_size: int) -> None:
        self._out[peer] = _Box(mapping, slots, slot_size)

    def set_in(self, peer: int, mapping: Any, slots: int, slot_size: int) -> None:
        self._in[peer] = _Box(mapping, slots, slot_size)
        self._inlist.append(peer)

    def has_out(self, peer: int) -> bool:
        return self._out[peer] is not None

    def set_state(self, state: int) -> None:
        for p in self._inlist:
            self._in[p].ctl[_ST] = state  # type: ignore[union-attr]
        mb.fence()

    # -- sender ------------------------------------------------------------------------

    def block(self, peer: int, on: bool) -> None:
        self._blocked[peer] = on

    def send_eager(self, dest: int, data: Any, tag: int, ctx: int, enc: int) -> int:
        if not self.enabled or not 0 <= dest < self.size or self._blocked[dest]:
            return 0
        if self._out[dest] is None:
            return 0
        try:
            return self.send(dest, KIND_EAGER, ctx, enc, 0, self.rank, tag, 0, 0, data)
        except (TypeError, ValueError, BufferError):
            return 0

    def send_object(self, dest: int, obj: Any, tag: int, ctx: int) -> int:
        """send_eager of ``obj`` pickled (protocol 5: the compiled lane's bytes); 0 when
        not taken, ``last_pickle`` then holding the pickle if one was made."""
        self.last_pickle = None
        if not self.enabled or not 0 <= dest < self.size or self._blocked[dest]:
            return 0
        if self._out[dest] is None:
            return 0
        data = pickle.dumps(obj, 5)
        r = self.send(dest, KIND_EAGER, ctx, ENC_PICKLE, 0, self.rank, tag, 0, 0, data)
        if not r:
            self.last_pickle = data
        return r

    def send(
        self,
        peer: int,
        kind: int,
        ctx: int,
        enc: int,
        acks: int,
        src: int,
        tag: int,
        msgid: int,
        arg: int,
        payload: Any,
    ) -> int:
        box = self._out[peer]
        if box is None:
            return 0
        data = b"" if payload is None else payload
        if not isinstance(data, bytes):
            data = memoryview(data).cast("B")
        n = len(data)
        ctl = box.ctl
        written, read = ctl[_W], ctl[_R]
        if n + _HDR_SIZE + 4 > box.slot_size or written - read >= box.slots:
            return 0
        off = mb.HEAD + (written % box.slots) * box.slot_size
        seq = int(self.send_seq[peer])
        self.send_seq[peer] = seq + 1
        _LEN.pack_into(box.mv, off, n + _HDR_SIZE)
        if kind == KIND_EAGER:
            arg = n  # the payload's bytes, whatever its object's len says
        _HDR.pack_into(box.mv, off + 4, kind, ctx, enc, acks, src, tag, seq, msgid, arg)
        if n:
            box.mv[off + 4 + _HDR_SIZE : off + 4 + _HDR_SIZE + n] = data
        ctl[_W] = written + 1
        ctl[_SENT] = seq + 1
        return self._ring(box, written + 1 - read)

    def _ring(self, box: _Box, unread: int) -> int:
        mb.fence()
        st = box.ctl[_ST]
        if st == mb.ST_SLEEPING:
            _U32.pack_into(box.mv, mb.O_BELL, (box.bell() + 1) & 0xFFFFFFFF)
            _syscall(_SYS_FUTEX, ctypes.c_void_p(box.bell_addr), _FUTEX_WAKE, 1, None, None, 0)
        elif st == mb.ST_SOCKET and unread == 1:
            return 2
        return 1

    def note_socket_send(self, peer: int) -> None:
        box = self._out[peer]
        if box is None:
            return
        box.ctl[_SENT] = int(self.send_seq[peer])
        self._ring(box, 0)

    def unread_out(self, peer: int) -> int:
        box = self._out[peer]
        return 0 if box is None else box.ctl[_W] - box.ctl[_R]

    # -- receiver ----------------------------------------------------------------------

    def _head(self, peer: int) -> int | None:
        box = self._in[peer]
        if box is None:
            return None
        read = box.ctl[_R]
        if box.ctl[_W] == read:
            return None
        return mb.HEAD + (read % box.slots) * box.slot_size

    def _consume(self, peer: int) -> None:
        box = self._in[peer]
        box.ctl[_R] = box.ctl[_R] + 1  # type: ignore[union-attr]
        self.recv_seq[peer] += 1

    def _length(self, peer: int, off: int) -> int:
        box = self._in[peer]
        (n,) = _LEN.unpack_from(box.mv, off)  # type: ignore[union-attr]
        if n + 4 > box.slot_size or n < _HDR_SIZE:  # type: ignore[union-attr]
            raise ValueError(f"mailbox of rank {peer}: slot length {n} out of range")
        return n

    def peek(self, peer: int) -> tuple[int, int] | None:
        off = self._head(peer)
        if off is None:
            return None
        n = self._length(peer, off)
        return n, _SEQ.unpack_from(self._in[peer].mv, off + 4 + 12)[0]  # type: ignore[union-attr]

    def take(self, peer: int) -> bytes | None:
        off = self._head(peer)
        if off is None:
            return None
        n = self._length(peer, off)
        mv = self._in[peer].mv  # type: ignore[union-attr]
        if _SEQ.unpack_from(mv, off + 4 + 12)[0] != self.recv_seq[peer]:
            return None
        out = bytes(mv[off + 4 : off + 4 + n])
        self._consume(peer)
        return out

    def take_eager(self, peer: int, ctx: int, tag: int, buf: Any) -> int:
        off = self._head(peer)
        if off is None:
            return -1
        box = self._in[peer]
        mv = box.mv  # type: ignore[union-attr]
        (n,) = _LEN.unpack_from(mv, off)
        if n + 4 > box.slot_size or n < _HDR_SIZE:  # type: ignore[union-attr]
            return -2
        p = off + 4
        kind, pctx, enc, acks, src, ptag, seq, _msgid, _arg = _HDR.unpack_from(mv, p)
        if seq != self.recv_seq[peer] or src != peer:
            return -2
        if kind != KIND_EAGER or pctx != ctx or (tag != -1 and ptag != tag):
            return -2
        n -= _HDR_SIZE
        if buf is None:
            self.last_payload = bytes(mv[p + _HDR_SIZE : p + _HDR_SIZE + n])
        else:
            dst = memoryview(buf).cast("B")
            if dst.readonly:
                raise BufferError("receive buffer is read-only")
            if n > len(dst):
                return -4
            dst[:n] = mv[p + _HDR_SIZE : p + _HDR_SIZE + n]
        self.last_tag, self.last_enc, self.last_acks, self.last_src = ptag, enc, acks, peer
        self._consume(peer)
        return n

    def recv_eager(self, source: int, tag: int, ctx: int, buf: Any, timeout_ns: int) -> int:
        if not (self.enabled and self.futex_mode and 0 <= source < self.size):
            return -3
        if self._in[source] is None:
            return -3
        try:
            n = self.take_eager(source, ctx, tag, buf)
            if n != -1:
                return n
            r = self.wait(0, timeout_ns, source)
            return self.take_eager(source, ctx, tag, buf) if r == 1 else -1
        except (TypeError, ValueError, BufferError):
            return -2

    def recv_object(self, source: int, tag: int, ctx: int, timeout_ns: int) -> Any:
        n = self.recv_eager(source, tag, ctx, None, timeout_ns)
        if n < 0:
            return NOT_TAKEN
        self.last_n = n
        if self.last_enc != ENC_PICKLE:
            return RAW
        data, self.last_payload = self.last_payload, None
        return pickle.loads(data)  # type: ignore[arg-type]

    def running_tasks(self) -> int:
        return self._running

    def _tasks(self, now: int) -> int:
        """The host's runnable tasks (/proc/loadavg's "running/total"), read at most every
        ROOM_CHECK_NS; -1 when it cannot be read."""
        if self._loadfd < 0:
            return -1
        if self._running_at == 0 or now - self._running_at >= ROOM_CHECK_NS:
            self._running_at = now
            self._running = hostload.running_tasks(self._loadfd)
        return self._running

    def allreduce(
        self, acc: Any, got: Any, n: int, tag: int, ctx: int, code: int, timeout_ns: int
    ) -> int:
        """_lane.pyx's allreduce: the recursive-doubling rounds of a small allreduce in one
        call, combined into ``acc``; -1 done, else round * 2 (+ 1: that round's send out)
        where the Python rounds go on, -2 a message of another size came."""
        self.wake_peer = -1
        a, g = memoryview(acc).cast("B"), memoryview(got).cast("B")
        if (
            not (self.enabled and self.futex_mode)
            or len(a) != len(g)
            or not combine_ok(code, len(a))
        ):
            return 0
        mask, k = 1, 0
        while mask < n:
            peer = self.rank ^ mask
            if peer >= self.size or self._out[peer] is None or self._in[peer] is None:
                return k * 2
            if self._blocked[peer]:
                return k * 2
            r = self.send(peer, KIND_EAGER, ctx, 0, 0, self.rank, tag, 0, 0, a)
            if r == 0:
                return k * 2
            if r == 2:
                self.wake_peer = peer
                return k * 2 + 1
            m = self.take_eager(peer, ctx, tag, g)
            if m == -1:
                if self.wait(0, timeout_ns, peer) != 1:
                    return k * 2 + 1
                m = self.take_eager(peer, ctx, tag, g)
            if m != len(a) or self.last_enc != 0:
                return k * 2 + 1 if m < 0 else -2
            if peer < self.rank:
                combine(code, g, a, a)
            else:
                combine(code, a, g, a)
            mask <<= 1
            k += 1
        return -1

    def _check(self, only: int) -> int:
        r = 0
        for peer in self._inlist:
            if only >= 0 and peer != only:
                continue
            ctl = self._in[peer].ctl  # type: ignore[union-attr]
            sent = ctl[_SENT]  # first: the compiled lane's _check says why
            if ctl[_W] != ctl[_R]:
                return 1
            if sent > self.recv_seq[peer]:
                r = 2
        return r

    def wait(self, spin_ns: int, timeout_ns: int, only: int = -1) -> int:
        self.last_slept = False
        if not self._inlist:
            return 0
        self.last_phase = PH_NONE
        r = self._check(only)
        if r == 0 and spin_ns >= 0 and (spin_ns > 0 or self.spin_room_ns > 0 or self.yield_ns > 0):
            start = time.monotonic_ns()
            tasks = self._tasks(start) if self.spin_room_ns > 0 else -1
            if 0 < tasks <= self.host_cpus:
                self.room_waits += 1
                self.last_phase, spin_ns = PH_ROOM, max(spin_ns, self.spin_room_ns)
            elif self.yield_ns > 0:
                self.yield_waits += 1
                self.last_phase, spin_ns = PH_YIELD, max(spin_ns, self.yield_ns)
            else:
                self.last_phase = PH_SPIN
            end = start + spin_ns
            if self.last_phase == PH_YIELD:
                while not (r := self._check(only)) and time.monotonic_ns() < end:
                    os.sched_yield()
            else:
                while not (r := self._check(only)) and time.monotonic_ns() < end:
                    pass
        if r or timeout_ns <= 0:
            return r
        self.last_slept = True
        self.sleeps += 1
        deadline = time.monotonic_ns() + timeout_ns
        peers = [p for p in self._inlist if only < 0 or p == only][:64]
        waiters = (_Waitv * len(peers))()
        try:
            while r == 0:
                for i, p in enumerate(peers):
                    box = self._in[p]
                    waiters[i].val = box.bell()  # type: ignore[union-attr]
                    waiters[i].uaddr = box.bell_addr  # type: ignore[union-attr]
                    waiters[i].flags = 2  # FUTEX2_SIZE_U32, shared
                    box.ctl[_ST] = mb.ST_SLEEPING  # type: ignore[union-attr]
                mb.fence()
                r = self._check(only)
                now = time.monotonic_ns()
                if r or now >= deadline:
                    break
                ts = _Timespec(deadline // 1_000_000_000, deadline % 1_000_000_000)
                rc = _syscall(
                    _SYS_FUTEX_WAITV, waiters, len(peers), 0, ctypes.byref(ts), time.CLOCK_MONOTONIC
                )
                if rc < 0 and ctypes.get_errno() == 38:  # ENOSYS: before Linux 5.16
                    time.sleep(0.001)
                r = self._check(only)
        finally:
            for p in self._inlist:
                self._in[p].ctl[_ST] = mb.ST_BUSY  # type: ignore[union-attr]
            mb.fence()
        return r or self._check(only)

    def close(self) -> None:
        self.enabled = False
        if self._loadfd >= 0:
            os.close(self._loadfd)
            self._loadfd = -1
        for box in [*self._out, *self._in]:
            if box is not None:
                box.release()
        self._out = [None] * self.size
        self._in = [None] * self.size
        self._inlist = []


COMPILED = False

__all__ = [
    "COMBINE_DTYPES",
    "COMBINE_OPS",
    "COMPILED",
    "KIND_EAGER",
    "NOT_TAKEN",
    "RAW",
    "Lane",
    "combine",
]
