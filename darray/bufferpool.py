"""Freed sections kept on the engine for the next array of the same shape and dtype.

A new numpy array of hundreds of MB costs its first touch: one page fault per 4 KiB page
(~0.1 s per 256 MB on a quiet machine, several times that under load), more than the
arithmetic that fills it. Loops that make a temporary per step (``c = a + b`` in a time
step, a constructor after a ``free``) would pay it every time; writing the new section into
memory this process already touched does not (CuPy's memory pool does the same for GPU
memory). Only buffers nothing else refers to are kept, and only a few.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

#: at most this many freed buffers per engine (the memory a loop's temporaries need)
POOL_BUFFERS = 4
#: smaller buffers are cheap to allocate: not worth keeping
POOL_MIN_BYTES = 1 << 20

_pool: list[np.ndarray] = []


def recycle(owner: Any) -> None:
    """Keep ``owner.memory`` (a LocalArray just dropped from the namespace) if nothing
    else refers to the LocalArray or to its buffer, it owns its memory and is large."""
    # references: the caller's variable, ``owner`` and getrefcount's argument
    if sys.getrefcount(owner) > 3:
        return
    buf = owner.memory  # a constant section has none: nothing to keep
    # references: the LocalArray's slot, ``buf`` and getrefcount's argument
    if buf is None or sys.getrefcount(buf) > 3 or buf.nbytes < POOL_MIN_BYTES:
        return
    if not (buf.flags.owndata and buf.flags.c_contiguous and buf.flags.writeable):
        return  # views, and memory adopted from another library, are never reused
    _pool.append(buf)
    if len(_pool) > POOL_BUFFERS:
        del _pool[0]


def take(shape: tuple[int, ...], dtype: Any) -> np.ndarray | None:
    """A kept buffer of exactly this shape and dtype (its contents are stale), or None."""
    dtype = np.dtype(dtype)
    for i in range(len(_pool)):
        buf = _pool[i]
        if buf.shape == shape and buf.dtype == dtype:
            del _pool[i]
            # references: ``buf`` and getrefcount's argument; more means someone kept a view
            return buf if sys.getrefcount(buf) <= 2 else None
    return None


def empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``numpy.empty``, from the pool when it has a match."""
    buf = take(shape, dtype)
    return buf if buf is not None else np.empty(shape, dtype=dtype)


def zeros(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """``numpy.zeros``, from the pool (cleared) when it has a match."""
    buf = take(shape, dtype)
    if buf is None:
        return np.zeros(shape, dtype=dtype)
    buf[...] = 0
    return buf


def clear() -> None:
    _pool.clear()
