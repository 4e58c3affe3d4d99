"""Index maps of the Distributed Array Protocol: which global indices a grid position owns.

A ``DimMap`` is one dimension dictionary of one process (block, cyclic / block-cyclic or
unstructured), able to say what it owns and to translate local <-> global indices with numpy,
never element by element. An ``AxisMap`` is one dimension seen from everywhere (the maps of
every grid position along it): it answers "who owns global index g, and where in its buffer".
A ``Distribution`` is the process grid (C order, as the protocol and MPI_Cart_create say) and
one AxisMap per dimension.

Block partitions are the protocol's "evenly distributed block": ``ceil(size / p)`` indices per
position, the last ones short or empty; the published examples (5 over 3 -> 2, 2, 1) and the
protocol's equivalence of block with block-cyclic of block size ``ceil(size / p)`` both say so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

INDEX_DTYPE = np.int64


def block_bounds(size: int, grid_size: int) -> list[int]:
    """The ``grid_size + 1`` bounds of an evenly distributed block dimension."""
    per = -(-size // grid_size) if grid_size else 0
    return [min(r * per, size) for r in range(grid_size)] + [size]


def cyclic_owned_count(size: int, grid_size: int, grid_rank: int, block_size: int = 1) -> int:
    """How many global indices grid position ``grid_rank`` owns under (block-)cyclic.

    The last block may be partial; it belongs to the position ``(nblocks - 1) % grid_size``
    (the protocol's appendix gives it to rank 0, which is wrong unless that is the same one).
    """
    nblocks = -(-size // block_size)
    if grid_rank >= nblocks:
        return 0
    mine = (nblocks - 1 - grid_rank) // grid_size + 1
    count = mine * block_size
    partial = size % block_size
    if partial and (nblocks - 1) % grid_size == grid_rank:
        count -= block_size - partial
    return count


class DimMap:
    """One dimension dictionary of one grid position (the alias ``{}`` already expanded)."""

    dist_type: str

    def __init__(self, dim_dict: dict[str, Any]) -> None:
        self.size = int(dim_dict["size"])
        self.grid_size = int(dim_dict["proc_grid_size"])
        self.grid_rank = int(dim_dict["proc_grid_rank"])

    @property
    def local_len(self) -> int:
        """Length of the local buffer along this dimension (padding included)."""
        raise NotImplementedError

    @property
    def owned_slice(self) -> slice:
        """Where in the local buffer the owned indices are (all of it unless padded)."""
        return slice(0, self.local_len)

    def global_indices(self) -> np.ndarray:
        """Global index of each owned local position, in local order."""
        raise NotImplementedError

    def global_key(self) -> slice | np.ndarray:
        """The owned global indices as a slice when they are evenly spaced, else an array."""
        return self.global_indices()

    def num_owned(self) -> int:
        return len(self.global_indices())

    def dim_dict(self) -> dict[str, Any]:
        """The keys every distribution type has; subclasses add their own after them."""
        return {
            "dist_type": self.dist_type,
            "size": self.size,
            "proc_grid_size": self.grid_size,
            "proc_grid_rank": self.grid_rank,
        }


class BlockMap(DimMap):
    dist_type = "b"

    def __init__(self, dim_dict: dict[str, Any]) -> None:
        super().__init__(dim_dict)
        self.start = int(dim_dict["start"])
        self.stop = int(dim_dict["stop"])
        lo, hi = dim_dict.get("padding", (0, 0))
        self.padding = (int(lo), int(hi))
        self.periodic = bool(dim_dict.get("periodic", False))

    @property
    def comm_padding(self) -> tuple[int, int]:
        """Padding shared with a neighbour (not owned): every side but the grid's ends."""
        lo = self.padding[0] if self.grid_rank > 0 else 0
        hi = self.padding[1] if self.grid_rank < self.grid_size - 1 else 0
        return lo, hi

    @property
    def local_len(self) -> int:
        return self.stop - self.start

    @property
    def owned_start(self) -> int:
        return self.start + self.comm_padding[0]

    @property
    def owned_stop(self) -> int:
        return self.stop - self.comm_padding[1]

    @property
    def owned_slice(self) -> slice:
        lo, hi = self.comm_padding
        return slice(lo, self.local_len - hi)

    def global_indices(self) -> np.ndarray:
        return np.arange(self.owned_start, self.owned_stop, dtype=INDEX_DTYPE)

    def global_key(self) -> slice:
        return slice(self.owned_start, self.owned_stop)

    def num_owned(self) -> int:
        return max(self.owned_stop - self.owned_start, 0)

    def dim_dict(self) -> dict[str, Any]:
        dd = super().dim_dict()
        dd["start"] = self.start
        dd["stop"] = self.stop
        if self.padding != (0, 0):
            dd["padding"] = self.padding
        if self.periodic:
            dd["periodic"] = True
        return dd


class CyclicMap(DimMap):
    """Cyclic (block_size 1) and block-cyclic: blocks dealt round-robin to grid positions."""

    dist_type = "c"

    def __init__(self, dim_dict: dict[str, Any]) -> None:
        super().__init__(dim_dict)
        self.start = int(dim_dict["start"])
        self.block_size = int(dim_dict.get("block_size", 1))

    @property
    def local_len(self) -> int:
        return cyclic_owned_count(self.size, self.grid_size, self.grid_rank, self.block_size)

    def global_indices(self) -> np.ndarray:
        local = np.arange(self.local_len, dtype=INDEX_DTYPE)
        block, offset = np.divmod(local, self.block_size)
        return (block * self.grid_size + self.grid_rank) * self.block_size + offset

    def global_key(self) -> slice | np.ndarray:
        if self.block_size == 1:
            return slice(self.start, self.size, self.grid_size)
        return self.global_indices()

    def num_owned(self) -> int:
        return self.local_len

    def dim_dict(self) -> dict[str, Any]:
        dd = super().dim_dict()
        dd["start"] = self.start
        if self.block_size != 1:
            dd["block_size"] = self.block_size
        return dd


class UnstructuredMap(DimMap):
    dist_type = "u"

    def __init__(self, dim_dict: dict[str, Any]) -> None:
        super().__init__(dim_dict)
        self.indices = np.asarray(dim_dict["indices"]).astype(INDEX_DTYPE, copy=False)
        self.one_to_one = dim_dict.get("one_to_one")

    @property
    def local_len(self) -> int:
        return len(self.indices)

    def global_indices(self) -> np.ndarray:
        return self.indices

    def dim_dict(self) -> dict[str, Any]:
        dd = super().dim_dict()
        dd["indices"] = self.indices
        if self.one_to_one is not None:
            dd["one_to_one"] = bool(self.one_to_one)
        return dd


def owned_dim_dict(m: DimMap) -> dict[str, Any]:
    """The dimension dictionary of a position's owned cells alone: a block without its
    padding (nor periodic), cyclic and unstructured unchanged. What an axis reduction's
    result keeps of each remaining dimension."""
    if isinstance(m, BlockMap):
        return {
            "dist_type": "b",
            "size": m.size,
            "proc_grid_size": m.grid_size,
            "proc_grid_rank": m.grid_rank,
            "start": m.owned_start,
            "stop": m.owned_stop,
        }
    return m.dim_dict()


_MAPS = {"b": BlockMap, "c": CyclicMap, "u": UnstructuredMap}


def expand_alias(dim_dict: dict[str, Any], length: int) -> dict[str, Any]:
    """The protocol's empty dimension dictionary: an undistributed block of ``length``."""
    if dim_dict:
        return dim_dict
    return {
        "dist_type": "b",
        "proc_grid_rank": 0,
        "proc_grid_size": 1,
        "start": 0,
        "stop": length,
        "size": length,
    }


def map_from_dim_dict(dim_dict: dict[str, Any], length: int | None = None) -> DimMap:
    """The map of one dimension dictionary (``length``: the buffer's, to expand ``{}``)."""
    if not dim_dict:
        if length is None:
            raise ValueError("an empty dimension dictionary needs the buffer's length")
        dim_dict = expand_alias(dim_dict, length)
    try:
        cls = _MAPS[dim_dict["dist_type"]]
    except KeyError:
        raise ValueError(f"unknown dist_type {dim_dict.get('dist_type')!r}") from None
    return cls(dim_dict)


class AxisMap:
    """One dimension across its grid positions: owner and local position of each index."""

    def __init__(self, maps: Sequence[DimMap]) -> None:
        self.maps = list(maps)
        first = self.maps[0]
        self.size = first.size
        self.grid_size = first.grid_size
        self.dist_type = first.dist_type
        self.owner = np.full(self.size, -1, dtype=INDEX_DTYPE)
        self.local = np.full(self.size, -1, dtype=INDEX_DTYPE)
        for rank in reversed(range(len(self.maps))):  # first owner wins for duplicates
            m = self.maps[rank]
            g = m.global_indices()
            self.owner[g] = rank
            self.local[g] = np.arange(m.owned_slice.start, m.owned_slice.start + len(g))

    def locate(self, g: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
        """(grid rank, local buffer position) of global index(es) ``g`` (negatives wrap)."""
        g = np.asarray(g, dtype=INDEX_DTYPE)
        if np.any((g < -self.size) | (g >= self.size)):
            raise IndexError(f"index out of range for a dimension of size {self.size}")
        g = np.where(g < 0, g + self.size, g)
        return self.owner[g], self.local[g]


class Distribution:
    """The process grid and one AxisMap per dimension; grid rank r is target r."""

    def __init__(self, dim_data_per_rank: Sequence[Sequence[dict[str, Any]]]) -> None:
        self.dim_data = [tuple(dd) for dd in dim_data_per_rank]
        first = self.dim_data[0]
        self.ndim = len(first)
        self.grid_shape = tuple(int(d["proc_grid_size"]) for d in first)
        self.shape = tuple(int(d["size"]) for d in first)
        self.nprocs = math.prod(self.grid_shape)
        self.local_maps = [[map_from_dim_dict(d) for d in dd] for dd in self.dim_data]
        self.axes = []
        for axis in range(self.ndim):
            along = [None] * self.grid_shape[axis]
            for rank in range(self.nprocs):
                m = self.local_maps[rank][axis]
                along[m.grid_rank] = along[m.grid_rank] or m
            self.axes.append(AxisMap(along))  # type: ignore[arg-type]

    def coords(self, rank: int) -> tuple[int, ...]:
        """Grid coordinates of a rank (C order: the last index varies fastest)."""
        return tuple(int(c) for c in np.unravel_index(rank, self.grid_shape))

    def rank(self, coords: Sequence[int]) -> int:
        return int(np.ravel_multi_index(tuple(coords), self.grid_shape))


def outer_key(keys: Sequence[slice | np.ndarray]) -> tuple[Any, ...]:
    """An index selecting the outer product of per-dimension keys (slices kept as slices
    when no dimension needs an array, so numpy copies without gathering)."""
    if all(isinstance(k, slice) for k in keys):
        return tuple(keys)
    return np.ix_(
        *[np.arange(k.start, k.stop, k.step) if isinstance(k, slice) else k for k in keys]
    )


def global_keys(maps: Sequence[DimMap]) -> list[slice | np.ndarray]:
    """Per dimension, the global indices a position owns (slices where possible)."""
    return [m.global_key() for m in maps]


def owned_piece(full: np.ndarray, maps: Sequence[DimMap]) -> np.ndarray:
    """The part of the global array ``full`` that a position owns, in its local order."""
    if not maps:
        return full[()]
    return full[outer_key(global_keys(maps))]
