"""ReplayGuard: the replay guard's set of recent signatures (zpar.wire.replay)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zpar.wire.replay import ReplayGuard


def test_keys_added_are_found_and_others_are_not():
    guard = ReplayGuard(8)
    for k in (1, 2, 2**63, 2**64 - 1):
        guard.add(k)
    assert all(k in guard for k in (1, 2, 2**63, 2**64 - 1))
    assert 3 not in guard and 2**64 - 2 not in guard
    assert len(guard) == 4


def test_zero_stands_for_one_and_keys_are_taken_modulo_2_64():
    guard = ReplayGuard(4)
    guard.add(0)
    assert 0 in guard and 1 in guard
    guard.add(2**64 + 5)
    assert 5 in guard


def test_adding_a_key_twice_counts_it_once():
    guard = ReplayGuard(4)
    for _ in range(3):
        guard.add(7)
    assert len(guard) == 1


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity"):
        ReplayGuard(0)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 20), st.lists(st.integers(0, 2**64 - 1), unique=True, max_size=120))
def test_the_last_capacity_keys_are_always_remembered(capacity, keys):
    """However keys collide in the table, every one of the last ``capacity`` added is
    found, and at most 2 x capacity are kept."""
    keys = [k or 1 for k in keys if k != 1] or [5]
    guard = ReplayGuard(capacity)
    for i, k in enumerate(keys):
        guard.add(k)
        assert all(x in guard for x in keys[max(0, i + 1 - capacity) : i + 1])
        assert len(guard) <= 2 * capacity


def test_colliding_keys_probe_past_each_other():
    guard = ReplayGuard(64)
    mask = guard._mask
    same_home = [(n * (mask + 1)) << 32 | (n * (mask + 1)) for n in range(1, 30)]
    random.Random(0).shuffle(same_home)
    for k in same_home:
        guard.add(k)
    assert all(k in guard for k in same_home)
    assert (31 * (mask + 1)) << 32 | (31 * (mask + 1)) not in guard


def test_a_key_is_forgotten_only_after_two_generations():
    guard = ReplayGuard(2)
    guard.add(10)
    guard.add(11)  # the first generation is full: it becomes the previous one
    guard.add(12)
    assert 10 in guard and 11 in guard and 12 in guard
    guard.add(13)  # the second is full: the first is dropped
    assert 10 not in guard and 11 not in guard and 12 in guard and 13 in guard
