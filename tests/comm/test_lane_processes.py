"""Ranks as processes on one host, more of them than CPUs (8 on 2): a wait never
pause-spins (it takes turns with sched_yield for a bounded time, then sleeps on the lane's
futex words), and point-to-point and collectives still run to the end with the right
results, with the compiled lane and with its twin."""

from __future__ import annotations

import numpy as np
import pytest
from procranks import run_processes

from zpar.comm import IN_PLACE, MAX, lane, mailbox

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not mailbox.SUPPORTED, reason="mailboxes are x86-64 only"),
]


def crowd(c):
    """Rings of objects and buffers, pairwise ping-pong, every kind of collective."""
    r, n = c.rank, c.size
    right, left = (r + 1) % n, (r - 1) % n
    total = 0
    for i in range(100):
        assert c.sendrecv((r, i), dest=right, source=left) == (left, i)
        got = np.empty(2)
        c.Sendrecv(np.array([r, i], dtype=float), dest=right, recvbuf=got, source=left)
        assert got.tolist() == [left, i]
        peer = r ^ 1  # pairs (0, 1), (2, 3), ...
        buf = np.full(1, float(r))
        if r < peer:
            c.Send(buf, dest=peer, tag=i)
            c.Recv(buf, source=peer, tag=i)
            assert buf[0] == peer
            c.send({"i": i}, dest=peer, tag=1)
            assert c.recv(source=peer, tag=2) == {"i": i, "back": peer}
        else:
            c.Recv(buf, source=peer, tag=i)
            c.Send(np.full(1, float(r)), dest=peer, tag=i)
            c.send({**c.recv(source=peer, tag=1), "back": r}, dest=peer, tag=2)
        out = np.empty(1)
        c.Allreduce(np.full(1, float(r)), out)  # the lane's one call, SUM on float64
        total += int(out[0]) + c.allreduce(1)
        top = np.empty(2, dtype=np.int32)
        c.Allreduce(np.array([r, -r], dtype=np.int32), top, op=MAX)  # int32 MAX: the lane
        assert top.tolist() == [n - 1, 0]
        z = np.empty(1, dtype=complex)
        c.Allreduce(np.array([1j * r]), z)  # complex: the Python rounds combine it
        assert z[0] == 1j * sum(range(n))
        m = np.full((2, 2), r, dtype=np.int64)
        c.Allreduce(IN_PLACE, m)  # in place, 2-D: combined into m by the lane
        assert (m == sum(range(n))).all()
        assert c.bcast(i if r == 3 else None, root=3) == i
        c.Barrier()
    big = np.arange(100_000, dtype=float) * r  # long messages take the socket or CMA
    rbig = np.empty_like(big)
    c.Sendrecv(big, dest=right, recvbuf=rbig, source=left)
    assert (rbig == np.arange(100_000) * left).all()
    links = c._links
    lane = links.lane
    waits = (lane.room_waits, lane.yield_waits, lane.sleeps)
    return total, links.futex, links.spins, waits, type(links.lane).__module__


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "twin"])
def test_eight_ranks_on_two_cores_sleep_on_futexes_and_finish(pure):
    if not pure and not lane.COMPILED:
        pytest.skip("the compiled lane was not built (no C compiler at install)")
    n = 8
    results = run_processes(n, crowd, cpus=2, pure=pure, timeout=120)
    for total, futex, spins, (room, yields, sleeps), module in results:
        assert total == 100 * (sum(range(n)) + n)
        assert futex and not spins  # all on one host, oversubscribed: never pause-spin
        assert room == 0 and yields > 0 and sleeps > 0  # yield, then sleep
        assert module.endswith("lanepy" if pure else "_lane")


def quartet(c):
    """A 4-rank round of what the lane carries: Allreduce in one call, ping-pongs, bcast."""
    r = c.rank
    out = np.empty(1)
    c.Allreduce(np.full(1, float(r + 1)), out)
    peer = r ^ 1
    if r < peer:
        c.send(("hi", r), dest=peer)
        got = c.recv(source=peer)
    else:
        got = c.recv(source=peer)
        c.send(("hi", r), dest=peer)
    lane = c._links.lane
    return out[0], got, c.bcast(r if r == 2 else None, root=2), type(lane).__module__


def test_zpar_comm_pure_chooses_the_twin_for_every_rank():
    """ZPAR_COMM_PURE=1 in the environment (as CI's twin run sets it) makes zpar.comm.lane
    the pure-Python twin, and a communicator of rank processes works on it end to end."""
    import json
    import os
    import subprocess
    import sys

    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "from zpar.comm import lane; from procranks import run_processes;"
        "from test_lane_processes import quartet;"
        "res = run_processes(4, quartet, cpus=2, timeout=60);"
        "print(json.dumps([lane.COMPILED, [[a, list(b), c, d] for a, b, c, d in res]]))"
    )
    here = os.path.dirname(__file__)
    env = {**os.environ, "ZPAR_COMM_PURE": "1"}
    run = subprocess.run(
        [sys.executable, "-c", script, here], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-3000:]
    compiled, results = json.loads(run.stdout.strip().splitlines()[-1])
    assert compiled is False
    for r, (total, got, root, module) in enumerate(results):
        assert total == 10.0 and got == ["hi", r ^ 1] and root == 2
        assert module.endswith("lanepy")
