"""zpar/elements.py's element times (TIMES): a part's, packed on the engine and read per
element by the hub's queries and the client's metadata."""

from __future__ import annotations

from array import array

from hypothesis import given
from hypothesis import strategies as st

from zpar.elements import (
    element_dates,
    pack_part_times,
    pack_times,
    times_as_text,
    times_from_text,
)

CLOCK = 1_795_000_000.0


def _dates(times: bytes | str, n: int, lo: int = 0) -> list[tuple[float, float] | None]:
    return [element_dates(times, lo, lo + n, pos) for pos in range(lo, lo + n)]


def test_a_map_of_quick_calls_costs_a_byte_per_element():
    """1,000 calls of a few µs each: 9 bytes of head, then one byte per element."""
    ends = array("d", (5.0 + 3e-6 * (i + 1) for i in range(1000)))
    times = pack_times(CLOCK, 5.0, ends)
    assert len(times) == 9 + 1000
    dates = _dates(times, 1000)
    assert dates[0] == (CLOCK + 5.0, CLOCK + 5.0 + 3e-6)
    for i, (start, end) in enumerate(dates):  # type: ignore[misc]
        assert abs(start - (CLOCK + 5.0 + 3e-6 * i)) < 1e-6
        assert abs(end - (CLOCK + 5.0 + 3e-6 * (i + 1))) < 1e-6


def test_the_width_is_the_narrowest_that_holds_the_longest_element():
    for seconds, width in [(0.0002, 1), (0.06, 2), (4000.0, 4), (5000.0, 8)]:
        times = pack_times(CLOCK, 0.0, array("d", [1e-6, 1e-6 + seconds]))
        assert times[0] == width and len(times) == 9 + 2 * width
        assert abs(element_dates(times, 0, 2, 1)[1] - (CLOCK + 1e-6 + seconds)) < 1e-6


@given(
    st.lists(st.floats(min_value=0, max_value=1e4, allow_nan=False), min_size=1, max_size=300),
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
)
def test_rounding_does_not_accumulate_along_a_part(runs, start):
    """Offsets are rounded from the part's start, then differenced: every date is within
    a µs of the engine's, however long the part (and float rounding of the clock)."""
    ends, t = array("d"), start
    for r in runs:
        t += r
        ends.append(t)
    times = pack_times(CLOCK, start, ends)
    dates = _dates(times, len(runs), lo=7)
    prev = start
    for (a, b), end in zip(dates, ends, strict=True):  # type: ignore[misc]
        tol = 1e-6 + 1e-15 * (CLOCK + end)
        assert abs(a - (CLOCK + prev)) <= tol and abs(b - (CLOCK + end)) <= tol
        prev = end


def test_times_of_another_length_or_position_read_as_none():
    times = pack_times(CLOCK, 0.0, array("d", [1.0, 2.0]))
    assert element_dates(times, 0, 3, 0) is None  # a part of 3 elements carries 2 times
    assert element_dates(times, 0, 2, 2) is None  # not a position of the part
    assert element_dates(b"\x03" + times[1:], 0, 2, 0) is None  # no width 3
    assert element_dates(times[:5], 0, 2, 0) is None
    assert element_dates(None, 0, 2, 0) is None
    assert element_dates(12, 0, 2, 0) is None


def test_the_store_text_reads_back_and_float64_times_stored_before_still_read():
    times = pack_times(CLOCK, 1.0, array("d", [1.5, 2.5]))
    assert times_from_text(times_as_text(times)) == times
    assert _dates(times_as_text(times), 2) == _dates(times, 2)
    old = array("d", [CLOCK, 1.0, 1.5, 2.5]).tobytes()  # clock, t0, t1, t2
    assert _dates(old, 2) == [(CLOCK + 1.0, CLOCK + 1.5), (CLOCK + 1.5, CLOCK + 2.5)]
    assert _dates(times_as_text(old), 2) == _dates(old, 2)
    assert _dates(old.decode("latin-1"), 2) == _dates(old, 2)
    assert times_from_text("not base64 !") is None


@given(st.lists(st.floats(min_value=0, max_value=1e5, allow_nan=False), max_size=40))
def test_a_few_elements_pack_as_many_do(runs):
    """Parts of up to _FEW elements are packed in Python, longer ones in numpy: the same
    bytes either way."""
    import zpar.elements as elements

    ends, t = array("d"), 3.0
    for r in runs:
        t += r
        ends.append(t)
    few = elements.pack_times(CLOCK, 3.0, ends)
    saved = elements._FEW
    elements._FEW = -1 if len(ends) <= saved else 10**9
    try:
        assert elements.pack_times(CLOCK, 3.0, ends) == few
    finally:
        elements._FEW = saved


@given(
    st.lists(st.floats(min_value=0, max_value=0.5, allow_nan=False), min_size=2, max_size=60),
    st.integers(min_value=1, max_value=59),
)
def test_the_next_part_starts_where_the_last_one_ended(runs, cut):
    """A run of elements cut in two parts: the second part's epoch is the first's end as
    element_dates reads it, so the parts never overlap (a rounding of each, or a second
    read of the clock, once put an element's start a µs before the last one's end)."""
    cut = min(cut, len(runs) - 1)
    ends, t = array("d"), 100.0
    for r in runs:
        t += r
        ends.append(t)
    first, end = pack_part_times(CLOCK + 100.0, 100.0, ends[:cut])
    second, _ = pack_part_times(end, ends[cut - 1], ends[cut:])
    a = _dates(first, cut)
    b = _dates(second, len(runs) - cut, lo=cut)
    assert a[-1][1] == end == b[0][0]
    spans = a + b
    assert all(x[1] <= y[0] for x, y in zip(spans, spans[1:], strict=False))
