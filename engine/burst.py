"""One burst of a map's elements (engine.elements): run them one after another until none
is left (the positions' deque is empty: run, or given back) or the clock passes the
burst's deadline. Each element's value (or, in ``errors``, the exception it raised) and
its end time (the engine's monotonic clock) are appended; the watchdog's thread reads
both when it makes a part, the end time first.

``zpar.engine._burst`` (Cython, built by ``pip install`` when a C compiler is there) does
the same in C around the call: the interpreted loop's bytecode per element was most of an
element's cost for a quick function (docs/decisions.md, "An element burst in C").
``ZPAR_ENGINE_PURE=1`` chooses this module's loop (CI runs both).
"""

from __future__ import annotations

import os
import time
from array import array
from collections.abc import Callable, Iterator
from typing import Any


def run_burst_py(
    calls: Iterator[Any],
    take_position: Callable[[], int],
    pending: list[Any],
    ends: array,
    errors: dict[int, BaseException],
    deadline: float,
    last: int,
    user_errors: tuple[type[BaseException], ...],
) -> int:
    """Run elements (``next(calls)``: the next one's value) at the positions
    ``take_position()`` gives, until it raises IndexError or an element ends past
    ``deadline``; returns the last position run (``last`` if none)."""
    append, append_end, monotonic = pending.append, ends.append, time.monotonic
    while True:
        try:
            last = take_position()
        except IndexError:  # the last one ran, or the rest was given back
            break
        try:
            value = next(calls)
        except user_errors as e:
            value = None
            errors[last] = e
        now = monotonic()
        append_end(now)  # before the value: take() reads ends of what it takes
        append(value)
        if now >= deadline:
            break
    return last


run_burst = run_burst_py
COMPILED = False
if os.environ.get("ZPAR_ENGINE_PURE") != "1":
    try:
        from ._burst import run_burst  # type: ignore[import-not-found,no-redef]  # noqa: F401

        COMPILED = True
    except ImportError:  # no C compiler at install time: the loop above
        pass
