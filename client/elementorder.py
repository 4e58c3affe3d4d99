"""The order in which a map of elements is read: in submission order, as the elements are
answered, or up to the first error.

Functions of the map's Parts (client.mapparts, one per element request) and of its
MapWaiters, yielding ``(parts, position)`` pairs: AsyncMapResult (client.asyncresult)
turns each into a value or an error as ipyparallel's iteration does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

from .mapparts import MapWaiters, Parts

#: seconds a reader waits on the map's condition before it looks again (a missed wake-up
#: costs at most this; the I/O thread notifies each part's arrival)
RECHECK = 0.5


def in_order(parts: Sequence[Parts]) -> Iterator[tuple[Parts, int]]:
    """Every position in submission order, each once it is answered."""
    for p in parts:
        for j in range(p.n):
            p.wait(j)
            yield p, j


def as_answered(
    parts: Sequence[Parts], waiters: MapWaiters | None, total: int
) -> Iterator[tuple[Parts, int]]:
    """Every position as it is answered: each part's positions once it is in, and those
    of a request that failed whole once its error is known."""
    seen = [0] * len(parts)
    yielded = [0] * len(parts)
    done = 0
    while done < total:
        new = False
        for k, p in enumerate(parts):
            while seen[k] < len(p.replies):
                idx = seen[k]
                seen[k] += 1
                new = True
                for j in range(p.n):
                    if p.owner[j] == idx:
                        done += 1
                        yielded[k] += 1
                        yield p, j
            if p.error is not None and yielded[k] < p.n:
                for j in range(p.n):
                    if not p.owner[j] >= 0:
                        done += 1
                        yielded[k] += 1
                        yield p, j
        if not new and done < total and waiters is not None:
            counts = [len(p.replies) for p in parts]
            waiters.wait_for(
                lambda counts=counts: any(
                    len(p.replies) != c or p.error is not None
                    for p, c in zip(parts, counts, strict=True)
                ),
                RECHECK,
            )


def first_error(
    parts: Sequence[Parts],
    waiters: MapWaiters | None,
    timeout: float | None,
    ready: Callable[[], bool],
    progress: Callable[[], int],
) -> Exception | None:
    """Wait until an element failed or all are in (``ready()``), ``timeout`` seconds at
    most (None: forever); the first error found, None if there is none (yet)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        for p in parts:
            for j in range(p.n):
                if p.done(j):
                    v = p.value(j)
                    if isinstance(v, Exception):
                        return v
        if ready():
            return None
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return None
        if waiters is not None:
            before = progress()
            waiters.wait_for(lambda before=before: progress() != before or ready(), RECHECK)
