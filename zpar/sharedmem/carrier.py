"""What the client and the engine call around (de)serialization to carry large buffers
through shared memory between processes of one host.

- ``offer()``: this process's host key, pid and start time, put in a request's metadata;
  the peer compares the key with its own (``same_host``) and, when they match, may send
  its large buffers to that pid through segments.
- ``outbound(buffers, dest)``: the buffers of a message to ``dest`` with those of at
  least SHM_MIN_BYTES replaced by a SegmentRef: written once into a segment of this
  process (zpar.sharedmem.pool), or, when the buffer is one ``dest`` sent here and nothing
  wrote into it, named back (no copy), or, for a ``shared_array``, named as it is.
- ``inbound(msg)``: a checked message's segment descriptors replaced by the buffers they
  name (zpar.sharedmem.receipts), taken at once, so the sender's hold does not wait on
  the receiver's queue.

``ZPAR_SHM=0`` turns it off (everything goes through the sockets, as between hosts).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..constants import STORE_RESULT_LIMIT
from ..wire import Message, SegmentRef
from ..wire.frames import nbytes as _nbytes
from .pool import Pool
from .receipts import Receipts, SegmentGone, holder_type
from .segment import HEADER, process_start

log = logging.getLogger(__name__)

#: Buffers at least this large go through shared memory. Not below STORE_RESULT_LIMIT: a
#: message carrying a segment then always has more large bytes than the hub stores, so
#: the store keeps exactly what it keeps without shared memory (nothing large).
SHM_MIN_BYTES = max(2**20, STORE_RESULT_LIMIT)
#: "0" turns the shared-memory carrier off in the process that reads it
SWITCH_ENV = "ZPAR_SHM"
#: seconds between the sweeper's looks (dead receivers' holds, idle segments and mappings)
SWEEP_INTERVAL = 1.0

_pool = Pool()
_receipts = Receipts()
_sweeper: threading.Thread | None = None
_sweeper_lock = threading.Lock()
_enabled: bool | None = None
_offer: list[Any] | None = None
#: (client session, engine uuid) -> (pid, start) of engines that answered an offer from
#: this host
_peers: dict[tuple[str, str], tuple[int, int]] = {}
#: a shared_array's segment by the address of its data
_pinned: dict[int, Any] = {}


def enabled() -> bool:
    """Whether this process carries large buffers through shared memory (Linux, memfd,
    /proc, and not turned off with ZPAR_SHM=0)."""
    global _enabled
    if _enabled is None:
        _enabled = (
            sys.platform.startswith("linux")
            and hasattr(os, "memfd_create")
            and os.path.exists("/proc/self/pagemap")
            and os.environ.get(SWITCH_ENV, "1") != "0"
        )
    return _enabled


def host_key() -> str:
    """Equal in two processes that see each other's memory files through /proc: same
    boot, same pid and mount namespaces, same user."""
    parts = [str(os.getuid())]
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            parts.append(f.read().strip())
        parts += [os.readlink("/proc/self/ns/pid"), os.readlink("/proc/self/ns/mnt")]
    except OSError:
        parts.append(f"pid {os.getpid()}")  # matches nobody else
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def offer() -> list[Any]:
    """[host key, pid, start time]: what a request's metadata says under "shm" until its
    engine answered (then the engine remembers this client's session)."""
    global _offer
    if _offer is None:
        _offer = [host_key(), os.getpid(), process_start(os.getpid())]
    return _offer


def same_host(o: Any) -> tuple[int, int] | None:
    """(pid, start) of the process that made offer ``o``, if it is on this host."""
    if not (type(o) is list and len(o) == 3 and enabled()):
        return None
    key, pid, start = o
    if type(pid) is not int or type(start) is not int or key != offer()[0] or pid <= 0:
        return None
    return pid, start


def learn_peer(session: str, peer: str, o: Any) -> None:
    """Remember that engine ``peer`` answered the offer of client ``session`` from this
    host (it remembers the session, and answers it through shared memory from now on)."""
    dest = same_host(o)
    if dest is not None and dest[0] != os.getpid():
        _peers[session, peer] = dest


def peer_pid(session: str, peer: str) -> tuple[int, int] | None:
    """(pid, start) of engine ``peer`` if it answered client ``session`` from this host."""
    return _peers.get((session, peer))


def forget_peer(session: str, peer: str) -> None:
    _peers.pop((session, peer), None)


# -- sending ------------------------------------------------------------------------------


def outbound(buffers: Sequence[Any], dest: tuple[int, int]) -> Sequence[Any]:
    """``buffers`` with each one of at least SHM_MIN_BYTES carried by a segment for
    process ``dest`` (pid, start); the list itself when none is."""
    out: list[Any] | None = None
    for i, b in enumerate(buffers):
        if type(b) is bytes or type(b) is SegmentRef:
            continue  # small frames (the pickle stream), or placed already
        n = _nbytes(b)
        if n < SHM_MIN_BYTES:
            continue
        try:
            ref = _place(b, n, dest)
        except OSError as e:  # no memory for a segment: the socket carries it
            log.warning("shared memory refused a buffer of %d bytes (%s): sent as a frame", n, e)
            continue
        if ref is not None:
            if out is None:
                out = list(buffers)
            out[i] = ref
    return buffers if out is None else out


def _place(b: Any, n: int, dest: tuple[int, int]) -> SegmentRef | None:
    src = np.frombuffer(b, dtype=np.uint8)
    addr = int(src.ctypes.data)
    pid, start = dest
    back = _receipts.find(addr, n, pid)
    if back is not None:
        return SegmentRef(_receipts.returned(back))
    with _pool.lock:
        seg, offset = _pinned_at(addr, n)
        if seg is None:
            seg, offset = _pool.acquire(n), 0
            np.copyto(np.frombuffer(seg.data, dtype=np.uint8, count=n), src)
        hold = seg.issue(pid, start)
        ret = seg.issue(pid, start) if hold is not None else None
        if ret is None:  # every slot held: the socket carries this one
            if hold is not None:
                seg.clear(*hold)
            return None
        _pool.used(seg)
        _start_sweeper()
        return SegmentRef([os.getpid(), seg.fd, seg.token, offset, n, *hold, *ret])


def _pinned_at(addr: int, n: int) -> tuple[Any, int]:
    for base, seg in _pinned.items():
        if base <= addr and addr + n <= base + seg.capacity:
            return seg, addr - base
    return None, 0


# -- receiving ----------------------------------------------------------------------------


def inbound(msg: Message) -> None:
    """Replace each segment descriptor's empty frame in ``msg.buffers`` by the buffer it
    names; learn the sender's answer to this process's offer. Raises SegmentGone (a
    RemoteProtocolError) when a named segment cannot be read."""
    tags = msg.tags
    if tags and tags.count(b"") != len(tags):
        for i, t in enumerate(tags):
            if type(t) is list:
                if t[0] == os.getpid():  # one of ours, sent back: its return hold is ours now
                    with _pool.lock:
                        seg = _pool.get(t[2])
                        if seg is None:
                            raise SegmentGone("a segment of this process came back closed")
                        seg.adopt(t[5])
                msg.buffers[i] = _receipts.take(t)
                _start_sweeper()


def take_reply(msg: Message) -> None:
    """inbound() for a reply to this process's direct request: also learns whether its
    engine answered the offer from this host (then later requests carry segments)."""
    o = msg.metadata.pop("shm", None) if msg.metadata else None
    if o is not None:
        parent = msg.parent_header
        dest, session = parent.get("dest"), parent.get("session")
        if type(dest) is str and type(session) is str:
            learn_peer(session, dest, o)
    inbound(msg)


# -- shared arrays --------------------------------------------------------------------------


def shared_array(shape: Any, dtype: Any = float) -> np.ndarray:
    """A zeroed array in shared memory: sent to an engine on this host it is named, not
    copied (the engines see it as it is when they read it: later writes of this process
    included, until they write a page themselves, which then becomes theirs). Elsewhere,
    or where shared memory is off, a plain zeroed array."""
    dt = np.dtype(dtype)
    if dt.hasobject:
        raise TypeError(f"shared_array holds numbers, not Python objects (dtype {dt})")
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    count = int(np.prod(shape, dtype=np.int64))
    if not enabled() or count * dt.itemsize == 0:
        return np.zeros(shape, dtype=dt)
    seg = _pool.pinned(count * dt.itemsize)
    holder = holder_type(count * dt.itemsize).from_buffer(seg.map, HEADER)
    base = int(np.frombuffer(holder, dtype=np.uint8).ctypes.data)
    _pinned[base] = seg
    weakref.finalize(holder, _unpin, base, seg.token)  # with the array's last view
    _start_sweeper()
    return np.frombuffer(holder, dtype=dt).reshape(shape)


def _unpin(base: int, token: bytes) -> None:
    _pinned.pop(base, None)
    _pool.unpin(token)


# -- upkeep ---------------------------------------------------------------------------------


def _start_sweeper() -> None:
    global _sweeper
    with _sweeper_lock:
        if _sweeper is None:
            _sweeper = threading.Thread(target=_sweep_loop, name="zpar-shm-sweep", daemon=True)
            _sweeper.start()


def _sweep_loop() -> None:
    global _sweeper
    while True:
        time.sleep(SWEEP_INTERVAL)
        sweep()
        with _sweeper_lock:
            if not _pool.segments and not _receipts.mapped:
                _sweeper = None
                return


def sweep() -> None:
    """Free dead receivers' holds, close idle segments and mappings (the sweeper's look)."""
    _pool.sweep()
    _receipts.sweep()


def release_all() -> None:
    """Before this process execs itself (an engine restarted in place): let go of every
    hold on others' segments (the sweep of their owners would see the same pid alive)."""
    _receipts.release_all()


def stats() -> dict[str, int]:
    """Segments this process owns, bytes of them, and mappings of others' it keeps."""
    return {
        "segments": len(_pool.segments),
        "segment_bytes": _pool.total(),
        "mappings": _receipts.count(),
    }


def _after_fork() -> None:
    """A forked child owns nothing of its parent's (the fds are closed at its exec)."""
    global _pool, _receipts, _sweeper, _offer
    _pool, _receipts, _sweeper, _offer = Pool(), Receipts(), None, None
    _peers.clear()
    _pinned.clear()


os.register_at_fork(after_in_child=_after_fork)

__all__ = [
    "SHM_MIN_BYTES",
    "SegmentGone",
    "enabled",
    "forget_peer",
    "host_key",
    "inbound",
    "learn_peer",
    "offer",
    "outbound",
    "peer_pid",
    "release_all",
    "same_host",
    "shared_array",
    "stats",
    "sweep",
    "take_reply",
]
