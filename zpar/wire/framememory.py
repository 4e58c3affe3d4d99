"""Large received frames land in memory reused from one frame to the next (W5).

libzmq's I/O thread mallocs every frame it receives. glibc serves a block over 32 MiB
with a fresh mmap and unmaps it when it is freed (and the I/O thread's own arena can hold
nothing over 64 MiB), so every 100 MB array received is 100 MB of fresh pages. On this
project's hosts (VMs whose balloon reports free pages back to the hypervisor) touching
fresh memory costs 75-180 ms per 100 MB (74-110 with huge pages), against ~8 ms to copy
into memory touched before: W5's round trip was mostly page faults at both ends, and its
spread from run to run came from them (docs/decisions.md, "W4 maps and W5 large arrays").

Both ends therefore ask glibc to keep large blocks in its heap and hand them out again:
one arena for every thread (so the I/O thread allocates from the main heap, which can
grow to any size), no mmap for large blocks (they come from the heap and go back to it),
and up to RETAINED_BYTES of free memory kept at the top of the heap instead of returned.

- Engines get it as GLIBC_TUNABLES when they start (zpar.cluster.launchers.base).
- A client gets it from ``mallopt`` at ``zpar.Cluster.start`` and in ``Client.__init__``,
  before its zmq I/O thread first allocates (an I/O thread that allocated before keeps
  its own arena: its frames are fresh pages as before). It needs each reply freed when
  its caller drops it: with the reply held by a Request <-> future cycle until the cyclic
  GC ran, W5 measured no better (0.59-1.66 GB/s against 1.75-1.82 with engines alone);
  without the cycle 1.27-3.27, push/pull 2.35-3.18.

The price: a process keeps up to RETAINED_BYTES of freed memory for the next frame, and
its threads share one malloc arena. A heap returns only its top to the system when a
block is freed: free blocks below a live one (nine of ten 100 MB arrays deleted, the
tenth kept) would stay resident, so a reusing process runs a trimmer thread that gives
such holes back (``malloc_trim``) once they exceed HOLES_BYTES, looked at every
TRIM_INTERVAL seconds (a frame freed at the top, W5's case, stays for the next one). And
what a burst of transfers kept is for the next burst, not for good: once the heap has not
changed for IDLE_RELEASE seconds, everything free above IDLE_FREE_MIN goes back (a client
that moved 100 MB arrays kept ~380 MB more resident than before without this).

``ZPAR_FRAME_REUSE``: ``all`` (the default: engines and clients), ``engines``, ``0``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Free memory a process keeps at the top of its heap for the next large frame.
RETAINED_BYTES = 256 * 2**20

#: Where reuse is on: "all" (the default: engines and clients), "engines" or "0"
#: (nowhere); read when an engine is started and when a process's first Client is made.
SWITCH_ENV = "ZPAR_FRAME_REUSE"
SWITCH_VALUES = ("all", "engines", "0")

#: glibc's names for what the engines are started with: GLIBC_TUNABLES entries.
REUSE_TUNABLES = (
    "glibc.malloc.arena_max=1",
    "glibc.malloc.mmap_max=0",
    f"glibc.malloc.trim_threshold={RETAINED_BYTES}",
)

#: Free memory below the heap's top a reusing process gives back once it is larger than
#: this (a frame freed below a live block is a hole: kept up to this, for the next one)...
HOLES_BYTES = RETAINED_BYTES
#: ...looked at this often (seconds) by its trimmer thread.
TRIM_INTERVAL = 1.0
#: A heap unchanged (in use within IDLE_SLACK bytes) this long (seconds) gives back all
#: its free memory, top included, when that is more than IDLE_FREE_MIN.
IDLE_RELEASE = 5.0
IDLE_SLACK = 2**20
IDLE_FREE_MIN = 32 * 2**20

# mallopt's parameter numbers (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8

_applied: bool | None = None
_trimmer: threading.Thread | None = None


def _switch() -> str:
    value = os.environ.get(SWITCH_ENV, "all").strip().lower() or "all"
    if value not in SWITCH_VALUES:
        raise ValueError(f"{SWITCH_ENV} must be one of {', '.join(SWITCH_VALUES)}, not {value!r}")
    return value


def for_engines() -> bool:
    """Whether engines started now get reuse (ZPAR_FRAME_REUSE is not 0)."""
    return _switch() != "0"


def for_clients() -> bool:
    """Whether a client process made now gets reuse (ZPAR_FRAME_REUSE=all, the default)."""
    return _switch() == "all"


def reuse_in_this_process() -> bool:
    """Ask this process's glibc to reuse large blocks (see the module docstring); once per
    process, a no-op without glibc. True if it is in effect."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        settings = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, RETAINED_BYTES))
        _applied = all(libc.mallopt(param, value) == 1 for param, value in settings)
    except (OSError, AttributeError) as e:  # not the glibc we know: leave malloc alone
        log.debug("frame memory reuse not set: %s", e)
        return False
    log.debug("frame memory reuse %s (pid %d)", "set" if _applied else "refused", os.getpid())
    if _applied:
        start_trimmer()
    return _applied


