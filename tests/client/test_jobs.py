"""client/jobs.py: the jobs a user waits on (rc.wait) read as futures. No sockets."""

from __future__ import annotations

import concurrent.futures

import pytest

from zpar.client.callresult import AsyncResult
from zpar.client.jobs import futures_of
from zpar.client.mapparts import Parts
from zpar.elements import element_ids


class _Request:
    def __init__(self, *futures: concurrent.futures.Future, parts: Parts | None = None) -> None:
        self.futures = list(futures)
        self.parts = parts  # an element request's (a load-balanced map's)

    def reply_futures(self) -> list[concurrent.futures.Future]:
        return self.futures


def _read(jobs, history=("a", "b"), pending=None, known=()):
    pending = pending or {}
    return futures_of(jobs, history=list(history), request=pending.get, known=known.__contains__)


def test_a_pending_msg_id_or_a_history_index_gives_its_requests_futures():
    f, g = concurrent.futures.Future(), concurrent.futures.Future()
    pending = {"a": _Request(f), "b": _Request(g)}
    assert _read("a", pending=pending) == [f]
    assert _read([-1, 0], pending=pending) == [g, f]


def test_futures_and_async_results_are_taken_as_they_are():
    f, g = concurrent.futures.Future(), concurrent.futures.Future()
    ar = AsyncResult(None, ["m"], [g], fname="t")
    assert _read((f, ar)) == [f, g]


def test_a_msg_id_answered_already_gives_nothing_to_wait_for():
    assert _read(["a", "kept"], known=("kept",)) == []


def test_a_maps_element_is_waited_on_through_its_request():
    f = concurrent.futures.Future()
    element = element_ids("a", 2)[1]
    assert _read(element, pending={"a": _Request(f)}) == [f]
    assert _read(element, history=(element,)) == []  # answered, sent under its own id


def test_an_element_of_a_request_in_parts_is_waited_on_alone():
    """rc.wait(element id) of a load-balanced map waits for that element, not its request
    (ipyparallel: one task per element)."""
    f = concurrent.futures.Future()
    pending = {"a": _Request(f, parts=Parts(2))}
    (one,) = _read(element_ids("a", 2)[1], pending=pending)
    assert one is not f and not one.done()
    with pytest.raises(KeyError, match="#5"):
        _read(element_ids("a", 6)[5], pending=pending)  # past the request's 2 elements


def test_an_unknown_msg_id_or_a_wrong_type_is_named():
    with pytest.raises(KeyError, match="nope"):
        _read("nope")
    with pytest.raises(TypeError, match="not float"):
        _read([1.5])
