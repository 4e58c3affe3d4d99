"""Every collective and point-to-point call against numpy / Python computed here, ranks as
threads on real loopback links: sizes 1-5 and 8, both sides of coll_maxlinear and of
coll_xsize, flat and two-phase (several ranks per host)."""

import numpy as np
import pytest
from threadranks import run_ranks

from zpar.comm import ops
from zpar.comm.p2p import ANY_SOURCE, ANY_TAG, PROC_NULL, CommError, Request, Status


def _objects(c):
    r, n = c.rank, c.size
    out = {}
    out["bcast"] = c.bcast({"x": n - 1} if r == n - 1 else None, root=n - 1)
    out["allreduce"] = c.allreduce(r + 1)
    out["alg"] = c.last_algorithm
    out["reduce"] = c.reduce(r, op=ops.MAX, root=n // 2)
    out["gather"] = c.gather(r * 10, root=0)
    out["scatter"] = c.scatter([i * 2 for i in range(n)] if r == 0 else None)
    out["allgather"] = c.allgather(r)
    out["alltoall"] = c.alltoall([(r, j) for j in range(n)])
    out["scan"] = c.scan(r + 1)
    out["exscan"] = c.exscan(r + 1)
    out["concat"] = c.allreduce(str(r), op=lambda a, b: a + b)  # not commutative: rank order
    out["maxloc"] = c.allreduce((r % 3, r), op=ops.MAXLOC)
    c.barrier()
    return out


def _check_objects(res, n):
    best = max(range(n), key=lambda i: (i % 3, -i))
    for r, o in enumerate(res):
        assert o["bcast"] == {"x": n - 1}
        assert o["allreduce"] == n * (n + 1) // 2
        assert o["reduce"] == (n - 1 if r == n // 2 else None)
        assert o["gather"] == ([i * 10 for i in range(n)] if r == 0 else None)
        assert o["scatter"] == r * 2
        assert o["allgather"] == list(range(n))
        assert o["alltoall"] == [(j, r) for j in range(n)]
        assert o["scan"] == (r + 1) * (r + 2) // 2
        assert o["exscan"] == (None if r == 0 else r * (r + 1) // 2)
        assert o["concat"] == "".join(str(i) for i in range(n))
        assert tuple(o["maxloc"]) == (best % 3, best)


def _buffers(elems):
    def run(c):
        r, n = c.rank, c.size
        out = {}
        a = (np.arange(elems, dtype=np.float64) + 1) * (r + 1)
        b = np.empty_like(a)
        c.Allreduce(a, b)
        out["Allreduce"] = (b, c.last_algorithm, c.last_protocol)
        m = np.arange(elems, dtype=np.int64) * (r + 1)
        c.Allreduce(np.array(m), m, op=ops.MAX)
        out["AllreduceMax"] = m
        red = np.empty(elems, np.float64) if r == 0 else None
        c.Reduce(a, red, op=ops.SUM, root=0)
        out["Reduce"] = red
        bb = np.arange(elems, dtype=np.float64) if r == n - 1 else np.zeros(elems)
        c.Bcast(bb, root=n - 1)
        out["Bcast"] = (bb, c.last_protocol)
        g = np.empty(n * 3, np.int32)
        c.Allgather(np.full(3, r, np.int32), g)
        out["Allgather"] = g
        gat = np.empty((n, elems)) if r == 1 % n else None
        c.Gather(a, gat, root=1 % n)
        out["Gather"] = gat
        sc = np.empty(2)
        c.Scatter(np.arange(2 * n, dtype=np.float64) if r == 0 else None, sc, root=0)
        out["Scatter"] = sc
        s = np.arange(n * 2, dtype=np.float64) + 100 * r
        t = np.empty_like(s)
        c.Alltoall(s, t)
        out["Alltoall"] = t
        sc_out = np.empty(4, np.int64)
        c.Scan(np.full(4, r + 1, np.int64), sc_out)
        out["Scan"] = sc_out
        ex_out = np.full(4, -1, np.int64)
        c.Exscan(np.full(4, r + 1, np.int64), ex_out)
        out["Exscan"] = ex_out
        return out

    return run


def _check_buffers(res, n, elems):
    a = np.arange(elems, dtype=np.float64) + 1
    for r, o in enumerate(res):
        np.testing.assert_allclose(o["Allreduce"][0], a * n * (n + 1) / 2)
        assert np.array_equal(o["AllreduceMax"], np.arange(elems) * n)
        if r == 0:
            np.testing.assert_allclose(o["Reduce"], a * n * (n + 1) / 2)
        assert np.array_equal(o["Bcast"][0], np.arange(elems, dtype=np.float64))
        assert o["Allgather"].tolist() == [i for i in range(n) for _ in range(3)]
        if r == 1 % n:
            assert np.array_equal(o["Gather"], np.stack([a * (i + 1) for i in range(n)]))
        assert o["Scatter"].tolist() == [2.0 * r, 2.0 * r + 1]
        expect = [float(j * 100 + r * 2 + k) for j in range(n) for k in range(2)]
        assert o["Alltoall"].tolist() == expect
        assert o["Scan"].tolist() == [(r + 1) * (r + 2) // 2] * 4
        assert o["Exscan"].tolist() == [r * (r + 1) // 2 if r else -1] * 4


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("maxlinear", [4, 2])
def test_object_collectives(n, maxlinear):
    res = run_ranks(n, _objects, coll_maxlinear=maxlinear)
    _check_objects(res, n)
    logarithmic = n >= maxlinear
    assert res[0]["alg"] == ("recursive_doubling" if logarithmic else "linear")


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("elems", [4, 3000])  # 32 B < coll_xsize <= 24 kB
@pytest.mark.parametrize("maxlinear", [4, 2])
def test_buffer_collectives(n, elems, maxlinear):
    res = run_ranks(n, _buffers(elems), coll_maxlinear=maxlinear, maxdatalen=4096)
    _check_buffers(res, n, elems)
    alg, proto = res[0]["Allreduce"][1:]
    assert proto == ("long" if elems * 8 >= 1024 else "short")
    assert res[0]["Bcast"][1] == proto
    if n >= maxlinear and n > 2:
        assert alg == ("ring" if proto == "long" else "recursive_doubling")
    elif n < maxlinear:
        assert alg == "linear"


@pytest.mark.parametrize("n", [4, 5])
def test_two_phase_when_ranks_share_hosts(n):
    hosts = [f"h{r // 2}" for r in range(n)]  # two ranks per host
    res = run_ranks(n, _buffers(300), hosts=hosts, coll_maxlinear=2, maxdatalen=1024)
    _check_buffers(res, n, 300)
    res = run_ranks(n, _objects, hosts=hosts, coll_maxlinear=2)
    _check_objects(res, n)


def test_two_phase_is_reported():
    def run(c):
        c.Bcast(np.zeros(10), root=0)
        return c.last_two_phase

    assert run_ranks(4, run, hosts=["a", "a", "b", "b"]) == [True] * 4
    assert run_ranks(3, run) == [False] * 3


def test_point_to_point_tags_any_source_status_and_proc_null():
    def run(c):
        r = c.rank
        if r == 0:
            got = []
            st = Status()
            got.append(c.recv(source=ANY_SOURCE, tag=7, status=st))
            got.append((st.Get_source(), st.Get_tag()))
            got.append(c.recv(source=2, tag=ANY_TAG))
            got.append(c.recv(source=ANY_SOURCE, tag=9))
            buf = np.empty(100000)
            c.Recv(buf, source=1, tag=3, status=st)
            got.append((buf.sum(), st.Get_count(np.float64)))
            return got
        if r == 1:
            # long: a blocking Send would wait for rank 0 to match it (as MPI may), and
            # rank 0 receives tag 9 first, so it goes non-blocking
            big = c.Isend(np.arange(100000, dtype=np.float64), dest=0, tag=3)
            c.send("late", dest=0, tag=9)
            big.Wait()
        if r == 2:
            c.send({"k": 2}, dest=0, tag=7)
            c.send("second", dest=0, tag=8)
        assert c.recv(source=PROC_NULL) is None
        c.send("nothing", dest=PROC_NULL)
        return None

    got = run_ranks(3, run)[0]
    assert got[0] == {"k": 2} and got[1] == (2, 7)
    assert got[2] == "second"
    assert got[3] == "late"
    assert got[4] == (np.arange(100000.0).sum(), 100000)


def test_sendrecv_ring_halo_and_nonblocking():
    def run(c):
        r, n = c.rank, c.size
        right, left = (r + 1) % n, (r - 1) % n
        halo = np.empty(5000)
        c.Sendrecv(np.full(5000, float(r)), dest=right, sendtag=1, recvbuf=halo, source=left)
        obj = c.sendrecv(r, dest=right, source=left)
        reqs = [c.isend(r * 10 + k, dest=right, tag=k) for k in range(3)]
        rr = [c.irecv(source=left, tag=k) for k in reversed(range(3))]
        vals = Request.waitall(rr)
        Request.Waitall(reqs)
        big = np.empty(300000)
        q = c.Irecv(big, source=left, tag=50)
        c.Isend(np.full(300000, float(r)), dest=right, tag=50).Wait()
        q.Wait()
        return halo[0], halo[-1], obj, vals, big.min(), big.max()

    n = 4
    for r, (h0, h1, obj, vals, lo, hi) in enumerate(run_ranks(n, run, maxdatalen=8192)):
        left = (r - 1) % n
        assert h0 == h1 == left and obj == left
        assert vals == [left * 10 + k for k in reversed(range(3))]
        assert lo == hi == left


def test_alltoallv_moves_variable_blocks():
    def run(c):
        r, n = c.rank, c.size
        scounts = [r + j + 1 for j in range(n)]  # rank r sends r+j+1 items to j
        send = np.concatenate([np.full(k, 100 * r + j, np.int64) for j, k in enumerate(scounts)])
        rcounts = [j + r + 1 for j in range(n)]
        recv = np.empty(sum(rcounts), np.int64)
        c.Alltoallv([send, scounts], [recv, rcounts])
        return recv.tolist()

    n = 3
    for r, got in enumerate(run_ranks(n, run)):
        assert got == [100 * j + r for j in range(n) for _ in range(j + r + 1)]


def test_truncation_and_bad_arguments_are_clear_errors():
    def run(c):
        if c.rank == 1:
            c.Send(np.arange(10.0), dest=0)
            return None
        with pytest.raises(CommError, match="truncated"):
            c.Recv(np.empty(5), source=1)
        with pytest.raises(ValueError, match="out of range"):
            c.send(1, dest=5)
        with pytest.raises(ValueError, match="root 9"):
            c.bcast(1, root=9)
        return True

    assert run_ranks(2, run)[0] is True

    def use_after_free(c):
        c.Free()
        with pytest.raises(CommError, match="freed"):
            c.send(1, dest=1 - c.rank)
        return True

    assert run_ranks(2, use_after_free) == [True, True]


def test_flow_control_stalls_a_fast_sender_and_resumes():
    """Rank 1 queues 40 one-packet messages at a rank that is not receiving, beyond what
    its mailbox holds (EAGER packets, outside the credit window: the slots bound them): no
    more than hiwater packets go out until rank 0 receives, then all arrive in order."""
    import threading

    from zpar.comm.mailbox import SLOTS

    ready, go = threading.Event(), threading.Event()
    n = SLOTS + 40

    def run(c):
        if c.rank == 1:
            reqs = [c.isend(k, dest=0, tag=5) for k in range(n)]
            for _ in range(50):
                c._p2p.progress(10)  # no ACK can come: rank 0 reads nothing yet
            state = c.flow_state(0)
            ready.set()
            go.wait(30)
            Request.Waitall(reqs)
            return state, c.flow_state(0)
        ready.wait(30)
        go.set()
        return [c.recv(source=1, tag=5) for _ in range(n)]

    res = run_ranks(2, run, ackmark=2, hiwater=6)
    stalled, after = res[1]
    # 34 queued, or fewer when rank 0, finishing its dance, took a few mailbox packets
    # (they wait in its links for the matching): room for as many more eager messages
    assert stalled["inflight"] == 6 and stalled["stalls"] > 0 and 0 < stalled["queued"] <= 34
    assert after["queued"] == 0 and after["inflight"] <= 6
    assert res[0] == list(range(n))


def test_peer_lost_mid_collective_is_an_error_not_a_hang():
    def run(c):
        if c.rank == 2:
            c.barrier()  # every link in use
            c._links.close(linger_ms=2000)  # as if its engine died: sockets gone, no FIN
            return "gone"
        with pytest.raises(CommError, match="lost|aborted|unreachable"):
            # the barrier too may fail here: a rank that sees rank 0's ABORT before its
            # parent's fan-out (both already sent) is broken before the barrier completes
            c.barrier()
            c.allreduce(c.rank)
        return "error"

    import zpar.comm.communicator as cm

    free = cm.Communicator.Free
    cm.Communicator.Free = lambda self: self._links.close()
    try:
        assert run_ranks(4, run, timeout=60) == ["error", "error", "gone", "error"]
    finally:
        cm.Communicator.Free = free


def test_one_host_of_many_ranks_uses_a_binomial_local_phase():
    from zpar.comm.topology import Topology

    hosts = ["a"] * 6
    trees = [Topology(r, hosts).tree(0, False, True, 4) for r in range(6)]
    assert trees[0] == (None, [1, 2, 4])
    assert trees[1] == (0, []) and trees[2] == (0, [3]) and trees[4] == (0, [5])
    assert Topology(0, ["a"] * 3).tree(0, False, True, 4) == (None, [1, 2])  # linear below 4
    # two hosts: masters first, then each master's locals
    two = ["a", "a", "b", "b"]
    assert Topology(0, two).tree(0, False, True, 4) == (None, [2, 1])
    assert Topology(2, two).tree(0, False, True, 4) == (0, [3])
    # the root stands for its host
    assert Topology(1, two).tree(1, False, True, 4) == (None, [2, 0])

    def run(c):
        a = np.arange(5000.0) if c.rank == 0 else np.zeros(5000)
        c.Bcast(a)
        s = np.empty(5000)
        c.Allreduce(a, s)
        return a.sum(), s[-1], c.reduce(c.rank, root=3)

    res = run_ranks(6, run, hosts=hosts, maxdatalen=4096)
    for r, (total, last, red) in enumerate(res):
        assert total == np.arange(5000.0).sum() and last == 4999.0 * 6
        assert red == (15 if r == 3 else None)


@pytest.mark.parametrize("path", ["cma", "ring", "socket"])
def test_long_messages_by_cross_memory_attach_shared_memory_or_the_socket(path, monkeypatch):
    """On one host a long message is read straight from the sender's memory (CMA); where
    the kernel refuses that, it goes through the shared-memory ring; shm=0: the socket."""
    import os

    from zpar.comm import cma

    reads = []
    real_read = cma.read

    def read(desc, into):
        reads.append(len(into))
        return real_read(desc, into) if path == "cma" else False  # "ring": as if refused

    monkeypatch.setattr(cma, "read", read)

    def run(c):
        r = c.rank
        a = np.arange(50_000, dtype=np.float64) + r  # 400 kB: about 100 packets of 4 kB
        b = np.empty_like(a)
        c.Sendrecv(a, dest=1 - r, recvbuf=b, source=1 - r)
        c.Sendrecv(a, dest=1 - r, recvbuf=b, source=1 - r)  # after a refusal: no new offer
        rings = {k: v is not None for k, v in c._p2p._rings_out.items()}
        paths = [v.path for v in c._p2p._rings_out.values() if v is not None]
        return b[0], b[-1], rings, paths, set(c._p2p._no_cma)

    res = run_ranks(2, run, maxdatalen=4096, hiwater=4, ackmark=2, shm=int(path != "socket"))
    for r, (first, last, rings, paths, no_cma) in enumerate(res):
        assert (first, last) == (1 - r, 49_999 + 1 - r)
        assert rings == ({1 - r: True} if path == "ring" else {})
        assert no_cma == ({1 - r} if path == "ring" else set())
        assert not any(os.path.exists(p) for p in paths)  # unlinked once both mapped
    # cma: both messages each way read in one copy; ring: one refused offer per direction
    assert reads == {"cma": [400_000] * 4, "ring": [400_000] * 2, "socket": []}[path]


def test_vector_gather_scatter_allgather():
    def run(c):
        r, n = c.rank, c.size
        counts = [k + 1 for k in range(n)]  # rank k owns k+1 items
        mine = np.full(r + 1, 10 * r, np.int32)
        everything = np.empty(sum(counts), np.int32)
        c.Allgatherv(mine, [everything, counts])
        root = n - 1
        gathered = np.empty(sum(counts), np.int32) if r == root else None
        c.Gatherv(mine, [gathered, counts] if r == root else None, root=root)
        part = np.empty(r + 1, np.float64)
        src = np.arange(sum(counts), dtype=np.float64) if r == 0 else None
        displs = list(np.cumsum([0, *counts[:-1]]))
        c.Scatterv([src, counts, displs] if r == 0 else None, part, root=0)
        return everything.tolist(), None if gathered is None else gathered.tolist(), part.tolist()

    n = 4
    whole = [10 * k for k in range(n) for _ in range(k + 1)]
    res = run_ranks(n, run)
    for r, (everything, gathered, part) in enumerate(res):
        assert everything == whole
        assert gathered == (whole if r == n - 1 else None)
        start = sum(k + 1 for k in range(r))
        assert part == [float(x) for x in range(start, start + r + 1)]


@pytest.mark.parametrize("maxlinear", [4, 2])
def test_non_commutative_buffer_ops_keep_rank_order(maxlinear):
    def matmul(invec, inoutvec, datatype):  # inoutvec = invec @ inoutvec: associative only
        inoutvec[...] = (invec.reshape(2, 2) @ inoutvec.reshape(2, 2)).reshape(-1)

    op = ops.Op.Create(matmul, commute=False)

    def mat(r):
        return np.array([[r + 1, 1], [1, 0]], np.int64)

    def run(c):
        a = mat(c.rank).reshape(-1)
        out = np.empty_like(a) if c.rank == 2 else None
        c.Reduce(a, out, op=op, root=2)
        every = np.empty_like(a)
        c.Allreduce(a, every, op=op)
        return None if out is None else out.tolist(), every.tolist(), c.last_two_phase

    expect = np.linalg.multi_dot([mat(r) for r in range(5)]).reshape(-1).tolist()
    assert expect != np.linalg.multi_dot([mat(r) for r in reversed(range(5))]).reshape(-1).tolist()
    hosts = ["a", "b", "a", "b", "c"]  # shared hosts: a commutative op would regroup
    res = run_ranks(5, run, hosts=hosts, coll_maxlinear=maxlinear)
    for r, (out, every, two_phase) in enumerate(res):
        assert out == (expect if r == 2 else None)
        assert every == expect
        assert two_phase is False


@pytest.mark.parametrize("n", [2, 3, 5])
def test_all_ranks_on_one_host(n):
    hosts = ["a"] * n
    for elems in (4, 3000):
        res = run_ranks(n, _buffers(elems), hosts=hosts, maxdatalen=4096)
        _check_buffers(res, n, elems)
        long = elems * 8 >= 1024
        assert res[0]["Allreduce"][1] == ("ring" if long and n > 2 else "recursive_doubling")
    res = run_ranks(n, _objects, hosts=hosts)
    _check_objects(res, n)
    assert res[0]["alg"] == "recursive_doubling"


def test_a_collective_failing_on_one_rank_fails_the_others_not_hangs():
    def run(c):
        if c.rank == 1:
            with pytest.raises(ValueError, match="alltoall needs"):
                c.alltoall([1])  # wrong length on this rank only
            return "raised"
        # rank 1 closes its links once it returns: a peer may find the link gone before it
        # reads rank 1's abort notice; either way the error names rank 1
        with pytest.raises(CommError, match="rank 1 (failed in alltoall|is unreachable)"):
            c.alltoall(list(range(c.size)))
        return "told"

    assert run_ranks(3, run, timeout=60) == ["told", "raised", "told"]


def test_probe_tells_source_tag_and_size_before_the_receive():
    def run(c):
        if c.rank == 1:
            c.Send(np.arange(7, dtype=np.int32), dest=0, tag=42)
            c.barrier()
            return None
        st = Status()
        c.probe(source=ANY_SOURCE, tag=ANY_TAG, status=st)
        buf = np.empty(st.Get_count(np.int32), np.int32)
        c.Recv(buf, source=st.Get_source(), tag=st.Get_tag())
        none_left = c.iprobe()
        c.barrier()
        return st.Get_source(), st.Get_tag(), buf.tolist(), none_left

    assert run_ranks(2, run)[0] == (1, 42, list(range(7)), False)


def test_the_fast_path_reports_what_the_general_path_reports():
    """Ranks of one host take the lane's fast send and receive: a status, wildcards, and
    every mistake come out as they do on the general path."""
    from zpar.comm.requests import ANY_SOURCE, ANY_TAG, Status

    def run(c):
        assert c._links.futex  # every peer on this host: the lane waits
        if c.rank == 1:
            c.Send(np.arange(3.0), dest=0, tag=4)
            c.Send(np.arange(3.0), dest=0, tag=5)
            c.send("obj", dest=0, tag=6)
            c.Send(np.arange(2.0), dest=0, tag=7)
            c.Send(np.arange(2.0), dest=0, tag=8)
            with pytest.raises(ValueError, match="C-contiguous"):
                c.Send(np.zeros((3, 3))[:, 0], dest=0)
            return c.recv(source=0)
        st = Status()
        got = np.empty(3)
        c.Recv(got, source=1, tag=4, status=st)
        assert got.tolist() == [0, 1, 2] and (st.source, st.tag, st.count) == (1, 4, 24)
        c.Recv(got, source=ANY_SOURCE, tag=ANY_TAG, status=st)  # the general path
        assert st.tag == 5
        assert c.recv(source=1, tag=ANY_TAG, status=st) == "obj" and st.tag == 6
        with pytest.raises(CommError, match="raw buffer"):
            c.recv(source=1, tag=7)
        ro = np.empty(2)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            c.Recv(ro, source=1, tag=8)
        c.Recv(np.empty(2), source=1, tag=8)  # still there after the refusal
        c.send("done", dest=1)
        return True

    assert run_ranks(2, run) == [True, "done"]


def test_a_fast_receive_never_passes_a_message_the_general_path_holds():
    """Packets the links took from a mailbox but the matching has not seen yet (during the
    dance, or in a liveness check) come first: the fast receive leaves them to the
    general path instead of taking a later message from the mailbox."""
    import threading

    first, second = threading.Event(), threading.Event()

    def run(c):
        if c.rank == 1:
            c.send("a", dest=0, tag=1)
            first.set()
            second.wait(30)
            c.send("b", dest=0, tag=1)
            return None
        first.wait(30)
        c._links._drain_for_fins()  # "a" now waits in the links, unmatched
        assert c._links.early
        second.set()
        return [c.recv(source=1, tag=1), c.recv(source=1, tag=1)]

    assert run_ranks(2, run)[0] == ["a", "b"]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_small_allreduce_on_one_host_matches_numpy_on_either_path(n):
    """One host, a power of two of ranks: small Allreduces go through the lane's one-call
    exchanges (comm.fastcoll.allreduce_small), others the general recursive doubling; ops,
    dtypes, IN_PLACE and the algorithm's name are the same either way."""
    from zpar.comm.communicator import IN_PLACE

    def run(c):
        r = c.rank
        out = {}
        a = np.arange(5, dtype=np.float64) * (r + 1)
        b = np.empty_like(a)
        c.Allreduce(a, b)
        out["sum"] = (b.tolist(), c.last_algorithm, c.last_protocol)
        m = np.array([r, -r, 7], dtype=np.int64)
        c.Allreduce(IN_PLACE, m, op=ops.MAX)
        out["max"] = m.tolist()
        p = np.full((2, 2), r + 1, dtype=np.int32)
        q = np.empty_like(p)
        c.Allreduce(p, q, op=ops.PROD)
        out["prod"] = q.tolist()
        big = np.ones(1000) * r  # 8 KB: the general path
        c.Allreduce(IN_PLACE, big)
        out["big"] = float(big[0])
        return out

    total = sum(range(1, n + 1))
    prod = 1
    for k in range(1, n + 1):
        prod *= k
    for o in run_ranks(n, run, hosts=["h"] * n):
        assert o["sum"] == ([float(i * total) for i in range(5)], "recursive_doubling", "short")
        assert o["max"] == [n - 1, 0, 7]
        assert o["prod"] == [[prod, prod], [prod, prod]]
        assert o["big"] == sum(range(n))


def test_a_long_sends_wait_for_its_reader_sleeps_at_once():
    """The sender of a long same-host message, waiting for the reader's CMADONE, sleeps
    without a spin or a yield (the reader's split copy may use every CPU); its other waits
    and the receiver's keep theirs."""
    import threading

    # each rank's first wait (and rank 1's first after its read): the other rank acts only
    # once it is seen waiting, however the host schedules the two threads
    waiting = [threading.Event(), threading.Event()]

    class Spy:
        def __init__(self, lane, log, seen):
            self._lane, self._log, self.seen = lane, log, seen

        def wait(self, spin_ns, timeout_ns, only=-1):
            self._log.append(spin_ns)
            self.seen.set()
            return self._lane.wait(spin_ns, timeout_ns, only)

        def __getattr__(self, name):
            return getattr(self._lane, name)

    def run(c):
        log: list[int] = []
        first = waiting[0] if c.rank == 0 else threading.Event()  # rank 1: not its read's
        spy = c._links.lane = Spy(c._links.lane, log, first)
        a = np.arange(500_000, dtype=np.float64)  # 4 MB: a CMASYNC offer
        if c.rank == 0:
            c.Send(a, dest=1, tag=5)
            waits = list(log)
            assert waiting[1].wait(30), "rank 1 never waited for the second message"
            c.send("ok", dest=1, tag=6)
        else:
            assert waiting[0].wait(30), "rank 0 never waited for the read"
            b = np.empty_like(a)
            c.Recv(b, source=0, tag=5)
            assert b[-1] == a[-1]
            del log[:]
            spy.seen = waiting[1]  # rank 0 sends once this rank waits for it
            assert c.irecv(source=0, tag=6).wait() == "ok"  # the general path's wait
            waits = list(log)
        return waits, c._p2p.links.futex

    (sender, futex0), (receiver, _) = run_ranks(2, run)
    if not futex0:
        pytest.skip("the ranks' links did not wait on futexes here (mailboxes unsupported)")
    assert sender and all(s == -1 for s in sender), sender
    assert receiver and all(s >= 0 for s in receiver), receiver
