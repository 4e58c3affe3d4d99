"""Cross-memory attach: a long message between two processes of one host in one copy.

Linux's ``process_vm_readv`` copies straight from another process's memory into ours (what
MPICH and Open MPI call CMA). The sender of a long message to a rank on its host sends only
its pid and the buffer's address (CMASYNC); the receiver, once the message is matched to a
receive, reads the bytes into the posted buffer itself and answers CMADONE, which completes
the send. One copy, made by the kernel, instead of two through a shared-memory ring or
three through a socket. The kernel allows it between processes of one user unless a
security module forbids ptrace between them (Yama's ptrace_scope 1 and up): then the read
fails and the receiver asks for the bytes the ordinary way (SYNCACK), once per peer.
"""

from __future__ import annotations

import ctypes
import logging
import struct
import sys
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: pid and address of the sender's buffer (the length is the packet's ``arg``)
DESC = struct.Struct(">QQ")


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
    """Copy len(into) bytes from the described buffer of another process; False when the
    kernel refuses (then nothing is to be trusted in ``into``)."""
    if _readv is None or not len(into):
        return _readv is not None
    pid, addr = DESC.unpack_from(desc)
    local = _IoVec(address(into), len(into))
    remote = _IoVec(addr, len(into))
    got = _readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if got != len(into):
        err = ctypes.get_errno()
        log.info(
            "process_vm_readv from pid %d: %d of %d bytes (errno %d)", pid, got, len(into), err
        )
        return False
    return True
