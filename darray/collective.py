"""Operations between the sections of one distributed array, engine to engine over a
communicator with mpi4py's names (``send``, ``recv``, ``sendrecv``, ``allreduce``,
``alltoall``): reductions, halo exchange, redistribution. Communicator rank r holds grid
rank r. Each function runs on every rank at once and works on one rank's LocalArray.

Written against the communicator's interface only, so they are tested in memory with
threads standing in for engines, and on engines with ``zpar.comm``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from .localarray import LocalArray
from .maps import map_from_dim_dict

log = logging.getLogger("zpar.darray")

#: tags of the messages between sections (distinct per operation and direction)
TAG_REDUCE_AXIS = 0x5A52
TAG_HALO_UP = 0x5A53
TAG_HALO_DOWN = 0x5A54

_LOCAL = {"sum": np.sum, "min": np.min, "max": np.max}


def _combine(op: str, a: Any, b: Any) -> Any:
    """Combine two partial results; None stands for a section that owns nothing."""
    if a is None:
        return b
    if b is None:
        return a
    if op == "sum":
        return a + b
    return np.minimum(a, b) if op == "min" else np.maximum(a, b)


def identity(op: str, dtype: np.dtype) -> Any:
    """What a section that owns nothing contributes: the neutral element of ``op``."""
    if op == "sum":
        return dtype.type(0)
    if dtype.kind == "f" or dtype.kind == "c":
        return dtype.type(np.inf if op == "min" else -np.inf)
    if dtype.kind == "b":
        return np.True_ if op == "min" else np.False_
    info = np.iinfo(dtype)
    return dtype.type(info.max if op == "min" else info.min)


def _constant_partial(la: LocalArray, op: str, axis: int | None) -> Any:
    """A constant section's partial without reading its cells: min and max are the value,
    a sum is the sum of one line (numpy's own dtype rules) times the number of lines."""
    c = la.constant_value
    owned_shape = tuple(s.stop - s.start for s in la.owned_key)
    n = int(np.prod(owned_shape)) if axis is None else owned_shape[axis]
    if op == "sum":
        one = np.sum(np.broadcast_to(c, (1,)))
        value = one * one.dtype.type(n)
    else:
        value = c[()]
    if axis is None:
        return value
    rest = owned_shape[:axis] + owned_shape[axis + 1 :]
    return np.full(rest, value, dtype=np.asarray(value).dtype)


def reduce_all(la: LocalArray, comm: Any, op: str, comm_op: Any) -> Any:
    """``op`` ("sum", "min", "max") over every owned cell of the array: each section
    reduces its own cells and the partials meet in ``comm.allreduce(partial, op=comm_op)``
    (``comm_op``: the communicator's SUM / MIN / MAX); every rank gets the result."""
    owned = la.owned_values
    if not owned.size:
        partial = identity(op, owned.dtype)
    elif la.constant_value is not None:
        partial = _constant_partial(la, op, None)
    else:
        partial = _LOCAL[op](owned)
    return comm.allreduce(partial, op=comm_op)


def reduce_axis(
    la: LocalArray, comm: Any, op: str, axis: int, coords_of: Sequence[tuple[int, ...]]
) -> np.ndarray | None:
    """``op`` along ``axis``: each section reduces its owned cells along it, the sections
    in one grid line along ``axis`` send their partial to the line's first position, which
    combines them in grid order. Returns the combined partial on those first positions
    (None elsewhere): it covers the owned cells of the other dimensions, in local order."""
    owned = la.owned_values
    if not owned.shape[axis] and op != "sum":
        partial = None  # min / max of nothing: no partial (a sum of nothing is zeros)
    elif la.constant_value is not None:
        partial = _constant_partial(la, op, axis)
    else:
        partial = _LOCAL[op](owned, axis=axis)
    me = comm.rank
    mine = coords_of[me]
    if mine[axis] != 0:
        root = next(
            r
            for r, c in enumerate(coords_of)
            if c[:axis] + c[axis + 1 :] == mine[:axis] + mine[axis + 1 :] and c[axis] == 0
        )
        comm.send(partial, dest=root, tag=TAG_REDUCE_AXIS)
        return None
    line = sorted(
        (c[axis], r)
        for r, c in enumerate(coords_of)
        if r != me and c[:axis] + c[axis + 1 :] == mine[:axis] + mine[axis + 1 :]
    )
    result = partial
    for _, r in line:
        result = _combine(op, result, comm.recv(source=r, tag=TAG_REDUCE_AXIS))
    if result is None:
        raise ValueError(f"zero-size array to reduction operation {op} which has no identity")
    return result


def exchange_halos(
    la: LocalArray,
    comm: Any,
    coords_of: Sequence[tuple[int, ...]],
    paddings: Sequence[Sequence[tuple[int, int]]],
) -> None:
    """Fill every padded block dimension's padding from the neighbours' owned cells.

    ``paddings[axis][grid_rank]`` is every position's padding along ``axis`` (the edges may
    differ). Communication padding gets the neighbour's nearest owned cells; along a
    periodic dimension the boundary padding wraps: the first position's low padding gets
    the last cells before the last position's high padding, and the reverse. A
    non-periodic boundary padding is left alone (it holds boundary values). Dimensions are
    exchanged one after the other with whole slabs, so corners come out right too.
    """
    mine = coords_of[comm.rank]
    for axis, m in enumerate(la.maps):
        if m.dist_type == "b" and any(p != (0, 0) for p in paddings[axis]):
            _exchange_axis(la, comm, axis, mine, coords_of, paddings[axis])


def _neighbour(
    axis: int,
    mine: tuple[int, ...],
    coords_of: Sequence[tuple[int, ...]],
    p: int,
    periodic: bool,
    c: int,
) -> int | None:
    """The communicator rank at grid coordinate ``c`` along ``axis`` (wrapping if periodic)."""
    if not 0 <= c < p:
        if not periodic:
            return None
        c %= p
    return list(coords_of).index(mine[:axis] + (c,) + mine[axis + 1 :])


def _exchange_axis(
    la: LocalArray,
    comm: Any,
    axis: int,
    mine: tuple[int, ...],
    coords_of: Sequence[tuple[int, ...]],
    pads: Sequence[tuple[int, int]],
) -> None:
    m = la.maps[axis]
    p, r = m.grid_size, m.grid_rank
    periodic = bool(getattr(m, "periodic", False))
    n = la.ndarray.shape[axis]
    up = _neighbour(axis, mine, coords_of, p, periodic, r + 1)
    down = _neighbour(axis, mine, coords_of, p, periodic, r - 1)
    lo, hi = pads[r]
    buf = la.ndarray
    interior = n - lo - hi
    for wraps, width in ((r == p - 1, pads[0][0]), (r == 0, pads[-1][1])):
        if periodic and wraps and width > interior:
            raise ValueError(
                f"periodic dimension {axis}: grid position {r} has {interior} cells inside "
                f"its padding, fewer than the {width} the wrap-around needs; use fewer or "
                "larger blocks"
            )
    before = (slice(None),) * axis
    # phase 1: my last owned cells go up into the next position's low padding
    width_up = pads[(r + 1) % p][0]
    send = buf[before + (slice(n - hi - width_up, n - hi),)] if up is not None else None
    _shift(
        comm,
        send,
        up,
        buf[before + (slice(0, lo),)] if down is not None else None,
        down,
        TAG_HALO_UP,
    )
    # phase 2: my first owned cells go down into the previous position's high padding
    width_down = pads[(r - 1) % p][1]
    send = buf[before + (slice(lo, lo + width_down),)] if down is not None else None
    _shift(
        comm,
        send,
        down,
        buf[before + (slice(n - hi, n),)] if up is not None else None,
        up,
        TAG_HALO_DOWN,
    )


def _shift(
    comm: Any,
    send: np.ndarray | None,
    dest: int | None,
    into: np.ndarray | None,
    source: int | None,
    tag: int,
) -> None:
    """Send the cells ``send`` to ``dest`` and receive ``into`` from ``source`` (either may
    be absent at an edge), as raw buffers (mpi4py's Sendrecv / Send / Recv): contiguous
    regions are received in place, others through a scratch buffer."""
    if dest is not None and dest == source == comm.rank:  # one position along a periodic axis
        into[...] = send  # type: ignore[index]
        return
    sendbuf = np.ascontiguousarray(send) if send is not None else None
    recvbuf = None
    if into is not None:
        recvbuf = into if into.flags.c_contiguous else np.empty(into.shape, dtype=into.dtype)
    if sendbuf is not None and recvbuf is not None:
        comm.Sendrecv(sendbuf, dest=dest, sendtag=tag, recvbuf=recvbuf, source=source, recvtag=tag)
    elif sendbuf is not None:
        comm.Send(sendbuf, dest=dest, tag=tag)
    elif recvbuf is not None:
        comm.Recv(recvbuf, source=source, tag=tag)
    if into is not None and recvbuf is not into:
        into[...] = recvbuf


def redistribute(
    la: LocalArray, comm: Any, new_dim_data: Sequence[Sequence[dict[str, Any]]]
) -> LocalArray:
    """This section's cells sent to their owners under ``new_dim_data`` (every rank's),
    in one all-to-all; returns this rank's new section (padding zero)."""
    me = comm.rank
    mine_g = [m.global_indices() for m in la.maps]
    owned = la.owned_values
    outgoing: list[Any] = []
    for dd in new_dim_data:
        new_maps = [map_from_dim_dict(d) for d in dd]
        src_pos, dst_pos = [], []
        for g_old, nm in zip(mine_g, new_maps, strict=True):
            g_new = nm.global_indices()
            common, i_old, i_new = np.intersect1d(
                g_old, g_new, assume_unique=True, return_indices=True
            )
            src_pos.append(i_old)
            dst_pos.append(i_new)
        if any(len(s) == 0 for s in src_pos):
            outgoing.append(None)
        else:
            outgoing.append((dst_pos, np.ascontiguousarray(owned[np.ix_(*src_pos)])))
    incoming = comm.alltoall(outgoing)
    mine_new = new_dim_data[me]
    new_maps = [map_from_dim_dict(d) for d in mine_new]
    buf = np.zeros(tuple(m.local_len for m in new_maps), dtype=la.dtype)
    result = LocalArray(buf, mine_new)
    target = result.owned
    for item in incoming:
        if item is not None:
            dst_pos, block = item
            target[np.ix_(*dst_pos)] = block
    return result
