"""dv.communicator() on a real cluster: engines bootstrapped through the hub's rendezvous,
every collective checked against numpy computed here, an engine killed mid-collective."""

from __future__ import annotations

import os
import re
import signal
import sys

import numpy as np
import pytest

from tests.clusters import module_cluster, shipped_by_value
from zpar.errors import RemoteError

TIMEOUT = 90.0
N = 8


@pytest.fixture(autouse=True, scope="module")
def _ship_by_value():
    yield from shipped_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from module_cluster(
        tmp_path_factory,
        "zpar-comm",
        N,
        wait_timeout=TIMEOUT,
        timeout=TIMEOUT,
        log_level="WARNING",
    )


def _comm(name="comm"):
    from zpar.namespace import current

    return current()[name]


def every_collective(elems):
    """On each engine: every collective once; results for the client to check."""
    from zpar.comm import ops

    c = _comm()
    r, n = c.rank, c.size
    out = {"rank": r, "size": n}
    out["bcast"] = c.bcast({"root": "data"} if r == 0 else None)
    out["allreduce"] = c.allreduce(r + 1)
    out["alg_obj"] = c.last_algorithm
    out["reduce"] = c.reduce(r * r, op=ops.SUM, root=n - 1)
    out["gather"] = c.gather(r, root=0)
    out["scatter"] = c.scatter(list(range(100, 100 + n)) if r == 0 else None)
    out["allgather"] = c.allgather(str(r))
    out["alltoall"] = c.alltoall([r * 10 + j for j in range(n)])
    out["scan"] = c.scan(r + 1)
    a = np.arange(elems, dtype=np.float64) * (r + 1)
    b = np.empty_like(a)
    c.Allreduce(a, b)
    out["Allreduce"] = b
    out["alg_arr"] = (c.last_algorithm, c.last_protocol)
    red = np.empty_like(a) if r == 0 else None
    c.Reduce(a, red, op=ops.MAX)
    out["Reduce"] = red
    bb = np.arange(elems, dtype=np.float64) if r == 0 else np.empty(elems)
    c.Bcast(bb)
    out["Bcast"] = bb
    g = np.empty(n * 2, np.int64)
    c.Allgather(np.array([r, -r], np.int64), g)
    out["Allgather"] = g
    s = np.arange(n, dtype=np.int32) + 10 * r
    t = np.empty_like(s)
    c.Alltoall(s, t)
    out["Alltoall"] = t
    halo = np.empty(3)
    c.Sendrecv(np.full(3, float(r)), dest=(r + 1) % n, recvbuf=halo, source=(r - 1) % n)
    out["halo"] = halo
    c.barrier()
    return out


def check(results, n, elems):
    a = np.arange(elems, dtype=np.float64)
    for r, o in enumerate(results):
        assert (o["rank"], o["size"]) == (r, n)
        assert o["bcast"] == {"root": "data"}
        assert o["allreduce"] == n * (n + 1) // 2
        assert o["reduce"] == (sum(i * i for i in range(n)) if r == n - 1 else None)
        assert o["gather"] == (list(range(n)) if r == 0 else None)
        assert o["scatter"] == 100 + r
        assert o["allgather"] == [str(i) for i in range(n)]
        assert o["alltoall"] == [j * 10 + r for j in range(n)]
        assert o["scan"] == (r + 1) * (r + 2) // 2
        np.testing.assert_allclose(o["Allreduce"], a * n * (n + 1) / 2)
        if r == 0:
            np.testing.assert_array_equal(o["Reduce"], a * n)
        np.testing.assert_array_equal(o["Bcast"], a)
        assert o["Allgather"].tolist() == [v for i in range(n) for v in (i, -i)]
        assert o["Alltoall"].tolist() == [10 * j + r for j in range(n)]
        assert o["halo"].tolist() == [float((r - 1) % n)] * 3


