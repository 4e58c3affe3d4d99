"""Two-phase gather, scatter, allgather, alltoall and scan (comm.twophase): several ranks per
faked host, checked against Python / numpy for sizes 1-5 and 8, both sides of
coll_maxlinear and of coll_xsize, hosts of consecutive ranks and interleaved ones."""

import numpy as np
import pytest
from test_collectives_threads import _buffers, _check_buffers, _check_objects, _objects
from threadranks import run_ranks

from zpar.comm import ops


def _blocks_of(n, k):
    """Hosts of k consecutive ranks each (the last one may be smaller)."""
    return [f"h{r // k}" for r in range(n)]


def _interleaved(n):
    return [f"h{r % 2}" for r in range(n)]


LAYOUTS = {"pairs": lambda n: _blocks_of(n, 2), "triples": lambda n: _blocks_of(n, 3)}
LAYOUTS["interleaved"] = _interleaved


def _reported(c):
    """Which of the collectives went two-phase, and their results (checked by the caller)."""
    r, n = c.rank, c.size
    seen = {}
    out = {"gather": c.gather(r, root=n - 1)}
    seen["gather"] = c.last_two_phase
    out["scatter"] = c.scatter(list(range(n)) if r == n - 1 else None, root=n - 1)
    seen["scatter"] = c.last_two_phase
    out["allgather"] = c.allgather(r)
    seen["allgather"] = c.last_two_phase
    out["alltoall"] = c.alltoall([r * 100 + j for j in range(n)])
    seen["alltoall"] = c.last_two_phase
    out["scan"] = c.scan(str(r), op=lambda a, b: a + b)  # not commutative: order kept
    seen["scan"] = c.last_two_phase
    g = np.empty(n * 2) if r == 0 else None
    c.Gather(np.full(2, float(r)), g, root=0)
    seen["Gather"] = c.last_two_phase
    out["Gather"] = g
    s = np.empty(3)
    c.Scatter(np.arange(3.0 * n) if r == 0 else None, s, root=0)
    seen["Scatter"] = c.last_two_phase
    out["Scatter"] = s
    t = np.empty(n)
    c.Alltoall(np.arange(n, dtype=float) + 10 * r, t)
    seen["Alltoall"] = c.last_two_phase
    out["Alltoall"] = t
    sc = np.empty(2, np.int64)
    c.Scan(np.full(2, r + 1, np.int64), sc, op=ops.SUM)
    seen["Scan"] = c.last_two_phase
    out["Scan"] = sc
    return out, seen


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("maxlinear", [4, 2])
def test_object_collectives_with_ranks_sharing_hosts(n, layout, maxlinear):
    hosts = LAYOUTS[layout](n)
    res = run_ranks(n, _objects, hosts=hosts, coll_maxlinear=maxlinear)
    _check_objects(res, n)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("layout", ["pairs", "interleaved"])
@pytest.mark.parametrize("elems", [4, 3000])  # both sides of coll_xsize (1024 B)
@pytest.mark.parametrize("maxlinear", [4, 2])
def test_buffer_collectives_with_ranks_sharing_hosts(n, layout, elems, maxlinear):
    hosts = LAYOUTS[layout](n)
    res = run_ranks(n, _buffers(elems), hosts=hosts, coll_maxlinear=maxlinear, maxdatalen=4096)
    _check_buffers(res, n, elems)


@pytest.mark.parametrize("n", [3, 4, 5, 8])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_which_collectives_go_two_phase(n, layout):
    hosts = LAYOUTS[layout](n)
    res = run_ranks(n, _reported, hosts=hosts)
    consecutive = layout != "interleaved"
    for r, (out, seen) in enumerate(res):
        assert out["gather"] == (list(range(n)) if r == n - 1 else None)
        assert out["scatter"] == r
        assert out["allgather"] == list(range(n))
        assert out["alltoall"] == [j * 100 + r for j in range(n)]
        assert out["scan"] == "".join(str(i) for i in range(r + 1))
        if r == 0:
            assert out["Gather"].tolist() == [float(i) for i in range(n) for _ in range(2)]
        assert out["Scatter"].tolist() == [3.0 * r, 3.0 * r + 1, 3.0 * r + 2]
        assert out["Alltoall"].tolist() == [float(r + 10 * j) for j in range(n)]
        assert out["Scan"].tolist() == [(r + 1) * (r + 2) // 2] * 2
        # one host: no global phase, the flat algorithms are the local one
        two = 1 < len(set(hosts)) < n
        expect = dict.fromkeys(seen, two)
        expect["scan"] = expect["Scan"] = two and consecutive  # scan: consecutive hosts
        assert seen == expect


def test_long_arrays_stay_direct_and_one_host_has_no_global_phase():
    def run(c):
        g = np.empty((c.size, 500)) if c.rank == 0 else None
        c.Gather(np.full(500, float(c.rank)), g, root=0)  # 4000 B >= coll_xsize
        long_two = c.last_two_phase
        c.gather(c.rank)
        return long_two, c.last_two_phase, None if g is None else g[:, 0].tolist()

    res = run_ranks(4, run, hosts=_blocks_of(4, 2))
    assert [r[:2] for r in res] == [(False, True)] * 4
    assert res[0][2] == [0.0, 1.0, 2.0, 3.0]
    assert [r[1] for r in run_ranks(3, run, hosts=["a"] * 3)] == [False] * 3
