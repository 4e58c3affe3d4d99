"""RecentKeys behaves as a bounded insertion-ordered map, whatever the keys collide on."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zpar.wire.recent import RecentKeys

# keys from a small pool (many repeats) whose low bits collide: the table probes and shifts
_keys = st.one_of(
    st.integers(0, 40).map(lambda k: k << 40),  # same home slot for every key
    st.integers(0, 40),
    st.integers(-(2**70), 2**70),
)


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(1, 9), ops=st.lists(st.tuples(_keys, st.integers(0, 5)), max_size=80))
def test_matches_a_bounded_ordered_dict(capacity, ops):
    table, model = RecentKeys(capacity), OrderedDict()
    for key, value in ops:
        norm = (key % 2**64) or 1
        table.add(key, value)
        if norm in model:
            model[norm] = value  # keeps its age
        else:
            model[norm] = value
            if len(model) > capacity:
                model.popitem(last=False)
        assert len(table) == len(model)
        for k, v in model.items():
            assert k in table and table.get(k) == v
    for key, _ in ops:
        norm = (key % 2**64) or 1
        assert (norm in table) == (norm in model)
        assert table.get(norm, -1) == model.get(norm, -1)


def test_fixed_memory_and_a_clear_error():
    t = RecentKeys(65_536)
    before = (len(t._keys), len(t._ring))
    for k in range(200_000):
        t.add(k * 0x9E3779B97F4A7C15)
    assert (len(t._keys), len(t._ring)) == before and len(t) == 65_536
    assert 199_999 * 0x9E3779B97F4A7C15 in t and 0 not in t
    with pytest.raises(ValueError, match="capacity"):
        RecentKeys(0)
