"""Handles (client/handles.py): AsyncResults by msg_id, held weakly, swept as they die."""

from __future__ import annotations

import gc

from zpar.client.handles import SWEEP_MIN, Handles


class Result:
    """What Handles holds: anything weakly referenceable."""


def test_a_handle_is_found_under_each_msg_id_while_it_is_held():
    h, ar = Handles(), Result()
    h.add(["a", "b"], ar)
    assert h.get("a") is ar and h["b"] is ar and "a" in h
    assert sorted(h.keys()) == ["a", "b"] and len(h) == 2
    assert h.get("nope") is None and "nope" not in h


def test_a_dropped_handle_is_gone_and_keeps_nothing_alive():
    h = Handles()
    ar = Result()
    h["m"] = ar
    del ar
    gc.collect()
    assert h.get("m") is None and "m" not in h and h.items() == [] and len(h) == 0


def test_dead_entries_are_swept_so_the_table_stays_bounded():
    h = Handles()
    kept = []
    for i in range(20 * SWEEP_MIN):
        ar = Result()
        h.add([f"m{i}"], ar)
        if i % 10 == 0:
            kept.append(ar)  # one in ten is held by the user
    del ar
    # never more than twice the live entries (or SWEEP_MIN) in the table
    assert len(h._refs) <= max(SWEEP_MIN, 2 * len(kept)) + 1
    assert len(h) == len(kept)
    assert all(h.get(f"m{i}") is kept[i // 10] for i in range(0, 20 * SWEEP_MIN, 10))


def test_pop_and_clear_forget_handles():
    h, a, b = Handles(), Result(), Result()
    h.add(["a"], a)
    h.add(["b"], b)
    assert h.pop("a") is a and h.pop("a", "gone") == "gone"
    h.clear()
    assert h.get("b") is None and len(h) == 0
