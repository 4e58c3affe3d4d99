"""AsyncResult and view helpers, without sockets: futures resolved by hand."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import numpy as np
import pytest

from zpar.client.asyncresult import AsyncMapResult, AsyncResult, decode_reply
from zpar.client.partition import _lengths, partition
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


def timed(value, engine_id, started, completed, stdout=""):
    msg = reply(value)
    msg.metadata = {
        "engine_id": engine_id,
        "started": started,
        "completed": completed,
        "stdout": stdout,
        "stderr": "",
    }
    return msg


def test_return_exceptions_puts_errors_in_place():
    err = reply(status="error", ename="ValueError", evalue="bad", traceback=[])
    ar = AsyncResult(None, ["a", "b"], [done(reply(1)), done(err)])
    values = ar.get(return_exceptions=True)
    assert values[0] == 1 and isinstance(values[1], RemoteError)
    assert values[1].ename == "ValueError"


def test_wait_return_when():
    from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION

    err = reply(status="error", ename="E", evalue="", traceback=[])
    # as ipyparallel: with return_when, (done, pending) sets of one-message AsyncResults
    ar = AsyncResult(None, ["a", "b"], [done(reply(1)), Future()])
    finished, pending = ar.wait(0.01, return_when=FIRST_COMPLETED)
    assert [p.msg_ids for p in finished] == [["a"]] and [p.msg_ids for p in pending] == [["b"]]
    assert not ar.wait(0.01)
    finished, pending = ar.wait(0.01, return_when=FIRST_EXCEPTION)
    assert len(pending) == 1
    ar = AsyncResult(None, ["a", "b"], [done(err), Future()])
    finished, pending = ar.wait(1, return_when=FIRST_EXCEPTION)
    assert not next(iter(finished)).successful()
    with pytest.raises(ValueError, match="return_when"):
        ar.wait(return_when="sometime")


def test_timing_properties():
    ar = AsyncResult(
        None,
        ["a", "b"],
        [done(timed(1, 0, 10.0, 11.0)), done(timed(2, 1, 10.5, 12.5))],
        submitted=9.5,
    )
    assert ar.serial_time == pytest.approx(3.0)
    assert ar.wall_time == pytest.approx(3.0)
    assert ar.elapsed == pytest.approx(3.0)
    assert ar.timedelta(ar.started, ar.completed) == pytest.approx(2.5)
    assert ar.get_dict() == {0: 1, 1: 2}


def test_get_dict_refuses_two_results_of_one_engine():
    ar = AsyncResult(None, ["a", "b"], [done(timed(1, 0, 0, 1)), done(timed(2, 0, 0, 1))])
    with pytest.raises(ValueError, match="more than one"):
        ar.get_dict()


def test_indexing_iteration_split_join():
    ar = AsyncResult(None, ["a", "b", "c"], [done(reply(i)) for i in range(3)])
    assert ar[1] == 1 and ar[1:] == [1, 2] and list(ar) == [0, 1, 2]
    assert sorted(ar.as_completed()) == [0, 1, 2]
    parts = ar.split()
    assert [p.get() for p in parts] == [0, 1, 2]
    joined = parts[2] + parts[0]
    assert joined.get() == [2, 0] and joined.msg_ids == ["c", "a"]
    with pytest.raises(TypeError):
        ar[1.5]


def test_unordered_map_iterates_as_chunks_complete():
    first, second = Future(), done(reply([3, 4]))
    ar = AsyncMapResult(None, ["a", "b"], [first, second], ordered=False)
    it = iter(ar)
    assert [next(it), next(it)] == [3, 4]
    first.set_result(reply([1, 2]))
    assert list(it) == [1, 2]
    assert ar[0] == 1


def test_done_callback_fires_once_after_all():
    a, b = Future(), Future()
    ar = AsyncResult(None, ["a", "b"], [a, b])
    calls = []
    ar.add_done_callback(calls.append)
    a.set_result(reply(1))
    assert calls == []
    b.set_result(reply(2))
    assert calls == [ar]


def test_display_outputs_and_html_repr(capsys):
    ar = AsyncResult(
        None, ["a", "b"], [done(timed(1, 1, 0, 1, "one\n")), done(timed(2, 0, 0, 1, "zero\n"))]
    )
    # ipyparallel 9: each engine's header on a line of its own, then its output
    ar.display_outputs(groupby="engine")
    assert capsys.readouterr().out == "[stdout:0] \nzero\n[stdout:1] \none\n"
    ar.display_outputs()  # ipyparallel's default: by type, in submission order
    assert capsys.readouterr().out == "[stdout:1] \none\n[stdout:0] \nzero\n"
    assert "finished" in ar._repr_html_() and "engines [0, 1]" in ar._repr_html_()


def test_stream_printer_prints_as_ipyparallels_display_stream(capsys):
    """ipyparallel's AsyncResult._display_stream: the header alone on its line, left out
    while the same engine's same stream goes on, a newline put in before a header that
    follows text without one, never a blank line, nothing added at the end."""
    from zpar.client.outputs import StreamPrinter

    p = StreamPrinter()
    p.engine_stream(0, "stdout", "a\n")
    p.engine_stream(0, "stdout", "b")  # the same engine's stream goes on: no header
    p.engine_stream(1, "stdout", "c\n")
    p.engine_stream(1, "stderr", "e\n")
    p.engine_stream(1, "stdout", "")  # nothing printed, nothing remembered
    p.engine_stream(1, "stdout", "d")
    out, err = capsys.readouterr()
    assert out == "[stdout:0] \na\nb\n[stdout:1] \nc\n[stdout:1] \nd"
    assert err == "[stderr:1] \ne\n"
    p = StreamPrinter()
    p.show("single\n")  # a single result: no header at all
    p.show("more")
    assert capsys.readouterr().out == "single\nmore"


def test_a_single_result_shows_its_output_without_headers(capsys):
    ar = AsyncResult(None, ["a"], [done(timed(1, 1, 0, 1, "one"))], single=True)
    ar.display_outputs()
    assert capsys.readouterr().out == "one"  # as printed: ipyparallel adds no newline


def test_wait_interactive_shows_progress(capsys):
    import io

    f = Future()
    ar = AsyncResult(None, ["a", "b"], [done(reply(1)), f], fname="job")
    out = io.StringIO()
    assert not ar.wait_interactive(interval=0.01, timeout=0.05, file=out)
    f.set_result(reply(2))
    assert ar.wait_interactive(interval=0.01, file=out)
    assert "job" in out.getvalue() and "2/2" in out.getvalue()


def test_sent_and_wait_for_send():
    from zpar.client.request import PendingRequest

    request = PendingRequest("a", "task", [b"frames"], submitted=5.0)
    ar = AsyncResult(None, ["a"], [request.future])
    assert not ar.sent and ar._submitted == 5.0
    with pytest.raises(TimeoutError, match="sent"):  # as ipyparallel
        ar.wait_for_send(0.01)
    request.sent = 6.0  # what the I/O thread stamps once zmq has the frames
    assert ar.sent and ar.wait_for_send(0.01)
    # a future of another origin (the hub's store) has nothing left to send
    assert AsyncResult(None, ["b"], [Future()]).sent


#: every public name of ipyparallel 9.2's AsyncResult (dir() of its class, read from the
#: wheel), and the metadata it answers as attributes
IPYPARALLEL_NAMES = (
    "abort add_done_callback cancel cancelled display_outputs done elapsed exception get "
    "get_dict join metadata msg_ids owner progress r ready result result_dict running sent "
    "serial_time set_exception set_result set_running_or_notify_cancel split stream_output "
    "successful timedelta wait wait_for_output wait_for_send wait_interactive wall_time "
    "engine_id stdout stderr submitted started completed received data execute_result "
    "status outputs"
).split()


def test_async_result_is_one_future_with_ipyparallels_names_and_no_mixins():
    """Its metadata, displays and Future internals come from functions and an object of
    their own (client.resultmeta, client.outputs, client.futurestate), not mixin bases."""
    from concurrent.futures import Future

    from zpar.client.asyncresult import AsyncHubResult

    assert AsyncResult.__mro__ == (AsyncResult, Future, object)
    assert AsyncMapResult.__bases__ == (AsyncResult,) == AsyncHubResult.__bases__
    ar = AsyncResult(None, ["a"], [done(timed(1, 2, 0.0, 1.0, "x"))], single=True)
    missing = [name for name in IPYPARALLEL_NAMES if not hasattr(ar, name)]
    assert missing == []
    assert ar.engine_id == 2 and ar.serial_time == 1.0 and ar.stdout == "x"
    assert ar.timedelta(0.0, 2.5) == 2.5 and ar.status == "ok"