def reusing_by_environment() -> bool:
    """Whether this process was started with the reuse tunables (an engine)."""
    return "glibc.malloc.mmap_max=0" in os.environ.get("GLIBC_TUNABLES", "").split(":")


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _glibc_heap() -> ctypes.CDLL:
    """glibc with mallinfo2 (>= 2.33) and malloc_trim typed; OSError or AttributeError
    without them."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    return libc


def heap_holes(libc: ctypes.CDLL) -> int:
    """Free bytes in the heap below its releasable top (libc: from _glibc_heap)."""
    info = libc.mallinfo2()
    return int(info.fordblks) - int(info.keepcost)


class HoleTrimmer:
    """Gives the heap's holes back once they exceed HOLES_BYTES (and its top beyond
    RETAINED_BYTES). malloc_trim releases a free block's pages but it stays free in
    malloc's count, so a trim is due only when the heap changed by HOLES_BYTES since the
    last one (blocks allocated and freed again: their pages resident again). A heap that
    stays as it is for IDLE_RELEASE seconds gives back all it keeps free, once."""

    def __init__(self, libc: ctypes.CDLL, clock: Callable[[], float] = time.monotonic) -> None:
        self.libc = libc  # from _glibc_heap
        self.clock = clock
        self._at_last_trim: tuple[int, int] | None = None
        #: the heap (arena, in use) last seen, since when, and whether that idle heap was
        #: given back already
        self._seen: tuple[int, int] = (-1, -1)
        self._seen_since = clock()
        self._idle_released = False

    def __call__(self) -> bool:
        """Trim if due; True if it trimmed."""
        info = self.libc.mallinfo2()
        state = (int(info.arena), int(info.uordblks))
        if self._idle(state) and int(info.fordblks) > IDLE_FREE_MIN:
            self.libc.malloc_trim(0)
            after = self.libc.mallinfo2()  # the top given back shrinks the arena: still idle
            self._seen = (int(after.arena), int(after.uordblks))
            self._idle_released = True
            return True
        holes = int(info.fordblks) - int(info.keepcost)
        if holes <= HOLES_BYTES:
            return False
        last = self._at_last_trim
        if last is not None and last[0] == state[0] and abs(last[1] - state[1]) < HOLES_BYTES:
            return False
        self.libc.malloc_trim(RETAINED_BYTES)
        self._at_last_trim = state
        return True

    def _idle(self, state: tuple[int, int]) -> bool:
        """Whether the heap has stayed as it is for IDLE_RELEASE seconds and was not given
        back since it came to be so."""
        seen = self._seen
        now = self.clock()
        if seen[0] != state[0] or abs(seen[1] - state[1]) > IDLE_SLACK:
            self._seen, self._seen_since, self._idle_released = state, now, False
            return False
        return not self._idle_released and now - self._seen_since >= IDLE_RELEASE


def start_trimmer(interval: float = TRIM_INTERVAL) -> bool:
    """Start this process's trimmer thread (once; a daemon: it never holds the process
    up). False without glibc's mallinfo2 (glibc < 2.33): nothing watches the holes."""
    global _trimmer
    if _trimmer is not None:
        return True
    try:
        libc = _glibc_heap()
    except (OSError, AttributeError) as e:
        log.warning("large blocks reused, but their holes are not trimmed: %s", e)
        return False

    trim = HoleTrimmer(libc)

    def trim_forever() -> None:
        event = threading.Event()
        while not event.wait(interval):  # ctypes calls release the GIL
            if trim():
                log.debug("heap holes given back (pid %d)", os.getpid())

    _trimmer = threading.Thread(target=trim_forever, name="zpar-heap-trimmer", daemon=True)
    _trimmer.start()
    return True
