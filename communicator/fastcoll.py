"""Collectives through the same-host lane's one-call send and receive (zpar.comm.lane):
no requests, no schedule callbacks, for the small cases where the Python around each
message is the cost. Each follows its general algorithm in comm.collectives exactly (same
tags, partners and operand order), so ranks taking either path interoperate."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .collectives import _flat
from .peerwire import CTX_COLL, ENC_RAW, INLINE

if TYPE_CHECKING:
    from .collectives import Collectives
    from .ops import Op


def allreduce_small(coll: Collectives, send: np.ndarray, recv: np.ndarray, op: Op) -> bool:
    """Allreduce of a small array over ranks all on this host, a power of two of them,
    through the lane's one-call send and receive (no requests, no schedule callbacks):
    recursive doubling exactly as allreduce_arr's (same tag, same partners, lower
    rank's operand first), so ranks taking either path interoperate. False, having
    done nothing, when it does not apply."""
    n, p2p = coll.size, coll.p2p
    links = p2p.links
    if (
        n < 2
        or n & (n - 1)
        or coll.topo.nhosts != 1
        or not op.commute
        or not links.futex
        or send.nbytes >= coll.xsize
        or send.nbytes > INLINE
        or p2p.broken is not None
    ):
        return False
    coll._begin("recursive_doubling", "short", True)
    tag, lane, rank = coll._seq, links.lane, coll.rank
    acc = send
    got = np.empty_like(send)
    mask = 1
    while mask < n:
        peer = rank ^ mask
        r = lane.send_eager(peer, acc, tag, CTX_COLL, ENC_RAW)
        if r == 2:
            links.wake(peer)
        elif not r:  # mailbox full, sends queued to it: the general way
            coll._wait([coll._isend(peer, _flat(acc))], "allreduce")
        if p2p.recv_now(peer, tag, CTX_COLL, got) is None:
            coll._wait([coll._irecv(peer, got)], "allreduce")
        acc = op.combine(got, acc) if peer < rank else op.combine(acc, got)
        mask <<= 1
    recv[...] = acc.reshape(recv.shape)
    return True
