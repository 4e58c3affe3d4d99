"""Gathering a distributed array through shared memory when its engines share this host.

A socket moves each section twice (into the kernel, out again) through one receiving
thread; here the client makes the result array in an unlinked-on-return tmpfs file and
every engine of this host writes its owned cells straight into place, all at once. Engines
elsewhere (the file is not there for them) send their cells as before, and the client puts
them in. Space is reserved with posix_fallocate first, so a full /dev/shm is a fallback,
never a SIGBUS in an engine writing into a page that cannot exist.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from zpar.privatefile import SHM_DIR, mapped_until_return

from .maps import outer_key

#: Below this many bytes the sockets are as quick, and no file is made.
SHM_GATHER_MIN_BYTES = 1 << 20
__all__ = ["SHM_DIR", "SHM_GATHER_MIN_BYTES", "shared_result", "write_into"]


@contextlib.contextmanager
def shared_result(
    shape: tuple[int, ...], dtype: np.dtype
) -> Iterator[tuple[str, np.ndarray] | None]:
    """``(path, array)`` of a new shared array, or None where sharing does not pay or
    cannot be had (small, no /dev/shm, no room). The file is unlinked on exit; the array
    keeps its mapping for as long as it lives."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < SHM_GATHER_MIN_BYTES or dtype.hasobject:
        yield None
        return
    with mapped_until_return("zpar-gather-", nbytes) as made:
        if made is None:
            yield None
            return
        path, mapping = made
        yield path, np.frombuffer(mapping, dtype=dtype).reshape(shape)


def write_into(
    path: str, shape: Sequence[int], dtype: np.dtype, where: Sequence[Any], cells: Any
) -> bool:
    """On an engine: put ``cells`` at ``where`` in the client's shared array; False when
    the file is not on this host (the caller then sends the cells)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        with mmap.mmap(fd, 0) as mapping:
            out = np.frombuffer(mapping, dtype=dtype).reshape(tuple(shape))
            if where:
                out[outer_key(where)] = cells
            else:
                out[()] = cells
            del out  # the mapping closes only once no array holds it
    finally:
        os.close(fd)
    return True
