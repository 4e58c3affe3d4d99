"""Reductions, halo exchange and redistribution between sections, in memory: one thread
per rank and a small communicator with mpi4py's method names (pickled messages through
queues), so the algorithms are checked against numpy without sockets."""

from __future__ import annotations

import pickle
import queue
import threading
import uuid
from collections import defaultdict

import numpy as np
import pytest

from zpar.comm.communicator import Communicator
from zpar.comm.links import PeerLinks
from zpar.darray import LocalArray
from zpar.darray.collective import exchange_halos, redistribute, reduce_all, reduce_axis
from zpar.darray.layout import check_grid, choose_grid, dim_data_for_all, parse_dist
from zpar.darray.maps import Distribution, global_keys, outer_key, owned_piece


class ThreadWorld:
    def __init__(self, size):
        self.size = size
        self.queues = defaultdict(queue.Queue)
        self.lock = threading.Lock()

    def q(self, src, dst, tag):
        with self.lock:
            return self.queues[(src, dst, tag)]


class ThreadComm:
    """mpi4py's lowercase (pickle-based) calls, enough for zpar.darray.collective."""

    SUM, MIN, MAX = np.add, np.minimum, np.maximum

    def __init__(self, world, rank):
        self.world, self.rank, self.size = world, rank, world.size

    def send(self, obj, dest, tag=0):
        self.world.q(self.rank, dest, tag).put(pickle.dumps(obj))

    def recv(self, source, tag=0):
        return pickle.loads(self.world.q(source, self.rank, tag).get(timeout=30))

    def sendrecv(self, sendobj, dest, sendtag=0, source=None, recvtag=0):
        self.send(sendobj, dest, sendtag)
        return self.recv(source, recvtag)

    def Send(self, buf, dest, tag=0):  # noqa: N802 - mpi4py's names
        self.send(np.array(buf), dest, tag)

    def Recv(self, buf, source, tag=0):  # noqa: N802
        data = self.recv(source, tag)
        assert data.shape == buf.shape and data.dtype == buf.dtype, "mismatched buffers"
        buf[...] = data

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=None, recvtag=0):  # noqa: N802
        self.Send(sendbuf, dest, sendtag)
        self.Recv(recvbuf, source, recvtag)

    def allgather(self, obj):
        for r in range(self.size):
            self.send(obj, r, tag=-1)
        return [self.recv(r, tag=-1) for r in range(self.size)]

    def allreduce(self, obj, op):
        parts = self.allgather(obj)
        out = parts[0]
        for p in parts[1:]:
            out = op(out, p)
        return out

    def alltoall(self, objs):
        assert len(objs) == self.size
        for r, o in enumerate(objs):
            self.send(o, r, tag=-2)
        return [self.recv(r, tag=-2) for r in range(self.size)]


def on_threads(n, rank_main, join_timeout, daemon=False):
    """rank_main(r) on n threads; their results by rank (an exception in any fails the test)."""
    results, errors = [None] * n, []

    def body(r):
        try:
            results[r] = rank_main(r)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(r,), daemon=daemon) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_timeout)
    if errors:
        raise errors[0]
    return results


def run_ranks_links(n, fn):
    """fn(comm) on n threads, each with zpar.comm's real communicator over loopback links."""
    comm_id = uuid.uuid4().hex
    links = [PeerLinks(r, n, comm_id, b"test-key") for r in range(n)]
    table = [lk.bind() for lk in links]

    def rank_main(r):
        try:
            links[r].dance(table, 60)
            comm = Communicator(links[r], [f"h{r}" for r in range(n)], timeout=60)
            result = fn(comm)
            comm.Free()
            return result
        finally:
            links[r].close()

    return on_threads(n, rank_main, 90, daemon=True)


def run_ranks_fake(n, fn):
    """fn(comm) on n threads, each with the in-memory stand-in for mpi4py's communicator."""
    world = ThreadWorld(n)
    return on_threads(n, lambda r: fn(ThreadComm(world, r)), 60)


@pytest.fixture(params=["threads", "zpar.comm"])
def run_ranks(request):
    """Each algorithm over the in-memory stand-in and over zpar's communicator."""
    return run_ranks_fake if request.param == "threads" else run_ranks_links


def sections(full, dist, grid=None, padding=None, periodic=None, nprocs=4):
    specs = parse_dist(dist, full.shape)
    grid = (
        choose_grid(full.shape, specs, nprocs) if grid is None else check_grid(grid, specs, nprocs)
    )
    per_rank = dim_data_for_all(full.shape, specs, grid, padding, periodic)
    d = Distribution(per_rank)
    las = []
    for r in range(len(per_rank)):
        la = LocalArray(
            np.zeros(tuple(m.local_len for m in d.local_maps[r]), dtype=full.dtype), per_rank[r]
        )
        la.owned[...] = owned_piece(full, d.local_maps[r])
        las.append(la)
    return las, d


FULL = np.arange(45.0).reshape(5, 9) * np.where(np.arange(45) % 3, 1, -1).reshape(5, 9)
LAYOUTS = [
    (("b", "b"), (2, 2)),
    (("c", ("c", 2)), (2, 2)),
    ((("u", [[3, 0], [4, 2, 1]]), "b"), (2, 2)),
    (("b", "n"), (4, 1)),
    (("c", "b"), (4, 1)),  # 5 rows cyclic over 4
    ((("b", [0, 0, 2, 5]), "n"), (3, 1)),  # an empty block
]


