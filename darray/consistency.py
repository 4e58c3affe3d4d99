"""The protocol's rules across processes: do these exports make one distributed array?

``check_global(exports)`` takes what every engine exported (its id, ``dim_data`` with the
alias expanded, buffer shape and dtype), orders them by grid rank and checks: the same
dimensions, sizes, grid and dtype everywhere; each grid position held once; identical
dimension dictionaries along an axis; blocks adjacent with matching communication padding no
wider than the neighbour's block, ending at ``size``; cyclic starts; unstructured indices in
range and covering every index (once, when ``one_to_one``). A broken rule raises
``InconsistentExport`` naming the engine and the rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from zpar.errors import ZparError

from .maps import BlockMap, map_from_dim_dict


class InconsistentExport(ZparError, ValueError):
    """Exports that do not form one distributed array; ``engine`` broke ``rule``."""

    def __init__(self, engine: Any, rule: str) -> None:
        self.engine = engine
        self.rule = rule
        super().__init__(f"engine {engine}: {rule}")


@dataclass(frozen=True)
class EngineExport:
    engine: Any
    dim_data: tuple[dict[str, Any], ...]
    shape: tuple[int, ...]
    dtype: str


def _comparable(dd: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in dd.items() if k != "padding"}
    if "indices" in out:
        out["indices"] = tuple(int(i) for i in np.asarray(out["indices"]))
    return out


def check_global(exports: Sequence[EngineExport]) -> list[EngineExport]:
    """The exports in grid-rank order (C order), or InconsistentExport."""
    first = exports[0]
    ndim = len(first.dim_data)
    for e in exports:
        if len(e.dim_data) != ndim:
            raise InconsistentExport(
                e.engine, f"{len(e.dim_data)} dimensions, engine {first.engine} has {ndim}"
            )
        if e.dtype != first.dtype:
            raise InconsistentExport(
                e.engine, f"dtype {e.dtype}, engine {first.engine} has {first.dtype}"
            )
        for axis, (dd, d0) in enumerate(zip(e.dim_data, first.dim_data, strict=True)):
            for key in ("dist_type", "size", "proc_grid_size"):
                if dd[key] != d0[key]:
                    raise InconsistentExport(
                        e.engine,
                        f"dimension {axis}: {key} {dd[key]!r}, engine {first.engine} has {d0[key]!r}",
                    )
    grid = tuple(d["proc_grid_size"] for d in first.dim_data)
    if math.prod(grid) != len(exports):
        raise InconsistentExport(
            first.engine,
            f"the process grid {grid} has {math.prod(grid)} positions for {len(exports)} engines",
        )
    by_rank: dict[int, EngineExport] = {}
    for e in exports:
        coords = tuple(d["proc_grid_rank"] for d in e.dim_data)
        rank = int(np.ravel_multi_index(coords, grid)) if ndim else 0
        if rank in by_rank:
            raise InconsistentExport(
                e.engine, f"grid position {coords} is also held by engine {by_rank[rank].engine}"
            )
        by_rank[rank] = e
    ordered = [by_rank[r] for r in range(len(exports))]
    for axis in range(ndim):
        _check_axis(axis, ordered, grid)
    return ordered


def _check_axis(axis: int, ordered: Sequence[EngineExport], grid: tuple[int, ...]) -> None:
    along: dict[int, EngineExport] = {}
    for e in ordered:
        dd = e.dim_data[axis]
        r = dd["proc_grid_rank"]
        if r in along:
            ref = along[r].dim_data[axis]
            if _comparable(dd) != _comparable(ref):
                raise InconsistentExport(
                    e.engine,
                    f"dimension {axis}: its dictionary differs from engine {along[r].engine}'s at the same grid rank {r}",
                )
        else:
            along[r] = e
    chain = [along[r] for r in range(grid[axis])]
    kind = chain[0].dim_data[axis]["dist_type"]
    if kind == "b":
        _check_blocks(axis, chain)
    elif kind == "u":
        _check_unstructured(axis, chain)
    # cyclic: start == rank * block_size and the buffer lengths were checked per export;
    # the block size must agree along the axis:
    if kind == "c":
        sizes = {e.dim_data[axis].get("block_size", 1) for e in chain}
        if len(sizes) > 1:
            raise InconsistentExport(
                chain[-1].engine,
                f"dimension {axis}: block sizes differ along the axis: {sorted(sizes)}",
            )


def _check_blocks(axis: int, chain: Sequence[EngineExport]) -> None:
    maps = [map_from_dim_dict(e.dim_data[axis]) for e in chain]
    assert all(isinstance(m, BlockMap) for m in maps)
    size = maps[0].size
    for i, (e, m) in enumerate(zip(chain, maps, strict=True)):
        if i + 1 < len(maps):
            nxt = maps[i + 1]
            if m.comm_padding[1] != nxt.comm_padding[0]:
                raise InconsistentExport(
                    e.engine,
                    f"dimension {axis}: right communication padding {m.comm_padding[1]} differs "
                    f"from the next block's left padding {nxt.comm_padding[0]}",
                )
            if m.owned_stop != nxt.owned_start:
                raise InconsistentExport(
                    e.engine,
                    f"dimension {axis}: its block ends at {m.owned_stop} (padding left out) but "
                    f"the next one starts at {nxt.owned_start}: blocks must be adjacent",
                )
            if m.comm_padding[1] > nxt.num_owned() or nxt.comm_padding[0] > m.num_owned():
                raise InconsistentExport(
                    e.engine,
                    f"dimension {axis}: communication padding wider than the neighbour's block",
                )
        elif m.owned_stop != size:
            raise InconsistentExport(
                e.engine,
                f"dimension {axis}: the last block ends at {m.owned_stop}, not at size {size}",
            )


def _check_unstructured(axis: int, chain: Sequence[EngineExport]) -> None:
    size = chain[0].dim_data[axis]["size"]
    # every index must be held somewhere, so a size past the indices that arrived is a
    # claim the exports cannot back: refused before allocating anything of that size
    held = sum(len(e.dim_data[axis]["indices"]) for e in chain)
    if size > held:
        raise InconsistentExport(
            chain[0].engine,
            f"dimension {axis}: size {size} but the engines export only {held} indices "
            "along it: an unstructured dimension's indices must cover its size",
        )
    seen = np.zeros(size, dtype=np.int64)
    one_to_one = any(e.dim_data[axis].get("one_to_one", False) for e in chain)
    for e in chain:
        ix = np.asarray(e.dim_data[axis]["indices"])
        if np.any((ix < 0) | (ix >= size)):
            raise InconsistentExport(
                e.engine, f"dimension {axis}: an unstructured index lies outside 0..{size - 1}"
            )
        seen[ix] += 1
        if one_to_one and np.any(seen[ix] > 1):
            raise InconsistentExport(
                e.engine, f"dimension {axis}: one_to_one but an index is also held elsewhere"
            )
    if not np.all(seen):
        missing = np.flatnonzero(seen == 0)[:5].tolist()
        raise InconsistentExport(
            chain[-1].engine, f"dimension {axis}: no engine holds indices {missing}"
        )