@pytest.mark.parametrize(
    ("n", "hosts", "elems", "linear"),
    [
        (1, None, 10, True),
        (2, None, 10, None),  # one host: no global phase, recursive doubling locally
        (3, "engine", 10, True),  # 3 hosts < coll_maxlinear
        (4, "engine", 10, False),  # 4 hosts: logarithmic, short
        (5, "engine", 5000, False),  # logarithmic, long (40 kB >= coll_xsize): ring
        (8, "engine", 5000, False),
    ],
)
def test_every_collective_against_numpy(cluster, n, hosts, elems, linear):
    dv = cluster.client[:n]
    info = dv.communicator(hosts=hosts, timeout=TIMEOUT)
    assert info.size == n and info.engine_ids == dv._ids()
    results = dv.apply_sync(every_collective, elems)
    check(results, n, elems)
    alg_obj = results[0]["alg_obj"]
    alg_arr, proto = results[0]["alg_arr"]
    assert proto == ("long" if elems * 8 >= 1024 else "short")
    if linear is None:
        assert alg_obj == alg_arr == "recursive_doubling"
    elif linear:
        assert alg_obj == alg_arr == "linear"
    else:
        assert alg_obj == "recursive_doubling"
        assert alg_arr == ("ring" if proto == "long" else "recursive_doubling")
    dv.apply_sync(lambda: _comm().Free())


def test_one_host_by_default_goes_two_phase_and_uses_ipc(cluster):
    dv = cluster.client[:3]
    info = dv.communicator(name="local", timeout=TIMEOUT)
    assert len(set(info.hostnames)) == 1

    def run():
        c = _comm("local")
        v = c.allreduce(c.rank)
        return (
            v,
            c.last_two_phase,
            c.topology.nhosts,
            sorted(
                d.getsockopt_string(__import__("zmq").LAST_ENDPOINT)[:4]
                for d in c._links.dealers.values()
            ),
        )

    for r, (v, two, nhosts, schemes) in enumerate(dv.apply_sync(run)):
        assert v == 3 and two and nhosts == 1
        assert schemes == ["ipc:"] * r


def test_eight_ranks_on_fewer_cores_do_not_starve(cluster):
    """More ranks than cores on one host (8 here, on CI's and this project's 2): no rank
    spins long, a blocked receive sleeps on the lane's futex words until its peer's packet
    wakes it, so a ring of point-to-point messages and allreduces runs to the end with
    every rank answering."""
    dv = cluster.client[:]
    assert len(dv.targets) == N
    dv.communicator(name="crowd", timeout=TIMEOUT)

    def ring(iters):
        c = _comm("crowd")
        r, n = c.rank, c.size
        total = 0
        for i in range(iters):
            got = c.sendrecv((r, i), dest=(r + 1) % n, source=(r - 1) % n)
            assert got == ((r - 1) % n, i)
            buf = np.full(1, float(r))
            out = np.empty(1)
            c.Allreduce(buf, out)
            total += int(out[0]) + c.allreduce(1)
        return total, c._links.spins, len(os.sched_getaffinity(0)), c._links.futex

    results = dv.apply_sync(ring, 50)
    for total, spins, cpus, futex in results:
        assert total == 50 * (sum(range(N)) + N)
        assert spins == (N <= cpus)  # oversubscribed: nobody spins long
        assert futex  # one host: every wait sleeps on futex words
    dv.apply_sync(lambda: _comm("crowd").Free())


def test_bad_arguments_are_refused_at_the_client(cluster):
    dv = cluster.client[:2]
    with pytest.raises(ValueError, match="identifier"):
        dv.communicator(name="not a name")
    with pytest.raises(TypeError, match="unknown communicator parameter"):
        dv.communicator(coll_size=3)
    with pytest.raises(ValueError, match="hosts"):
        dv.communicator(hosts=["a"])


def halo_setup(n_local):
    import numpy as np

    global u
    u = np.zeros(n_local + 2)
    if comm.rank == 0:  # noqa: F821 - the engine's communicator
        u[1] = 100.0


