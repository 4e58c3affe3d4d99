"""Collectives through the same-host lane's one-call send and receive (zpar.comm.lane):
no requests, no schedule callbacks, for the small cases where the Python around each
message is the cost. Each follows its general algorithm in comm.collectives exactly (same
tags, partners and operand order), so ranks taking either path interoperate. A small
allreduce of a predefined op on a plain dtype runs its rounds in one compiled call
(Lane.allreduce), the Python rounds going on from wherever it stops."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .collectives import _flat
from .lane import COMBINE_DTYPES, COMBINE_OPS
from .ops import PREDEFINED
from .p2p import FAST_WAIT_NS
from .peerwire import CTX_COLL, ENC_RAW, INLINE
from .requests import CommError

if TYPE_CHECKING:
    from .collectives import Collectives
    from .ops import Op


def allreduce_small(coll: Collectives, send: np.ndarray, recv: np.ndarray, op: Op) -> bool:
    """Allreduce of a small array over ranks all on this host, a power of two of them,
    through the lane (its one-call allreduce, else its one-call send and receive; no
    requests, no schedule callbacks): recursive doubling exactly as allreduce_arr's (same
    tag, same partners, lower rank's operand first), so ranks taking either path
    interoperate. ``send`` and ``recv`` are C-contiguous, of one dtype and size. False,
    having done nothing, when it does not apply. Its Python is kept short: with more ranks
    than CPUs, or a busy host, the ranks' calls run one after the other on a CPU, and each
    microsecond here is one per rank on the critical path."""
    n, p2p = coll.size, coll.p2p
    links = p2p.links
    nbytes = send.nbytes
    if (
        n < 2
        or n & (n - 1)
        or not links.futex
        or nbytes >= coll.xsize
        or nbytes > INLINE
        or not op.commute
        or coll.topo.nhosts != 1
        or p2p.broken is not None
    ):
        return False
    coll._begin("recursive_doubling", "short", True)
    tag, lane, rank = coll._seq, links.lane, coll.rank
    mask, sent = 1, False
    code = _CODES.get((op, send.dtype.str), 0)
    if code and not (
        p2p._posted
        or p2p._unexpected
        or links.early
        or p2p._busy
        or p2p._await_sync
        or p2p._filling
    ):
        if recv is not send:
            np.copyto(recv, send.reshape(recv.shape), casting="no")
        got = coll.scratch[:nbytes]
        stop = lane.allreduce(recv, got, n, tag, CTX_COLL, code, FAST_WAIT_NS)
        if stop == -1:  # combined in place into recv by the lane
            return True
        if stop == -2:
            raise CommError(
                f"allreduce: a rank's message is not {nbytes} bytes (the ranks' buffers "
                "differ in size or dtype)"
            )
        mask, sent = 1 << (stop >> 1), bool(stop & 1)
        if lane.wake_peer >= 0:
            links.wake(lane.wake_peer)
        acc = recv.copy()  # what the rounds done so far left
    else:
        acc = send
    got = np.empty_like(acc)
    while mask < n:
        peer = rank ^ mask
        if not sent:
            r = lane.send_eager(peer, acc, tag, CTX_COLL, ENC_RAW)
            if r == 2:
                links.wake(peer)
            elif not r:  # mailbox full, sends queued to it: the general way
                coll._wait([coll._isend(peer, _flat(acc))], "allreduce")
        sent = False
        if p2p.recv_now(peer, tag, CTX_COLL, got) is None:
            coll._wait([coll._irecv(peer, got)], "allreduce")
        acc = op.combine(got, acc) if peer < rank else op.combine(acc, got)
        mask <<= 1
    recv[...] = acc.reshape(recv.shape)
    return True


#: Lane.allreduce's code for (a predefined op, a plain little-endian dtype's str); others
#: combine in the Python rounds
_CODES = {
    (PREDEFINED[name], dt): k * 8 + d
    for name, k in COMBINE_OPS.items()
    for dt, d in COMBINE_DTYPES.items()
}
