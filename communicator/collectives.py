"""The collective algorithms and the rules that pick one (seed 003 chapter 4, issue 16).

- hosts < coll_maxlinear: *linear* (the root talks to every host); else *logarithmic*: a
  binomial tree, recursive doubling (short allreduce / allgather) or a ring (long allreduce
  over arrays, allgather on a non-power-of-two group).
- payload < coll_xsize bytes: *short* (one message per edge); else *long*: arrays are cut in
  chunks of ``chunk`` bytes and each chunk goes down (or up) the tree as soon as it arrives,
  so the tree's levels work at once (a pipeline).
- ranks sharing a host: *two-phase*: host masters first, then their local ranks (only for
  commutative reductions: regrouping by host changes the order of operands).

Every collective call takes the next tag of the collective context, so the messages of two
successive collectives never match each other. Python objects travel pickled; arrays raw.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from .allreduce import (
    local_bcast,
    local_reduce,
    recursive_doubling_arr,
    recursive_doubling_obj,
    ring_allreduce,
)
from .ops import Op
from .p2p import P2P
from .peerwire import CTX_COLL, ENC_PICKLE, ENC_RAW, INLINE
from .pending import flat as _flat
from .requests import dumps as _dumps
from .requests import unpickle
from .schedules import blocks as _blocks
from .schedules import subtree_span as _subtree_span
from .topology import Topology, group_tree
from .twophase import TwoPhase


class Collectives:
    """Collective operations of one rank; ``last_algorithm`` names the algorithm of the
    last call ("linear", "binomial", "recursive_doubling", "ring", "pairwise")."""

    def __init__(
        self, p2p: P2P, topo: Topology, *, coll_xsize: int, coll_maxlinear: int, chunk: int
    ) -> None:
        self.p2p, self.topo = p2p, topo
        self.rank, self.size = p2p.rank, p2p.size
        self.xsize, self.maxlinear, self.chunk = coll_xsize, coll_maxlinear, max(1, chunk)
        self._seq = 0
        #: the receive buffer of the lane's one-call allreduce (fastcoll): a collective's
        #: calls never overlap, so one serves them all
        self.scratch = memoryview(bytearray(INLINE))
        self.last_algorithm = ""
        self.last_protocol = ""
        self.last_two_phase = False
        self.two = TwoPhase(self)

    # -- plumbing ---------------------------------------------------------------------------

    def _begin(self, algorithm: str, protocol: str = "short", two_phase: bool = False) -> None:
        self._seq = (self._seq + 1) & 0x7FFFFFFF
        self.last_algorithm, self.last_protocol = algorithm, protocol
        self.last_two_phase = two_phase

    def _label(self, algorithm: str, protocol: str, two_phase: bool) -> None:
        self.last_algorithm, self.last_protocol = algorithm, protocol
        self.last_two_phase = two_phase

    @property
    def logarithmic(self) -> bool:
        return self.topo.nhosts >= self.maxlinear

    def _tree_name(self) -> str:
        return "binomial" if self.logarithmic else "linear"

    def _isend(self, dest: int, data: Any, enc: int = ENC_RAW) -> Any:
        return self.p2p.post_send(dest, data, self._seq, CTX_COLL, enc)

    def _irecv(self, src: int, buf: Any = None) -> Any:
        return self.p2p.post_recv(src, self._seq, CTX_COLL, buf)

    def _wait(self, ops: list[Any], what: str) -> None:
        self.p2p.wait(ops, what)

    def _sendrecv_arr(self, dest: int, send: Any, src: int, recv: Any) -> None:
        p2p = self.p2p
        if p2p.send_now(dest, send, self._seq, CTX_COLL, ENC_RAW):  # same host, small
            if p2p.recv_now(src, self._seq, CTX_COLL, recv) is None:
                self._wait([self._irecv(src, recv)], "collective exchange")
            return
        r = self._irecv(src, recv)
        s = self._isend(dest, send)
        self._wait([r, s], "collective exchange")

    # -- barrier ----------------------------------------------------------------------------

    def barrier(self) -> None:
        two = self.topo.shared
        self._begin(self._tree_name(), two_phase=two)
        parent, children = self.topo.tree(0, self.logarithmic, two, self.maxlinear)
        self._wait([self._irecv(c) for c in children], "barrier (fan-in)")
        if parent is not None:
            self._wait([self._isend(parent, b"")], "barrier")
            self._wait([self._irecv(parent)], "barrier (fan-out)")
        self._wait([self._isend(c, b"") for c in children], "barrier")

    # -- broadcast --------------------------------------------------------------------------

    def bcast_obj(self, obj: Any, root: int) -> Any:
        two = self.topo.shared
        self._begin(self._tree_name(), two_phase=two)
        parent, children = self.topo.tree(root, self.logarithmic, two, self.maxlinear)
        if parent is None:
            data: Any = _dumps(obj)
        else:
            r = self._irecv(parent)
            self._wait([r], "bcast")
            data = r.data
        self._wait([self._isend(c, data, ENC_PICKLE) for c in reversed(children)], "bcast")
        return obj if parent is None else pickle.loads(data)

    def bcast_arr(self, arr: np.ndarray, root: int) -> None:
        """Fill ``arr`` everywhere with the root's; long arrays pipelined in chunks."""
        two = self.topo.shared
        view = _flat(arr)
        long = len(view) >= self.xsize
        self._begin(self._tree_name(), "long" if long else "short", two)
        parent, children = self.topo.tree(root, self.logarithmic, two, self.maxlinear)
        step = self.chunk if long else max(1, len(view))
        pieces = [view[i : i + step] for i in range(0, len(view), step)] or [view]
        recvs = [self._irecv(parent, p) for p in pieces] if parent is not None else []
        sends = []
        for k, piece in enumerate(pieces):
            if recvs:
                self._wait([recvs[k]], "Bcast")
            sends += [self._isend(c, piece) for c in reversed(children)]
        self._wait(sends, "Bcast")

    # -- reduction --------------------------------------------------------------------------

    def _reduce_tree(self, root: int, op: Op) -> tuple[int | None, list[int], int | None]:
        """The tree a reduction to ``root`` climbs, and where its top must forward the
        result when the tree's root is not ``root`` (non-commutative ops keep rank order:
        a flat tree rooted at rank 0, then 0 sends to root)."""
        if op.commute:
            return (*self.topo.tree(root, self.logarithmic, self.topo.shared, self.maxlinear), None)
        parent, children = group_tree(list(range(self.size)), self.rank, self.logarithmic)
        return parent, children, (root if root != 0 else None)

    def reduce_obj(self, obj: Any, op: Op, root: int) -> Any:
        parent, children, forward = self._reduce_tree(root, op)
        self._begin(self._tree_name(), two_phase=op.commute and self.topo.shared)
        recvs = [self._irecv(c) for c in children]
        self._wait(recvs, "reduce")
        acc = obj
        for r in recvs:
            acc = op(acc, unpickle(r))
        if parent is not None:
            self._wait([self._isend(parent, _dumps(acc), ENC_PICKLE)], "reduce")
            acc = None
        if forward is not None:
            if parent is None:
                self._wait([self._isend(forward, _dumps(acc), ENC_PICKLE)], "reduce")
                acc = None
            elif self.rank == forward:
                r = self._irecv(0)
                self._wait([r], "reduce")
                acc = unpickle(r)
        return acc if self.rank == root else None

    def reduce_arr(self, arr: np.ndarray, op: Op, root: int) -> np.ndarray | None:
        """lower-to-higher reduction of every rank's ``arr``; the result on root only.
        Long arrays reduce chunk by chunk so the levels of the tree overlap."""
        parent, children, forward = self._reduce_tree(root, op)
        nbytes = arr.nbytes
        long = nbytes >= self.xsize and arr.ndim > 0 and arr.size > 1
        self._begin(self._tree_name(), "long" if long else "short", op.commute and self.topo.shared)
        flat = arr.reshape(-1)
        per = max(1, self.chunk // max(1, arr.itemsize)) if long else max(1, flat.size)
        bounds = [(i, min(flat.size, i + per)) for i in range(0, flat.size, per)] or [(0, 0)]
        incoming = [
            [(self._irecv(c, b := np.empty(hi - lo, arr.dtype)), b) for c in children]
            for lo, hi in bounds
        ]
        out = np.empty_like(flat)
        sends = []
        for k, (lo, hi) in enumerate(bounds):
            acc = flat[lo:hi]
            self._wait([r for r, _ in incoming[k]], "Reduce")
            for _, b in incoming[k]:
                acc = op.combine(acc, b)
            if parent is not None:
                acc = np.ascontiguousarray(acc)
                sends.append((self._isend(parent, _flat(acc)), acc))
            else:
                out[lo:hi] = acc
        self._wait([s for s, _ in sends], "Reduce")
        if forward is not None:
            if parent is None:
                self._wait([self._isend(forward, _flat(out))], "Reduce")
            elif self.rank == forward:
                self._wait([self._irecv(0, out)], "Reduce")
        return out.reshape(arr.shape) if self.rank == root else None

    def _one_host(self, op: Op) -> bool:
        """Every rank on one host, several of them, and an op that may be regrouped."""
        return self.topo.nhosts == 1 and self.size > 1 and op.commute

    def allreduce_obj(self, obj: Any, op: Op) -> Any:
        if (self.logarithmic or self._one_host(op)) and op.commute:
            out = recursive_doubling_obj(self, obj, op)
            self.last_two_phase = self.topo.shared
            return out
        acc = self.reduce_obj(obj, op, 0)
        labels = self.last_algorithm, self.last_protocol, self.last_two_phase
        acc = self.bcast_obj(acc, 0)
        self._label(*labels)
        return acc

    def allreduce_arr(self, arr: np.ndarray, op: Op) -> np.ndarray:
        long = arr.nbytes >= self.xsize
        if self._one_host(op):
            # no global phase: the local phase is ours to choose (IMPI), so the fast one
            self._begin("recursive_doubling", "long" if long else "short", True)
            group = list(range(self.size))
            if long and arr.size >= self.size and self.size > 2:  # two: one exchange is less
                out = ring_allreduce(self, arr, op, group)
            else:
                out = recursive_doubling_arr(self, np.ascontiguousarray(arr), op, group)
            self._label(self.last_algorithm, "long" if long else "short", True)
            return out
        if self.logarithmic and op.commute:
            # one tag for all three phases: ranks outside the masters' phase stay in step
            self._begin("recursive_doubling", "short", self.topo.shared)
            local = local_reduce(self, arr, op)
            acc = None
            if local is not None:
                masters, partial = local
                if long and arr.size >= len(masters) and len(masters) > 2:
                    acc = ring_allreduce(self, partial, op, masters)
                else:
                    acc = recursive_doubling_arr(self, partial, op, masters)
                    self.last_protocol = "long" if long else "short"
            name, proto = self.last_algorithm, self.last_protocol
            acc = local_bcast(self, acc, arr)
            self._label(name, proto, self.topo.shared)
            return acc
        acc = self.reduce_arr(arr, op, 0)
        labels = self.last_algorithm, self.last_protocol, self.last_two_phase
        out = acc if acc is not None else np.empty_like(arr)
        self.bcast_arr(out, 0)
        self._label(*labels)  # the reduction's: it decides the order operands meet
        return out

    # -- gather / scatter / allgather / alltoall --------------------------------------------

    def gather_obj(self, obj: Any, root: int) -> list[Any] | None:
        """Binomial (each node forwards its subtree's items) or linear."""
        if self.two.applies:
            items = self.two.gather(obj, root)
            return None if items is None else [items[r] for r in range(self.size)]
        self._begin(self._tree_name())
        group = [(root + k) % self.size for k in range(self.size)]
        parent, children = group_tree(group, self.rank, self.logarithmic)
        items = {self.rank: obj}
        recvs = [self._irecv(c) for c in children]
        self._wait(recvs, "gather")
        for r in recvs:
            items.update(unpickle(r))
        if parent is not None:
            self._wait([self._isend(parent, _dumps(items), ENC_PICKLE)], "gather")
            return None
        return [items[r] for r in range(self.size)]

    def scatter_obj(self, objs: Any, root: int) -> Any:
        if self.rank == root:
            objs = list(objs)
            if len(objs) != self.size:
                raise ValueError(f"scatter needs {self.size} items on the root, got {len(objs)}")
        if self.two.applies:
            return self.two.scatter(dict(enumerate(objs)) if self.rank == root else None, root)
        self._begin(self._tree_name())
        group = [(root + k) % self.size for k in range(self.size)]
        parent, children = group_tree(group, self.rank, self.logarithmic)
        if parent is None:
            items = dict(enumerate(objs))
        else:
            r = self._irecv(parent)
            self._wait([r], "scatter")
            items = unpickle(r)
        sends = []
        n = len(group)
        for c in children:
            ci = group.index(c)
            span = _subtree_span(ci, n)
            sub = {group[j]: items[group[j]] for j in range(ci, ci + span)}
            sends.append(self._isend(c, _dumps(sub), ENC_PICKLE))
        self._wait(sends, "scatter")
        return items[self.rank]

    def allgather_obj(self, obj: Any) -> list[Any]:
        if not self.logarithmic or self.two.applies:  # two-phase: gather, bcast both are
            items = self.gather_obj(obj, 0)
            labels = self.last_algorithm, self.last_protocol, self.last_two_phase
            out = self.bcast_obj(items, 0)
            self._label(*labels)
            return out
        return self._ring_allgather_obj(obj)

    def _ring_allgather_obj(self, obj: Any) -> list[Any]:
        self._begin("ring")
        n, i = self.size, self.rank
        right, left = (i + 1) % n, (i - 1) % n
        items: list[Any] = [None] * n
        items[i] = obj
        data = _dumps(obj)
        for step in range(n - 1):
            r = self._irecv(left)
            s = self._isend(right, data, ENC_PICKLE)
            self._wait([r, s], "allgather")
            data = bytes(r.data)
            items[(i - step - 1) % n] = pickle.loads(data)
        return items

    def gather_arr(self, send: np.ndarray, recv: np.ndarray | None, root: int) -> None:
        """Linear: the root receives each block straight into its place (long or short;
        a tree would move every byte more than once); short ones two-phase."""
        if self.two.applies and send.nbytes < self.xsize:
            items = self.two.gather(np.ascontiguousarray(send), root)
            if items is not None:
                assert recv is not None
                for r, block in enumerate(_blocks(recv, self.size, "Gather")):
                    block[...] = items[r].reshape(block.shape)
            return
        self._begin("linear", "long" if send.nbytes >= self.xsize else "short")
        if self.rank != root:
            self._wait([self._isend(root, _flat(np.ascontiguousarray(send)))], "Gather")
            return
        assert recv is not None
        blocks = _blocks(recv, self.size, "Gather")
        ops = [self._irecv(r, blocks[r]) for r in range(self.size) if r != root]
        blocks[root][...] = send.reshape(blocks[root].shape)
        self._wait(ops, "Gather")

    def scatter_arr(self, send: np.ndarray | None, recv: np.ndarray, root: int) -> None:
        if self.two.applies and recv.nbytes < self.xsize:
            items = None
            if self.rank == root:
                assert send is not None
                items = dict(enumerate(b.copy() for b in _blocks(send, self.size, "Scatter")))
            recv[...] = self.two.scatter(items, root).reshape(recv.shape)
            return
        self._begin("linear", "long" if recv.nbytes >= self.xsize else "short")
        if self.rank != root:
            self._wait([self._irecv(root, recv)], "Scatter")
            return
        assert send is not None
        blocks = _blocks(send, self.size, "Scatter")
        ops = [self._isend(r, _flat(blocks[r])) for r in range(self.size) if r != root]
        recv[...] = blocks[root].reshape(recv.shape)
        self._wait(ops, "Scatter")

    def allgather_arr(self, send: np.ndarray, recv: np.ndarray) -> None:
        blocks = _blocks(recv, self.size, "Allgather")
        blocks[self.rank][...] = send.reshape(blocks[self.rank].shape)
        n, i = self.size, self.rank
        if not self.logarithmic or (self.two.applies and send.nbytes < self.xsize):
            self.gather_arr(send, recv if i == 0 else None, 0)
            labels = self.last_algorithm, self.last_protocol, self.last_two_phase
            self.bcast_arr(recv, 0)
            self._label(*labels)
            return
        if n & (n - 1) == 0 and send.nbytes < self.xsize:
            self._begin("recursive_doubling")
            flat, per = recv.reshape(-1), blocks[0].size
            mask = 1
            while mask < n:  # after the round for ``mask`` I hold my 2*mask group's blocks
                peer = i ^ mask
                mine, theirs = (i // mask) * mask * per, (peer // mask) * mask * per
                self._sendrecv_arr(
                    peer,
                    _flat(flat[mine : mine + mask * per]),
                    peer,
                    flat[theirs : theirs + mask * per],
                )
                mask <<= 1
            return
        self._begin("ring", "long" if send.nbytes >= self.xsize else "short")
        right, left = (i + 1) % n, (i - 1) % n
        for step in range(n - 1):
            s, r = (i - step) % n, (i - step - 1) % n
            self._sendrecv_arr(right, _flat(blocks[s]), left, blocks[r])

    def alltoall_obj(self, objs: Any) -> list[Any]:
        objs = list(objs)
        if len(objs) != self.size:
            raise ValueError(f"alltoall needs {self.size} items, got {len(objs)}")
        if self.two.applies:
            return self.two.alltoall(objs)
        self._begin("pairwise")
        out: list[Any] = [None] * self.size
        out[self.rank] = objs[self.rank]
        for step in range(1, self.size):
            dest, src = (self.rank + step) % self.size, (self.rank - step) % self.size
            r = self._irecv(src)
            s = self._isend(dest, _dumps(objs[dest]), ENC_PICKLE)
            self._wait([r, s], "alltoall")
            out[src] = unpickle(r)
        return out

    def gatherv_bytes(self, send: memoryview, blocks: list[memoryview] | None, root: int) -> None:
        """Linear: each rank's bytes straight into the root's block for it (Gatherv)."""
        self._begin("linear", "long" if len(send) >= self.xsize else "short")
        if self.rank != root:
            self._wait([self._isend(root, send)], "Gatherv")
            return
        assert blocks is not None
        ops = [self._irecv(r, blocks[r]) for r in range(self.size) if r != root]
        blocks[root][:] = send
        self._wait(ops, "Gatherv")

    def scatterv_bytes(self, blocks: list[memoryview] | None, recv: memoryview, root: int) -> None:
        """Linear: the root's block for each rank straight into its buffer (Scatterv)."""
        self._begin("linear", "long" if len(recv) >= self.xsize else "short")
        if self.rank != root:
            self._wait([self._irecv(root, recv)], "Scatterv")
            return
        assert blocks is not None
        ops = [self._isend(r, blocks[r]) for r in range(self.size) if r != root]
        recv[:] = blocks[root]
        self._wait(ops, "Scatterv")

    def alltoallv_arr(
        self, send: list[memoryview], recv: list[memoryview], uniform: bool = False
    ) -> None:
        """Pairwise exchange of per-peer byte blocks (Alltoall and Alltoallv); two-phase for
        ``uniform`` short blocks (Alltoall's: every rank then takes the same path)."""
        if uniform and self.two.applies and len(send[0]) < self.xsize:
            got = self.two.alltoall([bytes(b) for b in send])
            for k, b in enumerate(got):
                recv[k][:] = b
            return
        self._begin("pairwise", "long" if len(send[0]) >= self.xsize else "short")
        recv[self.rank][:] = send[self.rank]
        for step in range(1, self.size):
            dest, src = (self.rank + step) % self.size, (self.rank - step) % self.size
            self._sendrecv_arr(dest, send[dest], src, recv[src])

    # -- scan -------------------------------------------------------------------------------

    def scan_obj(self, obj: Any, op: Op, exclusive: bool = False) -> Any:
        if self.two.applies and self.two.consecutive:
            incl, excl, have = self.two.scan(obj, op)
            return (excl if have else None) if exclusive else incl
        if not self.logarithmic:
            return self._chain_scan(obj, op, exclusive)
        self._begin("recursive_doubling")
        result, partial = obj, obj
        have_excl, excl = False, None
        mask = 1
        while mask < self.size:
            peer = self.rank ^ mask
            if peer < self.size:
                r = self._irecv(peer)
                s = self._isend(peer, _dumps(partial), ENC_PICKLE)
                self._wait([r, s], "scan")
                got = unpickle(r)
                if self.rank > peer:
                    partial = op(got, partial)
                    result = op(got, result)
                    excl = op(got, excl) if have_excl else got
                    have_excl = True
                else:
                    partial = op(partial, got)
            mask <<= 1
        if exclusive:
            return excl if have_excl else None
        return result

    def _chain_scan(self, obj: Any, op: Op, exclusive: bool) -> Any:
        self._begin("linear")
        prefix = None
        if self.rank > 0:
            r = self._irecv(self.rank - 1)
            self._wait([r], "scan")
            prefix = unpickle(r)
        mine = obj if prefix is None else op(prefix, obj)
        if self.rank < self.size - 1:
            self._wait([self._isend(self.rank + 1, _dumps(mine), ENC_PICKLE)], "scan")
        return prefix if exclusive else mine

    def scan_arr(self, arr: np.ndarray, op: Op, exclusive: bool = False) -> np.ndarray | None:
        """Inclusive prefix (or exclusive: None on rank 0) along the chain of ranks."""
        if self.two.applies and self.two.consecutive and arr.nbytes < self.xsize:
            incl, excl, have = self.two.scan(np.ascontiguousarray(arr), op.combine)
            return (excl if have else None) if exclusive else incl
        self._begin("linear", "long" if arr.nbytes >= self.xsize else "short")
        mine = np.ascontiguousarray(arr)
        prefix = None
        if self.rank > 0:
            prefix = np.empty_like(mine)
            self._wait([self._irecv(self.rank - 1, prefix)], "Scan")
            mine = np.ascontiguousarray(op.combine(prefix, mine))
        if self.rank < self.size - 1:
            self._wait([self._isend(self.rank + 1, _flat(mine))], "Scan")
        return prefix if exclusive else mine
