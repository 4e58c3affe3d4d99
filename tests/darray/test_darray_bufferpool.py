"""The engine's pool of freed sections: reused only when nothing else refers to them."""

from __future__ import annotations

import numpy as np

from zpar.darray import LocalArray, bufferpool, engine

DIM = (
    {
        "dist_type": "b",
        "size": 512,
        "proc_grid_size": 1,
        "proc_grid_rank": 0,
        "start": 0,
        "stop": 512,
    },
) * 2


def test_a_freed_section_is_reused_for_the_next_result(ns):
    engine.allocate("a", DIM, "<f8", 1.0, False)
    engine.allocate("b", DIM, "<f8", 2.0, False)
    engine.elementwise("c", np.add, [engine.Ref("a"), engine.Ref("b")], {})
    first = ns["c"].ndarray.__array_interface__["data"][0]
    engine.free(["c"])
    engine.elementwise("c", np.multiply, [engine.Ref("a"), 3], {})
    assert ns["c"].ndarray.__array_interface__["data"][0] == first  # same memory
    np.testing.assert_array_equal(ns["c"].ndarray, np.full((512, 512), 3.0))
    assert engine.elementwise("d", np.less, [engine.Ref("a"), engine.Ref("b")], {}) == "bool"


def test_a_section_someone_still_holds_is_not_reused(ns):
    engine.allocate("a", DIM, "<f8", 5.0, False)
    kept_view = ns["a"].ndarray[:10]  # e.g. a user's variable on the engine
    kept_section = ns["a"]
    address = kept_section.ndarray.__array_interface__["data"][0]
    engine.free(["a"])
    engine.allocate("b", DIM, "<f8", 7.0, False)
    assert ns["b"].ndarray.__array_interface__["data"][0] != address
    assert kept_view[0, 0] == 5.0 and kept_section.ndarray[0, 0] == 5.0
    del kept_section
    engine.free(["b"])
    view_of_b = bufferpool._pool[-1][:1]  # a view made after recycling: never handed out
    assert bufferpool.take((512, 512), np.float64) is None
    del view_of_b


def test_adopted_memory_is_never_recycled(ns):
    data = np.ones((512, 512))
    ns["x"] = LocalArray(np.asarray(memoryview(data)), DIM)
    engine.free(["x"])
    assert bufferpool.take((512, 512), np.float64) is None


def test_padded_sections_from_the_pool_have_zero_ghost_cells(ns):
    padded = (
        {
            "dist_type": "b",
            "size": 600,
            "proc_grid_size": 2,
            "proc_grid_rank": 0,
            "start": 0,
            "stop": 301,
            "padding": (1, 1),
        },
        DIM[1],
    )
    engine.allocate("a", padded, "<f8", 9.0, False)
    engine.free(["a"])
    engine.allocate("b", padded, "<f8", 1.0, False)
    assert ns["b"].ndarray[-1].tolist() == [0.0] * 512 and ns["b"].ndarray[0, 0] == 1.0
