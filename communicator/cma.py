"""Cross-memory attach: a long message between two processes of one host in one copy.

Linux's ``process_vm_readv`` copies straight from another process's memory into ours (what
MPICH and Open MPI call CMA). The sender of a long message to a rank on its host sends only
its pid and the buffer's address (CMASYNC); the receiver, once the message is matched to a
receive, reads the bytes into the posted buffer itself and answers CMADONE, which completes
the send. One copy, made by the kernel, instead of two through a shared-memory ring or
three through a socket. The kernel allows it between processes of one user unless a
security module forbids ptrace between them (Yama's ptrace_scope 1 and up): then the read
fails and the receiver asks for the bytes the ordinary way (SYNCACK), once per peer.

A long read is split across the CPUs (threads of a small pool, ctypes releasing the GIL)
while the host has a CPU for every runnable task: one core copies at 5-6 GB/s on this VM,
two at 10-11 (docs/decisions.md, "A long same-host message is read by every idle CPU"); the
sender only waits for CMADONE meanwhile. On a busy host the parts would queue for the same
CPUs and the read would wait for the last of them: one part then.
"""

from __future__ import annotations

import ctypes
import logging
import os
import struct
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from . import hostload

log = logging.getLogger(__name__)

#: pid and address of the sender's buffer (the length is the packet's ``arg``)
DESC = struct.Struct(">QQ")
#: a read is split in parts of at least this many bytes, one per CPU (at most MAX_PARTS):
#: below it a thread's hand-off costs more than the copy it shares
PART_MIN = 4 << 20
MAX_PARTS = 4


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _load() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.process_vm_readv
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_ssize_t
    fn.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(_IoVec),
        ctypes.c_ulong,
        ctypes.POINTER(_IoVec),
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    return fn


_readv = _load()
SUPPORTED = _readv is not None


def address(buf: memoryview) -> int:
    """The address of a contiguous buffer (read-only ones too)."""
    return int(np.frombuffer(buf, dtype=np.uint8).ctypes.data)


def describe(pid: int, buf: memoryview) -> bytes:
    return DESC.pack(pid, address(buf))


def read(desc: bytes, into: memoryview) -> bool:
    """Copy len(into) bytes from the described buffer of another process, in parts on
    several CPUs when it is long; False when the kernel refuses (then nothing is to be
    trusted in ``into``)."""
    if _readv is None or not len(into):
        return _readv is not None
    pid, addr = DESC.unpack_from(desc)
    n = len(into)
    local = address(into)
    parts = min(_cpus(), MAX_PARTS, n // PART_MIN)
    if parts < 2 or not _room():
        return _read_part(pid, local, addr, n)
    step = -(-n // parts) + 4095 & ~4095  # page-aligned parts
    spans = [(k, min(step, n - k)) for k in range(0, n, step)]
    pool = _pool(len(spans) - 1)
    futures = [pool.submit(_read_part, pid, local + k, addr + k, m) for k, m in spans[1:]]
    ok = _read_part(pid, local + spans[0][0], addr + spans[0][0], spans[0][1])
    return all([f.result() for f in futures]) and ok


def _read_part(pid: int, local: int, remote: int, n: int) -> bool:
    got = _readv(pid, ctypes.byref(_IoVec(local, n)), 1, ctypes.byref(_IoVec(remote, n)), 1, 0)
    if got != n:
        err = ctypes.get_errno()
        log.info("process_vm_readv from pid %d: %d of %d bytes (errno %d)", pid, got, n, err)
        return False
    return True


def _room() -> bool:
    return hostload.has_room()


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


_pool_lock = threading.Lock()
_pool_exec: ThreadPoolExecutor | None = None


def _pool(workers: int) -> ThreadPoolExecutor:
    """The helper threads of split reads, made on first use (and again in a forked child)."""
    global _pool_exec
    with _pool_lock:
        if _pool_exec is None or _pool_exec._max_workers < workers:
            if _pool_exec is not None:
                _pool_exec.shutdown(wait=False)
            _pool_exec = ThreadPoolExecutor(max(workers, 1), thread_name_prefix="zpar-cma")
        return _pool_exec


def _forget_pool() -> None:
    global _pool_exec
    _pool_exec = None  # the parent's threads are not ours


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)
