"""Two-phase gather, scatter, allgather, alltoall and scan: host representatives first,
then the ranks of each host (seed 003 §4.2's masters; barrier, bcast and the reductions
do it in comm.collectives through Topology.tree).

A host's *representative* in a rooted collective is the root on the root's host and the
host's master (its lowest rank) elsewhere. Between hosts only representatives talk, one
message per edge of a linear or binomial tree over them (``coll_maxlinear``), carrying
every item of the hosts below that edge; within a host each rank talks to its
representative only. So a gather over h hosts of k ranks each costs the root h - 1
messages instead of hk - 1, and an alltoall h(h - 1) messages between hosts instead of
hk(hk - 1). Items travel as pickled ``{rank: item}`` maps: arrays take this path only when
short (below ``coll_xsize``), where the number of messages is the cost; a long array moves
straight to or from the root, each byte once.

Scan needs each host's ranks to be consecutive (what grouping by hostname gives when the
engines of a host were started together): then a host's ranks are one stretch of the
prefix, masters scan their host totals among themselves, and each master finishes its
stretch. Otherwise scan stays single-phase.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from .peerwire import ENC_PICKLE
from .requests import unpickle
from .schedules import subtree_span as _subtree_span
from .topology import group_tree


class TwoPhase:
    """The two-phase forms of one rank's collectives; ``applies`` says when to use them."""

    def __init__(self, coll: Any) -> None:
        """``coll``: the rank's comm.collectives.Collectives (not imported: it imports us)."""
        self.c = coll
        self.topo = coll.topo
        self.rank = coll.rank
        #: every host's ranks are consecutive (scan may run in two phases)
        self.consecutive = all(
            ranks == list(range(ranks[0], ranks[0] + len(ranks)))
            for ranks in self.topo.locals.values()
        )

    @property
    def applies(self) -> bool:
        """Several hosts, and some host with several ranks (one host: no global phase, the
        single-phase algorithms are the local phase)."""
        return self.topo.shared and self.topo.nhosts > 1

    # -- plumbing ---------------------------------------------------------------------------

    def _send(self, dest: int, obj: Any) -> Any:
        return self.c._isend(dest, pickle.dumps(obj, protocol=5), ENC_PICKLE)

    def _recv_all(self, sources: list[int], what: str) -> list[Any]:
        ops = [self.c._irecv(s) for s in sources]
        self.c._wait(ops, what)
        return [unpickle(op) for op in ops]

    def _rep_of(self, r: int, root: int) -> int:
        host = self.topo.host_of
        return root if host[r] == host[root] else self.topo.master_of(r)

    def _my_locals(self, rep: int) -> list[int]:
        """The other ranks of my host, which report to (or hear from) ``rep``."""
        return [r for r in self.topo.local_ranks(self.rank) if r != rep]

    def _begin(self) -> None:
        self.c._begin(self.c._tree_name(), "short", True)

    # -- gather / scatter -------------------------------------------------------------------

    def gather(self, obj: Any, root: int) -> dict[int, Any] | None:
        """Every rank's item on ``root`` as {rank: item}; None elsewhere."""
        self._begin()
        me = self.rank
        rep = self._rep_of(me, root)
        if me != rep:
            self.c._wait([self._send(rep, obj)], "gather (local)")
            return None
        items = {me: obj}
        locals_ = self._my_locals(rep)
        for r, item in zip(locals_, self._recv_all(locals_, "gather (local)"), strict=True):
            items[r] = item
        parent, children = group_tree(self.topo.reps(root), me, self.c.logarithmic)
        for sub in self._recv_all(children, "gather (hosts)"):
            items.update(sub)
        if parent is not None:
            self.c._wait([self._send(parent, items)], "gather (hosts)")
            return None
        return items

    def scatter(self, items: dict[int, Any] | None, root: int) -> Any:
        """The root's {rank: item} spread: each rank gets its own item."""
        self._begin()
        me = self.rank
        rep = self._rep_of(me, root)
        if me != rep:
            return self._recv_all([rep], "scatter (local)")[0]
        reps = self.topo.reps(root)
        binomial = self.c.logarithmic
        parent, children = group_tree(reps, me, binomial)
        if parent is not None:
            items = self._recv_all([parent], "scatter (hosts)")[0]
        assert items is not None
        sends = []
        host = self.topo.host_of
        for child in children:
            i = reps.index(child)
            hosts = {host[r] for r in reps[i : i + _subtree_span(i, len(reps), binomial)]}
            sends.append(self._send(child, {r: v for r, v in items.items() if host[r] in hosts}))
        sends += [self._send(r, items[r]) for r in self._my_locals(rep)]
        self.c._wait(sends, "scatter")
        return items[me]

    # -- alltoall ---------------------------------------------------------------------------

    def alltoall(self, objs: list[Any]) -> list[Any]:
        """Each rank's list to its master; masters exchange, pairwise, the items from their
        host to each other host; each master hands its ranks what is theirs."""
        self.c._begin("pairwise", "short", True)
        me, size = self.rank, self.c.size
        master = self.topo.master_of(me)
        if me != master:
            self.c._wait([self._send(master, objs)], "alltoall (local)")
            got = self._recv_all([master], "alltoall (local)")[0]
            return [got[s] for s in range(size)]
        mine = self.topo.local_ranks(me)
        lists = {me: objs}
        others = mine[1:]
        lists.update(zip(others, self._recv_all(others, "alltoall (local)"), strict=True))
        # incoming[dst][src]: what rank src sends to rank dst, for each dst of my host
        incoming: dict[int, dict[int, Any]] = {d: {s: lists[s][d] for s in mine} for d in mine}
        masters = self.topo.masters
        h, i = len(masters), masters.index(me)
        for step in range(1, h):
            dest, src = masters[(i + step) % h], masters[(i - step) % h]
            theirs = self.topo.local_ranks(dest)
            out = {(s, d): lists[s][d] for s in mine for d in theirs}
            r = self.c._irecv(src)
            self.c._wait([r, self._send(dest, out)], "alltoall (hosts)")
            for (s, d), item in unpickle(r).items():
                incoming[d][s] = item
        self.c._wait([self._send(d, incoming[d]) for d in others], "alltoall (local)")
        return [incoming[me][s] for s in range(size)]

    # -- scan -------------------------------------------------------------------------------

    def scan(self, obj: Any, combine: Callable[[Any, Any], Any]) -> tuple[Any, Any, bool]:
        """(inclusive prefix, exclusive prefix, whether there is an exclusive one) of this
        rank; needs ``consecutive`` hosts. ``combine(lower, higher)``."""
        self.c._begin("linear", "short", True)
        me = self.rank
        master = self.topo.master_of(me)
        if me != master:
            self.c._wait([self._send(master, obj)], "scan (local)")
            return self._recv_all([master], "scan (local)")[0]
        mine = self.topo.local_ranks(me)
        vals = [obj, *self._recv_all(mine[1:], "scan (local)")]
        local = [vals[0]]
        for v in vals[1:]:
            local.append(combine(local[-1], v))
        # masters: an exclusive scan of host totals, in rank order (hosts are consecutive)
        masters = self.topo.masters
        k = masters.index(me)
        before, have = None, False
        if k > 0:
            before, have = self._recv_all([masters[k - 1]], "scan (hosts)")[0], True
        if k + 1 < len(masters):
            total = combine(before, local[-1]) if have else local[-1]
            self.c._wait([self._send(masters[k + 1], total)], "scan (hosts)")
        answers = []
        for j in range(len(mine)):
            incl = combine(before, local[j]) if have else local[j]
            if j == 0:
                answers.append((incl, before, have))
            else:
                prev = combine(before, local[j - 1]) if have else local[j - 1]
                answers.append((incl, prev, True))
        sends = [self._send(r, answers[j]) for j, r in enumerate(mine) if j]
        self.c._wait(sends, "scan (local)")
        return answers[0]
