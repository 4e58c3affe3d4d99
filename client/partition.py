"""How sequences are cut for maps, scatter and @parallel, and joined back.

'b' (block): contiguous parts as equal as possible (numpy.array_split's sizes); 'r'
(round robin): part i is ``seq[i::n]``. Arrays are cut without copying.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

DISTS = ("b", "r")


def partition(n: int, parts: int) -> list[slice]:
    """Block partition of range(n) into `parts` slices as equal as possible (as array_split)."""
    base, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        out.append(slice(start, stop))
        start = stop
    return out


def _lengths(seqs: Sequence[Any]) -> int:
    """The common length of ``seqs``; ValueError if they differ (a @parallel call)."""
    if not seqs:
        raise ValueError("map needs at least one sequence")
    lens = {len(s) for s in seqs}
    if len(lens) > 1:
        raise ValueError(
            f"all sequences must have equal length, but have unequal lengths "
            f"{[len(s) for s in seqs]}"
        )
    return lens.pop()


def _sequence(s: Any) -> Any:
    if isinstance(s, str | bytes):
        return s
    if hasattr(s, "__len__") and hasattr(s, "__getitem__") and not isinstance(s, Mapping):
        return s
    try:
        return list(s)  # a generator, a set, a dict (its keys, as the builtin map)...
    except TypeError:
        raise TypeError(
            f"expected a sequence or an iterable to split, got {type(s).__name__} {s!r:.60}"
        ) from None


def as_sequences(seqs: Sequence[Any]) -> tuple[list[Any], int]:
    """Sequences for a map, as the builtin map sees them: iterables without len read
    into lists, all cut to the shortest. Returns (sequences, length)."""
    if not seqs:
        raise ValueError("map needs at least one sequence")
    out = [_sequence(s) for s in seqs]
    n = min(len(s) for s in out)
    return [s if len(s) == n else s[:n] for s in out], n


def check_dist(dist: str) -> None:
    if dist not in DISTS:
        raise ValueError(f"dist must be 'b' (block) or 'r' (round robin), not {dist!r}")


def split_parts(seq: Any, nparts: int, dist: str = "b") -> list[Any]:
    """``seq`` cut into ``nparts`` parts (some empty when it is short)."""
    check_dist(dist)
    seq = _sequence(seq)
    if dist == "r":
        return [seq[i::nparts] for i in range(nparts)]
    return [seq[sl] for sl in partition(len(seq), nparts)]


def join_parts(parts: list[Any], dist: str = "b") -> Any:
    """Inverse of split_parts: one list (or array, for arrays)."""
    if not parts:
        return []
    arrays = all(isinstance(p, np.ndarray) for p in parts)
    if dist == "r":
        if arrays:
            total = sum(len(p) for p in parts)
            out = np.empty((total, *parts[0].shape[1:]), dtype=np.result_type(*parts))
            for i, p in enumerate(parts):
                out[i :: len(parts)] = p
            return out
        flat: list[Any] = []
        for i in range(max(len(p) for p in parts)):
            flat.extend(p[i] for p in parts if len(p) > i)
        return flat
    if arrays:
        return np.concatenate(parts)
    joined: list[Any] = []
    for p in parts:
        joined.extend(p)
    return joined