@pytest.mark.parametrize("dist, grid", LAYOUTS)
@pytest.mark.parametrize("op, ref", [("sum", np.sum), ("min", np.min), ("max", np.max)])
def test_reduce_all(run_ranks, dist, grid, op, ref):
    las, d = sections(FULL, dist, grid, nprocs=int(np.prod(grid)))
    got = run_ranks(
        len(las), lambda comm: reduce_all(las[comm.rank], comm, op, getattr(comm, op.upper()))
    )
    assert all(g == ref(FULL) for g in got)


def test_reduce_all_with_empty_sections_and_ints(run_ranks):
    full = np.array([5, -3, 7], dtype=np.int32)
    las, _ = sections(full, ("c",), (4,))
    for op, ref in [("sum", 9), ("min", -3), ("max", 7)]:
        got = run_ranks(
            4, lambda comm, op=op: reduce_all(las[comm.rank], comm, op, getattr(comm, op.upper()))
        )
        assert got == [ref] * 4


@pytest.mark.parametrize("dist, grid", LAYOUTS)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op, ref", [("sum", np.sum), ("min", np.min), ("max", np.max)])
def test_reduce_axis(run_ranks, dist, grid, axis, op, ref):
    las, d = sections(FULL, dist, grid, nprocs=int(np.prod(grid)))
    coords = [d.coords(r) for r in range(len(las))]
    got = run_ranks(len(las), lambda comm: reduce_axis(las[comm.rank], comm, op, axis, coords))
    want = ref(FULL, axis=axis)
    out = np.full(want.shape, np.nan)
    for r, part in enumerate(got):
        if coords[r][axis] != 0:
            assert part is None
            continue
        maps = [m for i, m in enumerate(d.local_maps[r]) if i != axis]
        if part is not None:
            out[outer_key(global_keys(maps))] = part
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("periodic", [False, True])
def test_halo_exchange_padded_block_18_over_2(run_ranks, periodic):
    full = np.arange(18.0)
    las, d = sections(full, ("b",), (2,), padding=[(1, 1)], periodic=[periodic], nprocs=2)
    # before: the communication padding is zero, everything else the data
    assert las[0].ndarray.tolist() == list(range(9)) + [0]
    assert las[1].ndarray.tolist() == [0] + list(range(9, 18))
    coords = [d.coords(r) for r in range(2)]
    pads = [[(1, 1), (1, 1)]]
    run_ranks(2, lambda comm: exchange_halos(las[comm.rank], comm, coords, pads))
    left, right = las[0].ndarray.tolist(), las[1].ndarray.tolist()
    assert left[1:] == list(range(1, 10)) and right[:-1] == list(range(8, 17))
    if periodic:  # boundary padding wraps: global 0 <- 16, global 17 <- 1
        assert left[0] == 16 and right[-1] == 1
    else:  # boundary values untouched
        assert left[0] == 0 and right[-1] == 17


@pytest.mark.parametrize("grid", [(2, 2), (4, 1), (1, 4)])
def test_halo_exchange_2d_periodic_matches_numpy_wrap(run_ranks, grid):
    # interior 6x10 in a 8x12 global array with one cell of boundary padding all round
    interior = np.arange(60.0).reshape(6, 10)
    full = np.zeros((8, 12))
    full[1:-1, 1:-1] = interior
    las, d = sections(full, ("b", "b"), grid, padding=[(1, 1), (1, 1)], periodic=[True, True])
    coords = [d.coords(r) for r in range(4)]
    pads = [[(1, 1)] * grid[0], [(1, 1)] * grid[1]]
    run_ranks(4, lambda comm: exchange_halos(las[comm.rank], comm, coords, pads))
    wrapped = np.pad(interior, 1, mode="wrap")  # what every section's window must show
    for r, la in enumerate(las):
        rows, cols = (la.maps[0].start, la.maps[0].stop), (la.maps[1].start, la.maps[1].stop)
        np.testing.assert_array_equal(
            la.ndarray, wrapped[rows[0] : rows[1], cols[0] : cols[1]], err_msg=f"rank {r}"
        )


def test_periodic_wrap_needs_interior_cells_at_the_edges(run_ranks):
    full = np.zeros((10,))  # blocks of 3, 3, 3, 1: the last holds only its boundary cell
    with pytest.raises(ValueError, match="too few to wrap around"):
        sections(full, ("b",), (4,), padding=[(1, 1)], periodic=[True])
    las, d = sections(full, ("b",), (4,), padding=[(1, 1)], periodic=[False])  # fine
    coords = [d.coords(r) for r in range(4)]
    run_ranks(4, lambda comm: exchange_halos(las[comm.rank], comm, coords, [[(1, 1)] * 4]))


@pytest.mark.parametrize(
    "src, dst",
    [
        ((("b", "b"), (2, 2)), (("c", "c"), (2, 2))),
        ((("b", "n"), (4, 1)), (("n", ("c", 2)), (1, 4))),
        (
            ((("u", [[3, 0], [4, 2, 1]]), "b"), (2, 2)),
            ((("b", [0, 1, 5]), ("b", [0, 2, 9])), (2, 2)),
        ),
        ((("c", "b"), (4, 1)), (("b", "b"), (2, 2))),
    ],
)
def test_redistribute(run_ranks, src, dst):
    las, _ = sections(FULL, *src)
    specs = parse_dist(dst[0], FULL.shape)
    new = dim_data_for_all(FULL.shape, specs, check_grid(dst[1], specs, 4), None, None)
    got = run_ranks(4, lambda comm: redistribute(las[comm.rank], comm, new))
    want, _ = sections(FULL, *dst)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.ndarray, w.ndarray)
        assert g.dim_data[0].keys() == w.dim_data[0].keys()