def halo_steps(k):
    import numpy as np

    from zpar.comm import PROC_NULL, SUM

    left = comm.rank - 1 if comm.rank > 0 else PROC_NULL  # noqa: F821
    right = comm.rank + 1 if comm.rank < comm.size - 1 else PROC_NULL  # noqa: F821
    for _ in range(k):
        comm.Sendrecv(u[-2:-1], dest=right, recvbuf=u[0:1], source=left)  # noqa: F821
        comm.Sendrecv(u[1:2], dest=left, recvbuf=u[-1:], source=right)  # noqa: F821
        u[1:-1] += 0.25 * (u[:-2] - 2 * u[1:-1] + u[2:])
    total = np.zeros(1)
    comm.Allreduce(np.array([u[1:-1].sum()]), total, op=SUM)  # noqa: F821
    return total[0], u[1:-1].copy()


def test_halo_exchange_example_of_the_docs(cluster):
    """docs/communicator.md's example, against the same stencil on one array here."""
    dv = cluster.client[:4]
    dv.communicator()
    dv.apply_sync(halo_setup, 50)
    out = dv.apply_sync(halo_steps, 30)
    whole = np.zeros(4 * 50 + 2)
    whole[1] = 100.0
    for _ in range(30):
        whole[1:-1] += 0.25 * (whole[:-2] - 2 * whole[1:-1] + whole[2:])
    np.testing.assert_allclose(np.concatenate([part for _, part in out]), whole[1:-1])
    assert len({total for total, _ in out}) == 1
    np.testing.assert_allclose(out[0][0], whole[1:-1].sum())


def test_long_messages_between_engines(cluster):
    """Megabytes between processes: read straight from the sender's memory (CMA), no ring."""
    dv = cluster.client[:2]
    dv.communicator(name="big", timeout=TIMEOUT)

    def swap():
        import numpy as np

        c = _comm("big")
        a = np.arange(3_000_000, dtype=np.float64) * (c.rank + 1)  # 24 MB
        b = np.empty_like(a)
        c.Sendrecv(a, dest=1 - c.rank, recvbuf=b, source=1 - c.rank)
        c.Bcast(a, root=1)
        rings = any(ring is not None for ring in c._p2p._rings_out.values())
        return float(b[-1]), float(a[-1]), (c._p2p.cma_reads, rings)

    (b0, a0, used0), (b1, a1, used1) = dv.apply_sync(swap)
    assert b0 == 2 * 2_999_999 and b1 == 2_999_999
    assert a0 == a1 == 2 * 2_999_999
    # each received the Sendrecv's message; rank 0 the Bcast's chunks too
    assert used0[0] > used1[0] >= 1 and not used0[1] and not used1[1]


def flood(n):
    """Rank 1: queue n messages at rank 0, which runs nothing meanwhile; the requests stay
    in the namespace for drain()."""
    global pending
    c = _comm("flow")
    pending = [c.isend(k, dest=0, tag=3) for k in range(n)]
    for _ in range(20):
        c._p2p.progress(10)  # no ACK can come: rank 0 is not in a call
    return c.flow_state(0)


def drain(n):
    c = _comm("flow")
    if c.rank == 0:
        return [c.recv(source=1, tag=3) for _ in range(n)]
    c.Request.waitall(pending)
    return c.flow_state(0)


def test_flow_control_between_engines_stalls_and_resumes(cluster):
    """Past the mailbox's slots (small messages there are outside the credit window), no
    more than hiwater packets go out until the receiver reads."""
    from zpar.comm.mailbox import SLOTS

    ids = cluster.client.ids[:2]
    dv = cluster.client[ids]
    dv.communicator(name="flow", hiwater=5, ackmark=2, timeout=TIMEOUT)
    n = SLOTS + 30
    state = cluster.client[ids[1]].apply_sync(flood, n)
    assert state["inflight"] == 5 and state["queued"] == 25 and state["stalls"] > 0
    got, after = dv.apply_sync(drain, n)
    assert got == list(range(n))
    assert after["queued"] == 0


