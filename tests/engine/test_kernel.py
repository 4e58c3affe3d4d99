"""The engine's kernel and namespace, in memory: a Message in, a KernelReply out, no sockets."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from zpar import namespace
from zpar.constants import MAX_CAPTURED_OUTPUT
from zpar.engine.capture import TRUNCATED_NOTE, Capture
from zpar.engine.kernel import Kernel
from zpar.serialize import deserialize_object, pack_apply
from zpar.wire import Message, Session
from zpar.wire.messages import MsgType, ReplyStatus

pytestmark = pytest.mark.timeout(30)

SESSION = Session(b"test-key")


def request(msg_type, content=None, buffers=(), msg_id=None):
    header = SESSION.make_header(msg_type, msg_id)
    return Message([b"client"], header, {}, {}, content or {}, list(buffers))


def apply(f, *args, **kwargs):
    return request(MsgType.APPLY_REQUEST, {}, pack_apply(f, args, kwargs))


def interactive(source, name):
    """A function defined as in a notebook: its __module__ is '__main__'."""
    g = {"__name__": "__main__"}
    exec(source, g)
    return g[name]


@pytest.fixture
def published():
    return []


@pytest.fixture
def kernel(published):
    k = Kernel(3, "uuid-3", publish=lambda t, c, p: published.append((t, dict(c), p)))
    yield k
    k.close()  # its IPython shell, if an execute made one, is not the next test's
    namespace.set_current(None)


def result(reply):
    assert reply.content["status"] == ReplyStatus.OK, reply.content
    return deserialize_object(reply.buffers)


def test_apply_numpy_function(kernel):
    reply = kernel.handle(apply(np.sum, np.arange(10)))
    assert reply.msg_type == MsgType.APPLY_REPLY
    assert result(reply) == 45
    md = reply.metadata
    assert md["engine_id"] == 3 and md["engine_uuid"] == "uuid-3"
    assert md["status"] == ReplyStatus.OK and md["started"] <= md["completed"]
    assert set(md) == {
        "engine_id",
        "engine_uuid",
        "started",
        "completed",
        "status",
        "stdout",
        "stderr",
        "func",  # the function's name, for the dashboard (docs/protocol.md)
    }
    assert md["func"] == "sum"


def test_apply_lambda_with_kwargs(kernel):
    assert result(kernel.handle(apply(lambda a, b=1: a * b, 6, b=7))) == 42


def test_interactive_function_reads_pushed_names(kernel):
    f = interactive("b = 10\ndef f():\n    return a + b\n", "f")
    kernel.handle(apply(namespace.push, {"a": 5}))
    assert result(kernel.handle(apply(f))) == 15  # a pushed, b captured
    kernel.handle(apply(namespace.push, {"b": 100}))
    assert result(kernel.handle(apply(f))) == 105  # pushed names win over captured ones
    g = interactive("def g(x):\n    global c\n    c = x\n", "g")
    kernel.handle(apply(g, 7))
    assert result(kernel.handle(apply(namespace.pull, "c"))) == 7  # globals() is the namespace


def test_push_pull(kernel):
    assert result(kernel.handle(apply(namespace.push, {"x": 1, "y": [2, 3]}))) is None
    assert result(kernel.handle(apply(namespace.pull, "x"))) == 1
    assert result(kernel.handle(apply(namespace.pull, ["y", "x"]))) == [[2, 3], 1]


def test_pull_missing_name_is_a_name_error(kernel):
    reply = kernel.handle(apply(namespace.pull, ["nope"]))
    c = reply.content
    assert c["status"] == ReplyStatus.ERROR and c["ename"] == "NameError"
    assert "'nope'" in c["evalue"]
    assert c["engine_info"] == {"engine_id": 3, "engine_uuid": "uuid-3", "method": "apply_request"}
    assert reply.metadata["status"] == ReplyStatus.ERROR


def test_execute_returns_repr_of_last_expression(kernel):
    reply = kernel.handle(request(MsgType.EXECUTE_REQUEST, {"code": "import math\nz = 3\nz * 2"}))
    assert reply.msg_type == MsgType.EXECUTE_REPLY
    assert reply.content == {"status": "ok", "execution_count": 1, "execute_result": "6"}
    reply = kernel.handle(request(MsgType.EXECUTE_REQUEST, {"code": "w = math.sqrt(z + 13)"}))
    assert reply.content["execute_result"] is None and reply.content["execution_count"] == 2
    assert result(kernel.handle(apply(namespace.pull, "w"))) == 4.0
    silent = kernel.handle(request(MsgType.EXECUTE_REQUEST, {"code": "w", "silent": True}))
    assert silent.content["execute_result"] is None and silent.content["execution_count"] == 2


def test_execute_error_shows_the_code_line(kernel):
    reply = kernel.handle(request(MsgType.EXECUTE_REQUEST, {"code": "x = 1\n1 / 0\n"}))
    c = reply.content
    assert c["ename"] == "ZeroDivisionError" and c["execution_count"] == 1
    text = "".join(c["traceback"])
    assert "1 / 0" in text and "kernel.py" not in text


def test_exception_traceback_names_the_user_function(kernel):
    f = interactive("def failing_user_function(x):\n    return 1 / x\n", "failing_user_function")
    c = kernel.handle(apply(f, 0)).content
    assert c["status"] == ReplyStatus.ERROR
    assert c["ename"] == "ZeroDivisionError" and c["evalue"] == "division by zero"
    assert isinstance(c["traceback"], list)
    text = "".join(c["traceback"])
    assert "failing_user_function" in text
    assert "kernel.py" not in text and "namespace.py" not in text
    assert c["traceback"][-1].startswith("ZeroDivisionError")


def test_system_exit_in_user_code_is_a_task_error(kernel):
    import sys

    c = kernel.handle(apply(sys.exit, 3)).content
    assert c["status"] == ReplyStatus.ERROR and c["ename"] == "SystemExit"


def test_abort_by_msg_id(kernel):
    queued = apply(lambda: "ran")
    reply = kernel.handle(request(MsgType.ABORT_REQUEST, {"msg_ids": [queued.msg_id]}))
    assert reply.msg_type == MsgType.ABORT_REPLY and reply.content["status"] == ReplyStatus.OK
    assert not reply.drain
    aborted = kernel.handle(queued)
    c = aborted.content
    assert aborted.msg_type == MsgType.APPLY_REPLY
    assert c["status"] == ReplyStatus.ABORTED and c["ename"] == "TaskAborted"
    assert queued.msg_id in c["evalue"] and c["zpar_error"] is True
    assert aborted.metadata["status"] == ReplyStatus.ABORTED and not aborted.buffers
    assert queued.msg_id not in kernel.aborted  # forgotten once used
    assert result(kernel.handle(apply(lambda: "ran"))) == "ran"  # others still run


@pytest.mark.parametrize("msg_ids", [7, 2.5, {"t": 1}, [1, 2], [["t"]], [None]])
def test_a_malformed_abort_is_answered_with_its_reason(kernel, msg_ids):
    """Signed, yet malformed: the engine answers what is wrong and lives on (a set of
    msg_ids updated with an int raised TypeError and killed it)."""
    reply = kernel.handle(request(MsgType.ABORT_REQUEST, {"msg_ids": msg_ids}))
    c = reply.content
    assert reply.msg_type == MsgType.ABORT_REPLY and c["status"] == ReplyStatus.ERROR
    assert c["ename"] == "ValueError" and "abort_request's msg_ids" in c["evalue"]
    assert not reply.drain and not kernel.aborted
    assert result(kernel.handle(apply(lambda: "ran"))) == "ran"


def test_abort_all_asks_the_loop_to_drain(kernel):
    reply = kernel.handle(request(MsgType.ABORT_REQUEST, {"msg_ids": None}))
    assert reply.drain and not reply.stop
    queued = request(MsgType.EXECUTE_REQUEST, {"code": "1"})
    aborted = kernel.aborted_reply(queued)
    assert aborted.msg_type == MsgType.EXECUTE_REPLY
    assert aborted.content["status"] == ReplyStatus.ABORTED


def test_a_failed_execute_asks_the_loop_to_abort_the_executes_behind_it(kernel):
    """ipykernel's stop_on_error (ipyparallel's engines are its kernels): a non-silent
    execute that fails aborts the execute_requests queued behind it; applies still run."""
    failed = kernel.handle(request(MsgType.EXECUTE_REQUEST, {"code": "1 / 0"}))
    assert failed.content["status"] == ReplyStatus.ERROR
    assert failed.abort_executes and not failed.drain
    ok = kernel.handle(request(MsgType.EXECUTE_REQUEST, {"code": "1"}))
    assert not ok.abort_executes
    silent = kernel.handle(request(MsgType.EXECUTE_REQUEST, {"code": "1 / 0", "silent": True}))
    assert silent.content["status"] == ReplyStatus.ERROR and not silent.abort_executes
    asked = {"code": "1 / 0", "stop_on_error": False}
    assert not kernel.handle(request(MsgType.EXECUTE_REQUEST, asked)).abort_executes
    assert not kernel.handle(apply(lambda: 1 / 0)).abort_executes


def test_clear_resets_the_namespace(kernel):
    kernel.handle(apply(namespace.push, {"x": 1}))
    reply = kernel.handle(request(MsgType.CLEAR_REQUEST))
    assert reply.msg_type == MsgType.CLEAR_REPLY and reply.content["status"] == ReplyStatus.OK
    assert "x" not in kernel.ns and kernel.ns["__name__"] == "__main__"
    assert kernel.handle(apply(namespace.pull, "x")).content["ename"] == "NameError"


def test_shutdown_stops_and_drains(kernel):
    reply = kernel.handle(request(MsgType.SHUTDOWN_REQUEST, {"restart": False}))
    assert reply.msg_type == MsgType.SHUTDOWN_REPLY
    assert reply.stop and reply.drain and reply.content["status"] == ReplyStatus.OK
    assert set(reply.metadata) >= {"engine_id", "started", "completed", "stdout", "stderr"}


def test_unserializable_result_error_names_its_type(kernel):
    c = kernel.handle(apply(threading.Lock)).content
    assert c["status"] == ReplyStatus.ERROR and c["ename"] == "SerializationError"
    assert "lock" in c["evalue"] and "result" in c["evalue"]


def test_unknown_message_type_gets_no_reply(kernel):
    assert kernel.handle(request(MsgType.QUEUE_REQUEST)) is None


def test_stdout_and_stderr_in_metadata_and_streamed(kernel, published):
    def talk():
        import sys

        print("hello")
        print("oops", file=sys.stderr)
        sys.stdout.write("no newline")
        return 1

    msg = apply(talk)
    reply = kernel.handle(msg)
    assert result(reply) == 1
    assert reply.metadata["stdout"] == "hello\nno newline"
    assert reply.metadata["stderr"] == "oops\n"
    kinds = [(t, c.get("execution_state") or c.get("name")) for t, c, _ in published]
    assert kinds[0] == (MsgType.STATUS, "busy") and kinds[-1] == (MsgType.STATUS, "idle")
    streamed = {}
    for t, c, parent in published:
        assert parent is msg.header
        if t == MsgType.STREAM:
            streamed[c["name"]] = streamed.get(c["name"], "") + c["text"]
    assert streamed == {"stdout": "hello\nno newline", "stderr": "oops\n"}


def test_output_of_other_threads_is_kept_and_published_by_the_main_thread(kernel, published):
    def from_thread():
        import threading

        t = threading.Thread(target=print, args=("from a thread",))
        t.start()
        t.join()

    reply = kernel.handle(apply(from_thread))
    assert reply.metadata["stdout"] == "from a thread\n"
    streams = [c["text"] for t, c, _ in published if t == MsgType.STREAM]
    assert streams == ["from a thread\n"]


def test_captured_output_is_capped():
    cap = Capture(None, limit=10)
    cap.start({})
    try:
        print("x" * 25)
    finally:
        out, err = cap.stop()
    assert out == "x" * 10 + TRUNCATED_NOTE and err == ""
    assert MAX_CAPTURED_OUTPUT >= 1 << 20


def test_zero_copy_array_argument_is_a_view(kernel):
    arr = np.arange(100_000, dtype=np.float64)
    frames = pack_apply(lambda a: a.base is not None, (arr,), {})
    assert any(isinstance(f, memoryview) for f in frames[1:])
    msg = request(MsgType.APPLY_REQUEST, {}, frames)
    assert result(kernel.handle(msg)) is True


def test_shutdown_with_restart_is_refused_by_an_embedded_engine(kernel):
    reply = kernel.handle(request(MsgType.SHUTDOWN_REQUEST, {"restart": True}))
    assert reply.content["status"] == ReplyStatus.ERROR
    assert reply.content["ename"] == "ValueError"
    assert "cannot restart: it runs inside another program" in reply.content["evalue"]
    assert not reply.stop and not reply.drain and not reply.restart  # it keeps serving


def test_shutdown_with_restart_of_a_restartable_engine():
    try:
        reply = Kernel(0, "u", restartable=True).handle(
            request(MsgType.SHUTDOWN_REQUEST, {"restart": True})
        )
    finally:
        namespace.set_current(None)
    assert reply.content["status"] == ReplyStatus.OK
    assert reply.stop and reply.drain and reply.restart


def test_a_map_chunk_reply_names_the_mapped_function(kernel):
    from zpar.mapchunk import map_chunk

    def square(x):
        return x * x

    reply = kernel.handle(apply(map_chunk, square, [1, 2, 3]))
    assert result(reply) == [1, 4, 9]
    assert reply.metadata["func"] == "square"
