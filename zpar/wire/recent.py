"""RecentKeys: the last N 64-bit keys (each with a small value), in memory fixed at creation.

Every process remembers the signatures it accepted (the replay guard), and the task
scheduler the outcomes of recent tasks (dependencies). As Python sets and dicts these cost
~80-120 bytes an entry and grow until their bound: 65,536 entries are 5-8 MB, reached only
after tens of thousands of tasks, so a process's memory crept up long after start. Here the
keys live in a linear-probing table of machine words (load factor <= 1/2) and a ring that
says which is oldest: 65,536 entries cost 2.1 MB, allocated once. A lookup or an insert is
a few array reads (~1 us in CPython, against ~0.2 us for a set), a handful per task.
"""

from __future__ import annotations

from array import array

_MASK64 = (1 << 64) - 1


def table_slots(capacity: int) -> int:
    """Slots of a linear-probing table for ``capacity`` keys: a power of two >= 2 x
    capacity (load factor <= 1/2: probes stay short)."""
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    return 1 << (2 * capacity - 1).bit_length()


class RecentKeys:
    """A set (or map to ints < 2**32) of the last ``capacity`` keys added; older ones are
    forgotten in the order they came. Keys are ints taken modulo 2**64 (0 stands for 1:
    the table uses 0 for an empty slot)."""

    __slots__ = ("capacity", "_mask", "_keys", "_values", "_ring", "_next", "_size")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        slots = table_slots(capacity)
        self._mask = slots - 1
        self._keys = array("Q", bytes(8 * slots))
        self._values = array("I", bytes(4 * slots))
        self._ring = array("Q", bytes(8 * capacity))  # keys in the order they came
        self._next = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def _slot(self, key: int) -> int:
        """The slot holding ``key``, or the empty slot where it would go."""
        keys, mask = self._keys, self._mask
        i = (key ^ (key >> 32)) & mask
        while True:
            k = keys[i]
            if k == key or k == 0:
                return i
            i = (i + 1) & mask

    def __contains__(self, key: int) -> bool:
        key = (key & _MASK64) or 1
        keys, mask = self._keys, self._mask
        i = (key ^ (key >> 32)) & mask  # _slot inlined: the replay guard asks per message
        while True:
            k = keys[i]
            if k == key:
                return True
            if k == 0:
                return False
            i = (i + 1) & mask

    def get(self, key: int, default: int | None = None) -> int | None:
        key = (key & _MASK64) or 1
        i = self._slot(key)
        return self._values[i] if self._keys[i] == key else default

    def add(self, key: int, value: int = 0) -> None:
        """Remember ``key`` (with ``value``); a key already present keeps its age."""
        key = (key & _MASK64) or 1
        keys, mask = self._keys, self._mask
        i = (key ^ (key >> 32)) & mask  # _slot inlined: the replay guard adds per message
        while True:
            k = keys[i]
            if k == key:
                self._values[i] = value
                return
            if k == 0:
                break
            i = (i + 1) & mask
        if self._size == self.capacity:  # forget the oldest first
            self._delete(self._ring[self._next])
            i = self._slot(key)
        keys[i] = key
        self._values[i] = value
        self._ring[self._next] = key
        self._next = (self._next + 1) % self.capacity
        self._size += 1

    def _delete(self, key: int) -> None:
        """Remove ``key`` and shift back the entries that probed past it (no tombstones)."""
        keys, values, mask = self._keys, self._values, self._mask
        i = self._slot(key)
        if keys[i] != key:
            return
        j = i
        while True:
            j = (j + 1) & mask
            k = keys[j]
            if k == 0:
                break
            home = (k ^ (k >> 32)) & mask
            # k stays if its home slot lies cyclically in (i, j]: it never probed past i
            if (i < home <= j) if i <= j else (home > i or home <= j):
                continue
            keys[i] = k
            values[i] = values[j]
            i = j
        keys[i] = 0
        self._size -= 1
