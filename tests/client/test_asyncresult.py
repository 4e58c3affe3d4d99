"""AsyncResult and view helpers, without sockets: futures resolved by hand."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import numpy as np
import pytest

from zpar.client.asyncresult import AsyncMapResult, AsyncResult, decode_reply
from zpar.client.view import _lengths, partition
from zpar.errors import CompositeError, EngineError, RemoteError, TaskAborted, TimeoutError
from zpar.serialize import serialize_object
from zpar.wire import Message


def reply(value=None, status="ok", **content):
    bufs = serialize_object(value) if status == "ok" else []
    return Message(
        [],
        {"msg_id": "r", "msg_type": "apply_reply"},
        {"msg_id": "q"},
        {"engine_id": 3, "stdout": "out"},
        {"status": status, **content},
        bufs,
    )


def done(msg=None, exc=None):
    f = Future()
    f.set_exception(exc) if exc else f.set_result(msg)
    return f


def test_single_value_and_metadata():
    ar = AsyncResult(None, ["q"], [done(reply(np.arange(3)))], single=True)
    assert ar.ready() and ar.successful()
    np.testing.assert_array_equal(ar.get(), np.arange(3))
    assert ar.engine_id == 3 and ar.stdout == "out" and ar["stdout"] == "out"


def test_pending_get_times_out_with_progress():
    ar = AsyncResult(None, ["a", "b"], [done(reply(1)), Future()])
    assert not ar.ready() and ar.progress == 1
    with pytest.raises(TimeoutError, match="1/2"):
        ar.get(timeout=0.01)


def test_one_error_raises_it_several_make_a_composite():
    err = reply(status="error", ename="KeyError", evalue="'k'", traceback=["tb line\n"])
    with pytest.raises(RemoteError, match="KeyError"):
        AsyncResult(None, ["a"], [done(err)], single=True).get()
    ar = AsyncResult(None, ["a", "b", "c"], [done(err), done(reply(1)), done(err)])
    with pytest.raises(CompositeError) as info:
        ar.get()
    assert len(info.value.errors) == 2
    assert not ar.successful()


def test_aborted_and_engine_death():
    with pytest.raises(TaskAborted):
        decode_reply(reply(status="aborted", evalue="x"))
    ar = AsyncResult(None, ["a"], [done(exc=EngineError("engine 1 died"))], single=True)
    with pytest.raises(EngineError, match="died"):
        ar.get()


def test_map_result_flattens_chunks_in_order():
    ar = AsyncMapResult(None, ["a", "b"], [done(reply([1, 2])), done(reply([3]))])
    assert ar.get() == [1, 2, 3] and list(ar) == [1, 2, 3]


def test_awaitable():
    f = Future()
    ar = AsyncResult(None, ["a"], [f], single=True)

    async def main():
        asyncio.get_running_loop().call_later(0.01, f.set_result, reply(7))
        return await ar

    assert asyncio.run(main()) == 7


def test_partition_and_lengths():
    assert partition(5, 2) == [slice(0, 3), slice(3, 5)]
    assert partition(1, 3) == [slice(0, 1), slice(1, 1), slice(1, 1)]
    assert _lengths([[1, 2], "ab"]) == 2
    with pytest.raises(ValueError, match="unequal"):
        _lengths([[1], [1, 2]])
