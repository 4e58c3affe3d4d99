"""From what a user asks for (shape, ``dist``, grid, padding, periodic) to every grid
position's ``dim_data``: the client decides the whole distribution, engines only allocate.

``dist`` has one entry per dimension: ``"b"`` (even blocks), ``("b", bounds)`` (irregular
blocks: the start of each block and the end), ``"c"`` (cyclic), ``("c", block_size)``
(block-cyclic), ``("u", indices)`` (one index array per grid position) and ``"n"`` (not
distributed: a block dimension on a grid of size 1, as the protocol puts it).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .maps import INDEX_DTYPE, block_bounds


@dataclass(frozen=True)
class DimSpec:
    """One dimension's distribution, normalised; ``param`` is bounds, block size or indices."""

    kind: str  # "b", "c", "u", "n"
    param: Any = None

    def fixed_grid(self) -> int | None:
        """The grid size this distribution implies by itself, if any."""
        if self.kind == "n":
            return 1
        if self.kind == "b" and self.param is not None:
            return len(self.param) - 1
        if self.kind == "u":
            return len(self.param)
        return None


def parse_dist(dist: Any, shape: tuple[int, ...]) -> list[DimSpec]:
    """One DimSpec per dimension; ``None`` means blocks along the first dimension only."""
    ndim = len(shape)
    if dist is None:
        return [DimSpec("b")] + [DimSpec("n")] * (ndim - 1) if ndim else []
    if isinstance(dist, str):
        dist = (dist,) + ("n",) * (ndim - 1) if ndim else ()
    elif ndim == 1 and _looks_like_one_entry(dist):
        dist = (dist,)
    dist = list(dist)
    if len(dist) != ndim:
        raise ValueError(f"dist has {len(dist)} entries for an array of {ndim} dimensions")
    return [_one_spec(i, d, shape[i]) for i, d in enumerate(dist)]


def _looks_like_one_entry(d: Any) -> bool:
    """``("c", 2)`` for a 1-d array is one entry, not two."""
    return (
        isinstance(d, tuple | list)
        and len(d) == 2
        and d[0] in ("b", "c", "u")
        and not isinstance(d[1], str)
    )


def _one_spec(axis: int, d: Any, size: int) -> DimSpec:
    if isinstance(d, str):
        if d not in ("b", "c", "n"):
            raise ValueError(
                f"dist[{axis}] = {d!r}: use 'b', 'c', 'n', ('b', bounds), ('c', block_size) or ('u', indices)"
            )
        return DimSpec(d)
    if not (isinstance(d, tuple | list) and len(d) == 2 and d[0] in ("b", "c", "u")):
        raise ValueError(
            f"dist[{axis}] = {d!r}: use 'b', 'c', 'n', ('b', bounds), ('c', block_size) or ('u', indices)"
        )
    kind, param = d
    if kind == "b":
        bounds = [int(b) for b in param]
        if (
            len(bounds) < 2
            or bounds[0] != 0
            or bounds[-1] != size
            or any(a > b for a, b in zip(bounds, bounds[1:], strict=False))
        ):
            raise ValueError(f"dist[{axis}]: bounds {bounds} must rise from 0 to the size {size}")
        return DimSpec("b", tuple(bounds))
    if kind == "c":
        if int(param) < 1:
            raise ValueError(f"dist[{axis}]: block size {param} must be >= 1")
        return DimSpec("c", int(param))
    arrays = [np.asarray(ix).astype(INDEX_DTYPE) for ix in param]
    if not arrays:
        raise ValueError(f"dist[{axis}]: unstructured needs one index array per grid position")
    for pos, ix in enumerate(arrays):
        if ix.ndim != 1:
            raise ValueError(f"dist[{axis}]: indices of grid position {pos} are not 1-d")
        if len(np.unique(ix)) != len(ix):
            raise ValueError(f"dist[{axis}]: indices of grid position {pos} repeat an index")
    every = np.concatenate(arrays)
    if np.any((every < 0) | (every >= size)):
        raise ValueError(f"dist[{axis}]: an index lies outside 0..{size - 1}")
    if len(np.unique(every)) != len(every):
        raise ValueError(f"dist[{axis}]: an index is given to two grid positions")
    if len(every) != size:
        raise ValueError(f"dist[{axis}]: the indices cover {len(every)} of {size} positions")
    return DimSpec("u", tuple(arrays))


