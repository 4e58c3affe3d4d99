"""Handles: the AsyncResults a user still holds, by msg_id, held weakly.

Why not weakref.WeakValueDictionary: it makes a KeyedRef per entry through two Python-level
methods (``__new__``, ``__init__``) and registers a callback that runs as each result is
dropped; at one entry per task that was ~2-3 us of the submitting thread's CPU per task
(noisy machine). Here an entry is a plain ``weakref.ref`` (made in C, no callback), and the
dead ones are swept when the table has doubled since the last sweep: amortised O(1) per
entry, and the table never holds more than twice the live entries plus a constant.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

#: Entries below which the table is never swept (a sweep of a small table costs nothing worth
#: saving, and the table of a client with a few handles stays as it is).
SWEEP_MIN = 1024


class Handles:
    """A msg_id -> AsyncResult mapping that does not keep the results alive."""

    __slots__ = ("_refs", "_sweep_at")

    def __init__(self) -> None:
        self._refs: dict[str, weakref.ref[Any]] = {}
        self._sweep_at = SWEEP_MIN

    def add(self, msg_ids: list[str], handle: Any) -> None:
        """Remember ``handle`` under each of its msg_ids (one weak reference for all)."""
        ref = weakref.ref(handle)
        refs = self._refs
        for m in msg_ids:
            refs[m] = ref
        if len(refs) >= self._sweep_at:
            self._sweep()

    def _sweep(self) -> None:
        refs = self._refs
        for m in [m for m, r in refs.items() if r() is None]:
            del refs[m]
        self._sweep_at = max(SWEEP_MIN, 2 * len(refs))

    def __setitem__(self, msg_id: str, handle: Any) -> None:
        self.add([msg_id], handle)

    def get(self, msg_id: str, default: Any = None) -> Any:
        ref = self._refs.get(msg_id)
        handle = ref() if ref is not None else None
        return default if handle is None else handle

    def __getitem__(self, msg_id: str) -> Any:
        handle = self.get(msg_id)
        if handle is None:
            raise KeyError(msg_id)
        return handle

    def __contains__(self, msg_id: object) -> bool:
        ref = self._refs.get(msg_id)  # type: ignore[call-overload]
        return ref is not None and ref() is not None

    def pop(self, msg_id: str, default: Any = None) -> Any:
        ref = self._refs.pop(msg_id, None)
        handle = ref() if ref is not None else None
        return default if handle is None else handle

    def items(self) -> list[tuple[str, Any]]:
        """(msg_id, handle) of every handle still alive (a list: safe to change the table
        while going through it)."""
        return [(m, h) for m, r in list(self._refs.items()) if (h := r()) is not None]

    def keys(self) -> list[str]:
        return [m for m, _ in self.items()]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.items())

    def clear(self) -> None:
        self._refs.clear()
        self._sweep_at = SWEEP_MIN
