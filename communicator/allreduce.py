"""The reduction exchanges of comm.collectives' allreduce, apart from the rule that picks
one (Collectives.allreduce_obj / allreduce_arr): recursive doubling (short arrays, and
Python objects), the ring (long arrays: reduce-scatter then allgather), and the two
phases' local steps (a host's ranks to their master and back). Each runs on the rank's
Collectives, ``coll`` (not imported: it imports us): its tag, its sends and receives on
the collective context, its labels (``last_algorithm``...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .peerwire import CTX_COLL, ENC_PICKLE
from .pending import flat as _flat
from .requests import dumps as _dumps
from .requests import unpickle
from .schedules import recursive_doubling as _recursive_doubling

if TYPE_CHECKING:
    from .ops import Op


def local_reduce(coll: Any, arr: np.ndarray, op: Op) -> tuple[list[int], np.ndarray] | None:
    """Two-phase first step: local ranks to their master. (masters, partial) on a
    master, None elsewhere."""
    coll._begin("linear", two_phase=coll.topo.shared)
    master = coll.topo.master_of(coll.rank)
    if coll.rank != master:
        coll._wait([coll._isend(master, _flat(np.ascontiguousarray(arr)))], "local reduce")
        return None
    acc = arr
    for r in coll.topo.local_ranks(coll.rank)[1:]:
        b = np.empty_like(arr)
        coll._wait([coll._irecv(r, b)], "local reduce")
        acc = op.combine(acc, b)
    return coll.topo.masters, np.ascontiguousarray(acc)


def local_bcast(coll: Any, acc: np.ndarray | None, like: np.ndarray) -> np.ndarray:
    master = coll.topo.master_of(coll.rank)
    if coll.rank != master:
        out = np.empty_like(like)
        coll._wait([coll._irecv(master, out)], "local bcast")
        return out
    assert acc is not None
    sends = [coll._isend(r, _flat(acc)) for r in coll.topo.local_ranks(coll.rank)[1:]]
    coll._wait(sends, "local bcast")
    return acc


def recursive_doubling_arr(coll: Any, arr: np.ndarray, op: Op, group: list[int]) -> np.ndarray:
    coll._label("recursive_doubling", "short", coll.topo.shared)

    def exchange(peer: int, val: np.ndarray) -> np.ndarray:
        got = np.empty_like(val)
        coll._sendrecv_arr(peer, _flat(val), peer, got)
        return got

    return _recursive_doubling(
        group,
        coll.rank,
        arr,
        exchange,
        lambda lo, hi: np.ascontiguousarray(op.combine(lo, hi)),
        _send_wait(coll),
        _recv_like(coll, arr),
    )


def _send_wait(coll: Any) -> Callable[[int, Any], None]:
    def send(dest: int, val: Any) -> None:
        coll._wait([coll._isend(dest, _flat(val))], "allreduce")

    return send


def _recv_like(coll: Any, like: np.ndarray) -> Callable[[int], np.ndarray]:
    def recv(src: int) -> np.ndarray:
        out = np.empty_like(like)
        if coll.p2p.recv_now(src, coll._seq, CTX_COLL, out) is None:
            coll._wait([coll._irecv(src, out)], "allreduce")
        return out

    return recv


def recursive_doubling_obj(coll: Any, obj: Any, op: Op) -> Any:
    coll._begin("recursive_doubling", "short", False)
    group = list(range(coll.size))

    def exchange(peer: int, val: Any) -> Any:
        r = coll._irecv(peer)
        s = coll._isend(peer, _dumps(val), ENC_PICKLE)
        coll._wait([r, s], "allreduce")
        return unpickle(r)

    def send(dest: int, val: Any) -> None:
        coll._wait([coll._isend(dest, _dumps(val), ENC_PICKLE)], "allreduce")

    def recv(src: int) -> Any:
        r = coll._irecv(src)
        coll._wait([r], "allreduce")
        return unpickle(r)

    return _recursive_doubling(group, coll.rank, obj, exchange, op, send, recv)


def ring_allreduce(coll: Any, arr: np.ndarray, op: Op, group: list[int]) -> np.ndarray:
    """Reduce-scatter then allgather around the ring of ``group`` (each rank sends
    2(n-1)/n of the array in all: the bandwidth-optimal choice for long arrays)."""
    coll._label("ring", "long", coll.topo.shared)
    n = len(group)
    i = group.index(coll.rank)
    right, left = group[(i + 1) % n], group[(i - 1) % n]
    acc = np.ascontiguousarray(arr).reshape(-1).copy()
    cuts = np.linspace(0, acc.size, n + 1).astype(int)
    seg = [acc[cuts[k] : cuts[k + 1]] for k in range(n)]
    for step in range(n - 1):
        s, r = (i - step) % n, (i - step - 1) % n
        got = np.empty_like(seg[r])
        coll._sendrecv_arr(right, _flat(seg[s]), left, got)
        seg[r][...] = op.combine(got, seg[r])
    for step in range(n - 1):
        s, r = (i + 1 - step) % n, (i - step) % n
        coll._sendrecv_arr(right, _flat(seg[s]), left, seg[r])
    return acc.reshape(arr.shape)
