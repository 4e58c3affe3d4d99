"""ReplayGuard: the signatures a process accepted lately, to refuse a message sent twice.

Every message a process accepts is looked up here and added: a no-op task is checked at
six or more hops, so this is on every message's path. RecentKeys (zpar.wire.recent) forgets
the oldest key exactly, one delete per add once full, ~1.7 us per add in CPython. Here two
generations of a linear-probing table of machine words take turns: keys go into the
current one; when it holds ``capacity`` keys it becomes the previous one and the one
before is dropped whole (a fresh zeroed table). So at least the last ``capacity`` keys
and at most 2 x capacity are remembered, never fewer; a lookup reads both tables, an add
one: ~0.3-0.5 us each, no delete. Memory is fixed as RecentKeys': two tables of
2 x capacity words (2 MB for 65,536), plus a fresh one allocated per ``capacity`` adds.
"""

from __future__ import annotations

from array import array

from zpar.wire.recent import table_slots

_MASK64 = (1 << 64) - 1


class ReplayGuard:
    """A set of 64-bit keys that remembers at least the last ``capacity`` added."""

    __slots__ = ("capacity", "_mask", "_current", "_previous", "_count")

    def __init__(self, capacity: int) -> None:
        slots = table_slots(capacity)
        self.capacity = capacity
        self._mask = slots - 1
        self._current = array("Q", bytes(8 * slots))
        self._previous = array("Q", bytes(8 * slots))
        self._count = 0  # keys in the current table

    def __len__(self) -> int:
        """Keys remembered (those of both generations)."""
        return self._count + sum(1 for k in self._previous if k)

    def __contains__(self, key: int) -> bool:
        key = (key & _MASK64) or 1  # 0 marks an empty slot
        mask = self._mask
        home = i = (key ^ (key >> 32)) & mask
        table = self._current  # the two generations' probes unrolled: ~0.2 us less
        while k := table[i]:
            if k == key:
                return True
            i = (i + 1) & mask
        table, i = self._previous, home
        while k := table[i]:
            if k == key:
                return True
            i = (i + 1) & mask
        return False

    def add(self, key: int) -> None:
        """Remember ``key``; when the current generation is full, start a new one."""
        key = (key & _MASK64) or 1
        table, mask = self._current, self._mask
        i = (key ^ (key >> 32)) & mask
        while k := table[i]:
            if k == key:
                return
            i = (i + 1) & mask
        table[i] = key
        self._count += 1
        if self._count == self.capacity:
            self._previous = table
            self._current = array("Q", bytes(8 * (mask + 1)))
            self._count = 0
