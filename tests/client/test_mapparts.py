"""client/mapparts.py: a map's element request answered in parts, without sockets."""

from __future__ import annotations

from zpar.client.asyncresult import AsyncMapResult
from zpar.client.mapparts import MapWaiters, Parts
from zpar.elements import ELEMENTS, ERRORS
from zpar.errors import RemoteError, TaskAborted
from zpar.serialize import serialize_object
from zpar.wire import Message

_VALUE_ERROR = {"ename": "ValueError", "evalue": "two!", "traceback": [], "engine_info": {}}


def part(lo, values, errors=None, status="ok"):
    """An apply_reply answering positions [lo, lo + len(values))."""
    content = {"status": status, ELEMENTS: [lo, lo + len(values)]}
    if errors:
        content[ERRORS] = errors
    return Message(
        [],
        {"msg_id": f"r{lo}", "msg_type": "apply_reply"},
        {"msg_id": "q"},
        {"engine_id": 0},
        content,
        serialize_object(values) if status == "ok" else [],
    )


def test_a_failed_element_is_one_exception_object_on_every_read():
    # ipyparallel's test_return_exceptions: list(amr) == amr.get(return_exceptions=True)
    # compares the RemoteError objects themselves (an exception equals only itself)
    parts = Parts(4)
    parts.add(part(0, [0, 1, None, 3], errors={"2": _VALUE_ERROR}))
    first = parts.value(2)
    assert isinstance(first, RemoteError) and first.ename == "ValueError"
    assert parts.value(2) is first
    assert parts.values() == [0, 1, first, 3] and parts.values()[2] is first


def test_a_whole_run_error_is_kept_per_element():
    parts = Parts(2)
    aborted = part(0, [None, None], status="aborted")
    aborted.content["evalue"] = "aborted"
    parts.add(aborted)
    a, b = parts.value(0), parts.value(1)
    assert isinstance(a, TaskAborted) and isinstance(b, TaskAborted)
    assert parts.value(0) is a and parts.value(1) is b and parts.values() == [a, b]


def test_a_map_of_elements_returns_the_same_errors_each_time():
    from concurrent.futures import Future

    waiters = MapWaiters()
    parts = Parts(4, waiters)
    parts.add(part(0, [0, 1], errors={"1": _VALUE_ERROR}))
    parts.add(part(2, [2, 3]))
    fut: Future = Future()
    fut.set_result(None)
    amr = AsyncMapResult(None, ["q"], [fut], parts=[parts], waiters=waiters, return_exceptions=True)
    listed = list(amr)
    assert listed == amr.get(return_exceptions=True) == [0, listed[1], 2, 3]
    assert list(amr) == listed