def test_two_communicators_at_once(cluster):
    """Over overlapping engines, used in turn: each keeps its own ranks and traffic."""
    ids = cluster.client.ids
    cluster.client[ids[:3]].communicator(name="left", timeout=TIMEOUT)
    cluster.client[list(reversed(ids[1:4]))].communicator(name="right", timeout=TIMEOUT)

    def both():
        from zpar.namespace import current

        ns = current()
        out = {}
        for name in ("left", "right"):
            if name in ns:
                c = ns[name]
                out[name] = (c.rank, c.allgather(c.rank), c.allreduce(1))
        return out

    res = cluster.client[ids[:4]].apply_sync(both)
    assert res[0] == {"left": (0, [0, 1, 2], 3)}
    assert res[1] == {"left": (1, [0, 1, 2], 3), "right": (2, [0, 1, 2], 3)}
    assert res[2] == {"left": (2, [0, 1, 2], 3), "right": (1, [0, 1, 2], 3)}
    assert res[3] == {"right": (0, [0, 1, 2], 3)}


def test_ranks_that_disagree_on_parameters_fail_naming_them(cluster):
    """IMPI: every client must bring the same COLL_XSIZE / COLL_MAXLINEAR, else an error."""
    from zpar.comm.bootstrap import join
    from zpar.comm.client import PARAMS

    ids = cluster.client.ids[:2]
    ars = [
        cluster.client[eid].apply_async(
            join,
            "odd-params",
            rank,
            2,
            name="odd",
            timeout=30,
            params={**PARAMS, "coll_xsize": 1024 * (rank + 1)},
        )
        for rank, eid in enumerate(ids)
    ]
    for rank, ar in enumerate(ars):
        with pytest.raises(RemoteError, match="other parameters") as err:
            ar.get(timeout=TIMEOUT)
        assert f"rank(s) [{1 - rank}]" in str(err.value)


def test_a_communicator_dropped_without_free_does_not_block_the_next(cluster):
    """del (or a cleared namespace) closes it: FIN to the peers, FINI to the hub."""
    dv = cluster.client[:4]
    dv.communicator("c1", timeout=30)
    dv.execute("del c1", block=True)
    dv.communicator("c2", timeout=30)
    cluster.client.clear(targets=dv._ids(), block=True)
    dv.communicator("c3", timeout=30)
    assert dv.apply_sync(lambda: _comm("c3").allreduce(1)) == [4] * 4


def stall_then_kill(victim):
    c = _comm("doomed")
    c.barrier()
    if c.rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    return c.allreduce(np.ones(1000))  # waits on the victim: must fail, not hang


def test_engine_killed_mid_collective_fails_the_others(cluster):
    ids = cluster.client.ids[-3:]
    dv = cluster.client[ids]
    dv.communicator(name="doomed", hosts="engine", timeout=TIMEOUT)
    ars = [cluster.client[eid].apply_async(stall_then_kill, 1) for eid in ids]
    for k in (0, 2):
        with pytest.raises(RemoteError) as err:
            ars[k].get(timeout=TIMEOUT)
        assert err.value.ename == "CommError"
        # the one that saw it names rank 1; the other may hear it through that one's ABORT
        assert re.search(r"rank\(s\) \[1\]|rank 1 is|aborted", str(err.value)), str(err.value)


def hub_only_victim():
    c = _comm("hubwatch")
    c._links._local_pids.clear()  # as if on another host: no pid to check, no ROUTER probe
    c.barrier()
    if c.rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return c.allreduce(1)


def test_a_lower_rank_lost_on_another_host_is_reported_by_the_hub(cluster):
    """Rank 1 cannot see rank 0 die from its side (a DEALER does not tell, and no pid on
    'another host'): the hub's heartbeat notices and the rendezvous member tells it."""
    ids = cluster.client.ids[:2]
    cluster.client[ids].communicator(name="hubwatch", hosts="engine", timeout=TIMEOUT)
    ars = [cluster.client[eid].apply_async(hub_only_victim) for eid in ids]
    with pytest.raises(RemoteError) as err:
        ars[1].get(timeout=TIMEOUT)
    assert err.value.ename == "CommError"
    assert "hub" in str(err.value) and "[0]" in str(err.value), str(err.value)
