"""Who meets whom in the collectives, apart from any socket: recursive doubling over a
group, the span of a binomial subtree, a buffer cut in equal blocks."""

from __future__ import annotations

import numpy as np


def recursive_doubling(group, me, val, exchange, combine, send, recv):  # noqa: ANN001, ANN202
    """Allreduce by recursive doubling over ``group`` (MPICH's scheme for any size: the
    first 2*rem members pair up so a power of two take part, then hand the result back).
    Both partners combine lower-index operand first, so every rank gets identical bits."""
    n = len(group)
    i = group.index(me)
    pof2 = 1 << (n.bit_length() - 1)
    rem = n - pof2
    if i < 2 * rem:
        if i % 2 == 0:
            send(group[i + 1], val)
            return recv(group[i + 1])
        val = combine(recv(group[i - 1]), val)
        newrank = i // 2
    else:
        newrank = i - rem
    mask = 1
    while mask < pof2:
        pn = newrank ^ mask
        pi = pn * 2 + 1 if pn < rem else pn + rem
        got = exchange(group[pi], val)
        val = combine(got, val) if pi < i else combine(val, got)
        mask <<= 1
    if i < 2 * rem:
        send(group[i - 1], val)
    return val


def subtree_span(i: int, n: int, binomial: bool = True) -> int:
    """How many members from index i on a node's subtree covers in topology.group_tree."""
    if i == 0:
        return n
    if not binomial:
        return 1
    return min(i & -i, n - i)


def blocks(buf: np.ndarray, n: int, what: str) -> list[np.ndarray]:
    flat = buf.reshape(-1)
    if flat.size % n:
        raise ValueError(f"{what}: buffer of {flat.size} elements does not split in {n} blocks")
    per = flat.size // n
    return [flat[k * per : (k + 1) * per] for k in range(n)]
