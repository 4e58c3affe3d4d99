"""validate(): true for good exports, false with a reason for each broken rule; owned-index
counts and global<->local maps against brute force; cross-process consistency checks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from zpar.darray import LocalArray, validate
from zpar.darray.consistency import EngineExport, InconsistentExport, check_global
from zpar.darray.layout import check_grid, choose_grid, dim_data_for_all, parse_dist
from zpar.darray.maps import AxisMap, CyclicMap, Distribution, cyclic_owned_count


def export_of(shape=(4, 6), dim_data=None):
    buf = np.zeros(shape)
    if dim_data is None:
        dim_data = (
            {
                "dist_type": "b",
                "size": 8,
                "proc_grid_size": 2,
                "proc_grid_rank": 0,
                "start": 0,
                "stop": 4,
            },
            {"dist_type": "c", "size": 12, "proc_grid_size": 2, "proc_grid_rank": 1, "start": 1},
        )
    return {"__version__": "0.10.0", "buffer": buf, "dim_data": dim_data}


def test_good_export_and_alias():
    assert validate(export_of()) == (True, "")
    e = export_of(dim_data=({}, {}))
    assert validate(e) == (True, "")


def broken(mutate):
    e = export_of()
    e["dim_data"] = tuple(dict(d) for d in e["dim_data"])
    mutate(e)
    return validate(e)


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda e: e["dim_data"][0].update(padding=[0, 0]), "must be a tuple"),
        (
            lambda e: e["dim_data"][0].update(start=np.int64(0)),
            "must be a Python int, not numpy.int64",
        ),
        (lambda e: e["dim_data"][1].update(size=np.int32(12)), "must be a Python int"),
        (lambda e: e.update(__version__="1.0.0"), "not supported"),
        (lambda e: e.update(__version__="0.9"), "major.minor.patch"),
        (lambda e: e.update(dim_data=e["dim_data"][:1]), "len(dim_data) is 1 but buffer.ndim is 2"),
        (
            lambda e: e["dim_data"][1].update(start=0),
            "cyclic start 0 != proc_grid_rank * block_size",
        ),
        (
            lambda e: e["dim_data"][1].update(block_size=2),
            "cyclic start 1 != proc_grid_rank * block_size (1 * 2)",
        ),
        (
            lambda e: e["dim_data"][0].update(stop=3),
            "stop - start is 3 but the buffer's length is 4",
        ),
        (lambda e: e["dim_data"][0].update(stop=9, start=5), "greater than size"),
        (lambda e: e["dim_data"][0].update(proc_grid_rank=2), "proc_grid_rank 2 is not less than"),
        (lambda e: e["dim_data"][0].update(dist_type="x"), "dist_type 'x'"),
        (lambda e: e["dim_data"][0].pop("size"), "'size' is missing"),
        (lambda e: e["dim_data"][0].update(periodic=1), "periodic 1 must be a bool"),
        (lambda e: e["dim_data"][0].update(padding=(1, -1)), "negative"),
        (lambda e: e.update(dim_data=list(e["dim_data"])), "must be a tuple"),
        (lambda e: e.update(buffer=[1, 2]), "no buffer interface"),
        (lambda e: e.update(extra=1), "extra ['extra']"),
        (lambda e: e["dim_data"][1].update(size=14), "owns 7 indices but the buffer's length is 6"),
    ],
)
def test_each_broken_rule_is_named(mutate, reason):
    ok, why = broken(mutate)
    assert not ok
    assert reason in why, why


def test_unstructured_rules():
    dd = {"dist_type": "u", "size": 5, "proc_grid_size": 1, "proc_grid_rank": 0}
    good = {**dd, "indices": np.array([4, 0, 2])}
    assert validate({"__version__": "0.10.0", "buffer": np.zeros(3), "dim_data": (good,)}) == (
        True,
        "",
    )
    dup = {**dd, "indices": np.array([4, 4, 2])}
    ok, why = validate({"__version__": "0.10.0", "buffer": np.zeros(3), "dim_data": (dup,)})
    assert not ok and "not locally unique" in why
    floats = {**dd, "indices": np.array([4.0, 1.0, 2.0])}
    ok, why = validate({"__version__": "0.10.0", "buffer": np.zeros(3), "dim_data": (floats,)})
    assert not ok and "integers" in why


def brute_force_owner(size, grid, block_size):
    """Deal blocks of ``block_size`` round-robin, one index at a time."""
    owner = []
    for g in range(size):
        owner.append((g // block_size) % grid)
    return owner


@pytest.mark.parametrize(
    "size, grid, bs",
    list(itertools.product([0, 1, 3, 5, 7, 9, 10, 17], [1, 2, 3, 4], [1, 2, 3, 5])),
)
def test_cyclic_owned_counts_and_indices_against_brute_force(size, grid, bs):
    owner = brute_force_owner(size, grid, bs)
    for r in range(grid):
        want = [g for g in range(size) if owner[g] == r]
        assert cyclic_owned_count(size, grid, r, bs) == len(want)
        m = CyclicMap(
            {
                "size": size,
                "proc_grid_size": grid,
                "proc_grid_rank": r,
                "start": r * bs,
                "block_size": bs,
            }
        )
        assert m.global_indices().tolist() == want


def test_published_appendix_formula_is_wrong_for_a_partial_last_block():
    # size 5, block size 2, 3 positions: blocks [0 1] [2 3] [4]: position 2 owns index 4,
    # position 0 owns 2 (the appendix's num_owned_indices gives position 0 the partial block).
    assert [cyclic_owned_count(5, 3, r, 2) for r in range(3)] == [2, 2, 1]


@pytest.mark.parametrize(
    "shape, dist, grid",
    [
        ((10,), ("b",), (4,)),
        ((3,), ("c",), (4,)),
        ((11,), (("c", 3),), (3,)),
        ((7, 5), ("c", ("c", 2)), (2, 3)),
        ((6, 5), (("b", [0, 4, 4, 6]), "n"), (3, 1)),
        ((6,), (("u", [[5, 1], [0, 2, 3], [4]]),), (3,)),
    ],
)
def test_global_local_maps_round_trip(shape, dist, grid):
    specs = parse_dist(dist, shape)
    grid = check_grid(grid, specs, int(np.prod(grid)))
    per_rank = dim_data_for_all(shape, specs, grid, None, None)
    d = Distribution(per_rank)
    seen = np.zeros(shape, dtype=int)
    for rank, maps in enumerate(d.local_maps):
        coords = d.coords(rank)
        assert d.rank(coords) == rank
        assert tuple(m.grid_rank for m in maps) == coords
        for local in itertools.product(*[range(m.local_len) for m in maps]):
            g = tuple(int(m.global_indices()[i]) for m, i in zip(maps, local, strict=True))
            seen[g] += 1
            for axis, ax in enumerate(d.axes):
                owner, loc = ax.locate(g[axis])
                assert owner == coords[axis] and loc == local[axis]
    assert np.all(seen == 1)  # every global index owned exactly once


def test_empty_local_buffer_size_3_cyclic_over_4():
    specs = parse_dist(("c",), (3,))
    per_rank = dim_data_for_all((3,), specs, (4,), None, None)
    las = [LocalArray(np.zeros(cyclic_owned_count(3, 4, r)), dd) for r, dd in enumerate(per_rank)]
    assert [la.ndarray.shape for la in las] == [(1,), (1,), (1,), (0,)]
    assert las[3].dim_data[0]["start"] == 3 == las[3].dim_data[0]["size"]
    for la in las:
        assert validate(la.__distarray__()) == (True, "")


def test_padded_block_layout_18_over_2():
    specs = parse_dist(("b",), (18,))
    per_rank = dim_data_for_all((18,), specs, (2,), [(1, 1)], [True])
    assert per_rank[0][0] == {
        "dist_type": "b",
        "size": 18,
        "proc_grid_size": 2,
        "proc_grid_rank": 0,
        "start": 0,
        "stop": 10,
        "padding": (1, 1),
        "periodic": True,
    }
    assert per_rank[1][0]["start"] == 8 and per_rank[1][0]["stop"] == 18
    ax = AxisMap([Distribution(per_rank).local_maps[r][0] for r in range(2)])
    assert ax.owner.tolist() == [0] * 9 + [1] * 9
    assert ax.local.tolist() == list(range(9)) + list(range(1, 10))  # rank 1's local 0 is a ghost


def test_choose_grid_prefers_square_blocks():
    assert choose_grid((8000, 8000), parse_dist(("b", "b"), (8000, 8000)), 4) == (2, 2)
    assert choose_grid((100, 10), parse_dist(("b", "b"), (100, 10)), 4) == (4, 1)
    assert choose_grid((5, 9), parse_dist(("b", "n"), (5, 9)), 3) == (3, 1)
    with pytest.raises(ValueError, match="multiple of 2"):
        choose_grid((6,), parse_dist((("u", [[0, 1, 2], [3, 4, 5]]),), (6,)), 3)


def test_bad_user_distributions_are_refused():
    with pytest.raises(ValueError, match="repeat an index"):
        parse_dist((("u", [[0, 0, 1], [2]]),), (3,))
    with pytest.raises(ValueError, match="given to two grid positions"):
        parse_dist((("u", [[0, 1], [1, 2]]),), (3,))
    with pytest.raises(ValueError, match="cover 2 of 3"):
        parse_dist((("u", [[0], [1]]),), (3,))
    with pytest.raises(ValueError, match="bounds"):
        parse_dist((("b", [0, 5, 3]),), (3,))
    with pytest.raises(ValueError, match="dist\\[0\\] = 'x'"):
        parse_dist(("x",), (3,))
    with pytest.raises(ValueError, match="equal widths"):
        dim_data_for_all((10,), parse_dist(("b",), (10,)), (2,), [(1, 2)], None)


def exports(shape, dist, grid, padding=None, periodic=None):
    specs = parse_dist(dist, shape)
    per_rank = dim_data_for_all(shape, specs, grid, padding, periodic)
    d = Distribution(per_rank)
    return [
        EngineExport(f"e{r}", dd, tuple(m.local_len for m in d.local_maps[r]), "float64")
        for r, dd in enumerate(per_rank)
    ]


def test_consistency_accepts_and_orders_by_grid_rank():
    ex = exports((5, 9), ("b", "c"), (2, 2))
    assert [e.engine for e in check_global(list(reversed(ex)))] == ["e0", "e1", "e2", "e3"]
    check_global(exports((18,), ("b",), (2,), [(1, 1)], [True]))
    check_global(exports((6,), (("u", [[5, 1], [0, 2, 3], [4]]),), (3,)))


def tamper(ex, rank, axis, **changes):
    dd = list(ex[rank].dim_data)
    dd[axis] = {**dd[axis], **changes}
    ex[rank] = EngineExport(ex[rank].engine, tuple(dd), ex[rank].shape, ex[rank].dtype)
    return ex


@pytest.mark.parametrize(
    "make, engine, rule",
    [
        (lambda: tamper(exports((5, 9), ("b", "b"), (2, 2)), 3, 0, size=6), "e3", "size 6"),
        (lambda: tamper(exports((10,), ("b",), (2,)), 1, 0, start=6), "e0", "must be adjacent"),
        (lambda: tamper(exports((10,), ("b",), (2,)), 1, 0, stop=9), "e1", "not at size 10"),
        (
            lambda: tamper(exports((10,), ("b",), (2,), [(1, 1)]), 1, 0, padding=(2, 1), start=3),
            "e0",
            "differs from the next block's left padding",
        ),
        (
            lambda: tamper(exports((4,), ("b",), (2,)), 1, 0, proc_grid_rank=0, start=0, stop=2),
            "e1",
            "also held by engine e0",
        ),
        (
            lambda: tamper(
                exports((6,), (("u", [[5, 1], [0, 2, 3], [4]]),), (3,)), 2, 0, indices=np.array([1])
            ),
            "e2",
            "no engine holds indices [4]",
        ),
        (
            lambda: tamper(
                exports((6,), (("u", [[5, 1], [0, 2, 3], [4]]),), (3,)), 2, 0, indices=np.array([7])
            ),
            "e2",
            "outside",
        ),
        (
            lambda: tamper(exports((4, 4), ("b", "b"), (2, 2)), 1, 0, stop=3),
            "e1",
            "differs from engine e0",
        ),
    ],
)
def test_consistency_refusals_name_engine_and_rule(make, engine, rule):
    with pytest.raises(InconsistentExport) as info:
        check_global(make())
    assert info.value.engine == engine, str(info.value)
    assert rule in info.value.rule, str(info.value)


@pytest.mark.parametrize("make", ["zeros", "ones", "empty", "full", "fromarray", "fromfunction"])
def test_every_constructor_names_an_unknown_layout_keyword(make):
    """The constructors share one keyword-only layout (darray.client.Layout): a misspelt
    keyword is a TypeError naming it, before any engine is asked."""
    from zpar.darray.client import DarrayClient

    darray = DarrayClient(client=None)  # refused before the client is touched
    args = {"full": ((4,), 1.0), "fromarray": (np.zeros(4),), "fromfunction": (abs, (4,))}
    with pytest.raises(TypeError, match="unknown layout keyword.*grid\\b.*grid_shape"):
        getattr(darray, make)(*args.get(make, ((4,),)), grid=(2,))