def choose_grid(shape: tuple[int, ...], specs: Sequence[DimSpec], nprocs: int) -> tuple[int, ...]:
    """A grid over ``nprocs`` positions: fixed sizes kept, the rest factored so that the
    blocks come out as square as possible (largest factors to the largest dimensions)."""
    fixed = [s.fixed_grid() for s in specs]
    known = math.prod(f for f in fixed if f is not None)
    free = [i for i, f in enumerate(fixed) if f is None]
    if nprocs % known:
        raise ValueError(f"the distribution needs a multiple of {known} engines, got {nprocs}")
    left = nprocs // known
    grid = [f if f is not None else 1 for f in fixed]
    if not free:
        if left != 1:
            raise ValueError(f"the distribution fills {known} grid positions, not {nprocs}")
        return tuple(grid)
    factors = _prime_factors(left)
    for p in sorted(factors, reverse=True):  # give each factor to the longest blocks
        best = max(free, key=lambda i: (shape[i] / grid[i], -i))
        grid[best] *= p
    return tuple(grid)


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def check_grid(grid_shape: Sequence[int], specs: Sequence[DimSpec], nprocs: int) -> tuple[int, ...]:
    grid = tuple(int(g) for g in grid_shape)
    if len(grid) != len(specs):
        raise ValueError(f"grid_shape {grid} has {len(grid)} entries for {len(specs)} dimensions")
    if math.prod(grid) != nprocs:
        raise ValueError(f"grid_shape {grid} has {math.prod(grid)} positions for {nprocs} engines")
    for axis, (g, s) in enumerate(zip(grid, specs, strict=True)):
        f = s.fixed_grid()
        if g < 1 or (f is not None and f != g):
            raise ValueError(f"grid_shape[{axis}] = {g} but dist[{axis}] needs {f}")
    return grid


def dim_data_for_all(
    shape: tuple[int, ...],
    specs: Sequence[DimSpec],
    grid: tuple[int, ...],
    padding: Sequence[tuple[int, int]] | None,
    periodic: Sequence[bool] | None,
) -> list[tuple[dict[str, Any], ...]]:
    """The ``dim_data`` of every grid rank (C order)."""
    ndim = len(shape)
    padding = [(0, 0)] * ndim if padding is None else [(int(a), int(b)) for a, b in padding]
    periodic = [False] * ndim if periodic is None else [bool(p) for p in periodic]
    if len(padding) != ndim or len(periodic) != ndim:
        raise ValueError(f"padding and periodic need one entry per dimension ({ndim})")
    per_axis = [
        [
            _dim_dict(axis, shape[axis], specs[axis], grid[axis], r, padding[axis], periodic[axis])
            for r in range(grid[axis])
        ]
        for axis in range(ndim)
    ]
    # itertools.product runs the last coordinate fastest: grid ranks in C order
    return [
        tuple(dict(per_axis[a][c]) for a, c in enumerate(coords))
        for coords in itertools.product(*(range(g) for g in grid))
    ]


def _dim_dict(
    axis: int, size: int, spec: DimSpec, p: int, r: int, pad: tuple[int, int], periodic: bool
) -> dict[str, Any]:
    common = {"size": size, "proc_grid_size": p, "proc_grid_rank": r}
    if spec.kind in ("b", "n"):
        bounds = list(spec.param) if spec.param else block_bounds(size, p)
        lo, hi = pad
        if lo < 0 or hi < 0:
            raise ValueError(f"padding[{axis}] = {pad} is negative")
        if p > 1 and (lo or hi) and lo != hi:
            raise ValueError(
                f"padding[{axis}] = {pad}: between neighbours the protocol needs equal widths "
                "(the right padding of one block equals the left of the next)"
            )
        comm_lo = lo if r > 0 else 0
        comm_hi = hi if r < p - 1 else 0
        start, stop = bounds[r] - comm_lo, bounds[r + 1] + comm_hi
        if (lo or hi) and (bounds[r + 1] - bounds[r] < max(lo, hi) or start < 0 or stop > size):
            raise ValueError(f"padding[{axis}] = {pad} is wider than a block of {bounds}")
        if periodic and (lo or hi):
            edge = bounds[r + 1] - bounds[r] - (lo if r == 0 else 0) - (hi if r == p - 1 else 0)
            if (r == 0 and edge < hi) or (r == p - 1 and edge < lo):
                raise ValueError(
                    f"padding[{axis}] = {pad}, periodic: an edge block of {bounds} has {edge} "
                    "cells inside its padding, too few to wrap around; use fewer engines "
                    "along this dimension"
                )
        dd = {"dist_type": "b", **common, "start": start, "stop": stop}
        if pad != (0, 0):
            dd["padding"] = (lo, hi)
        if periodic:
            dd["periodic"] = True
        return dd
    if pad != (0, 0) or periodic:
        raise ValueError(f"dimension {axis}: padding and periodic apply to block dimensions only")
    if spec.kind == "c":
        bs = spec.param or 1
        dd = {"dist_type": "c", **common, "start": r * bs}
        if bs != 1:
            dd["block_size"] = bs
        return dd
    return {"dist_type": "u", **common, "indices": spec.param[r]}


def as_shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    """A shape as a tuple of ints (an int is one dimension); negative sizes refused."""
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    if any(int(n) < 0 for n in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return tuple(int(n) for n in shape)


def plan(
    shape: int | Sequence[int],
    dist: Any,
    grid_shape: Sequence[int] | None,
    padding: Any,
    periodic: Any,
    nprocs: int,
) -> tuple[tuple[int, ...], list[tuple[dict[str, Any], ...]]]:
    """The shape and every grid rank's ``dim_data`` of an array over ``nprocs`` engines:
    what a constructor and ``redistribute`` both decide before anything is sent."""
    shape = as_shape(shape)
    specs = parse_dist(dist, shape)
    if grid_shape is None:
        grid = choose_grid(shape, specs, nprocs)
    else:
        grid = check_grid(grid_shape, specs, nprocs)
    return shape, dim_data_for_all(shape, specs, grid, padding, periodic)
