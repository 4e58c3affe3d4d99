"""engine/burst.py: one burst of a map's elements, the interpreted loop and its compiled
twin (engine/_burst.pyx) held to the same behaviour, without processes."""

from __future__ import annotations

import importlib
import time
from array import array
from collections import deque

import pytest

from zpar.engine import burst
from zpar.engine.kernel import USER_ERRORS

TWINS = [pytest.param(burst.run_burst_py, id="python")]
if burst.COMPILED:
    TWINS.append(pytest.param(burst.run_burst, id="compiled"))


@pytest.fixture(params=TWINS)
def run(request):
    return request.param


def _burst(run, fn, n, deadline=float("inf"), lo=0, seqs=None):
    positions = deque(range(lo, lo + n))
    calls = map(fn, *(seqs or [list(range(lo, lo + n))]))
    pending, ends, errors = [], array("d"), {}
    last = run(calls, positions.popleft, pending, ends, errors, deadline, lo - 1, USER_ERRORS)
    return last, pending, ends, errors, positions


def test_zpar_engine_pure_chooses_the_interpreted_loop(monkeypatch):
    """pip install builds the compiled twin (setup.py); ZPAR_ENGINE_PURE=1 (CI's twin run)
    or an install without a C compiler leaves the interpreted loop in use."""
    monkeypatch.setenv("ZPAR_ENGINE_PURE", "1")
    try:
        importlib.reload(burst)
        assert not burst.COMPILED and burst.run_burst is burst.run_burst_py
    finally:
        monkeypatch.delenv("ZPAR_ENGINE_PURE")
        importlib.reload(burst)


def test_every_position_runs_in_order_with_its_end_time(run):
    before = time.monotonic()
    last, pending, ends, errors, left = _burst(run, lambda x: x * 2, 50, lo=10)
    after = time.monotonic()
    assert last == 59 and not left and not errors
    assert pending == [2 * x for x in range(10, 60)]
    assert len(ends) == 50 and list(ends) == sorted(ends)
    assert before <= ends[0] and ends[-1] <= after  # time.monotonic's clock


def test_an_element_that_raises_is_recorded_by_position_and_the_rest_run(run):
    def f(x):
        if x % 3 == 0:
            raise ValueError(x)
        return x

    last, pending, ends, errors, _ = _burst(run, f, 7)
    assert last == 6 and sorted(errors) == [0, 3, 6]
    assert all(isinstance(e, ValueError) for e in errors.values())
    assert pending == [None, 1, 2, None, 4, 5, None] and len(ends) == 7


def test_sequences_shorter_than_the_positions_answer_stopiteration_per_element(run):
    """As the interpreted loop always did: the calls end, each position left fails."""
    last, pending, _, errors, _ = _burst(run, lambda x: x, 4, seqs=[[7, 8]])
    assert pending == [7, 8, None, None] and last == 3
    assert all(isinstance(errors[p], StopIteration) for p in (2, 3))


def test_the_deadline_ends_the_burst_after_the_element_that_passed_it(run):
    last, pending, ends, _, left = _burst(run, lambda x: x, 5, deadline=0.0)
    assert last == 0 and pending == [0] and len(ends) == 1 and list(left) == [1, 2, 3, 4]


def test_positions_given_back_meanwhile_end_the_burst(run):
    """The revoke gate takes the tail from the deque on another thread: gone positions are
    never run."""
    positions = deque(range(6))
    seen = []

    def f(x):
        seen.append(x)
        if x == 1:
            while len(positions) > 1:  # all but the next one given back
                positions.pop()
        return x

    pending, ends, errors = [], array("d"), {}
    last = run(map(f, range(6)), positions.popleft, pending, ends, errors, 1e300, -1, USER_ERRORS)
    assert last == 2 and pending == [0, 1, 2] and seen == [0, 1, 2]


def test_none_left_returns_the_last_position_given(run):
    last, pending, ends, _, _ = _burst(run, lambda x: x, 0, lo=5)
    assert last == 4 and pending == [] and len(ends) == 0


def test_an_exception_users_never_raise_is_not_an_element_error(run):
    """GeneratorExit (not among USER_ERRORS) leaves the burst, as the kernel's loop does."""

    def f(x):
        raise GeneratorExit

    with pytest.raises(GeneratorExit):
        _burst(run, f, 3)
