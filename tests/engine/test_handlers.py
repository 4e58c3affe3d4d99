"""Execution handlers that capabilities declare as entry points (engine.handlers)."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from zpar import namespace
from zpar.engine import handlers
from zpar.engine.kernel import Kernel
from zpar.wire import Message, Session
from zpar.wire.messages import MsgType, ReplyStatus

pytestmark = pytest.mark.timeout(30)


def echo_factory(kernel):
    def handle(msg):
        return {"status": ReplyStatus.OK, "seen_by": kernel.engine_id}, list(msg.buffers)

    return handle


@pytest.fixture
def declared(monkeypatch):
    """Pretend these entry points are installed: {name: value}."""
    eps: dict[str, str] = {}

    def entry_points(group, name):
        assert group == handlers.GROUP
        return [EntryPoint(name, v, group) for n, v in eps.items() if n == name]

    monkeypatch.setattr(handlers, "entry_points", entry_points)
    return eps


@pytest.fixture
def kernel():
    k = Kernel(9, "uuid-9")
    yield k
    k.close()
    namespace.set_current(None)


def request(msg_type, buffers=()):
    return Message([b"c"], Session(b"k").make_header(msg_type), {}, {}, {}, list(buffers))


def test_the_installed_typed_handler_is_declared():
    eps = list(handlers.entry_points(group=handlers.GROUP, name=MsgType.TYPED_REQUEST))
    assert [ep.value for ep in eps] == ["zpar.typed.engine:make_handler"]


def test_a_declared_handler_runs_as_a_request_and_is_looked_up_once(declared, kernel, monkeypatch):
    declared[MsgType.TYPED_REQUEST] = f"{__name__}:echo_factory"
    calls = []
    real = handlers.find_handler
    monkeypatch.setattr(
        "zpar.engine.kernel.find_handler", lambda t, k: calls.append(t) or real(t, k)
    )
    for _ in range(2):
        reply = kernel.handle(request(MsgType.TYPED_REQUEST, [b"x"]))
        assert reply.msg_type == MsgType.TYPED_REPLY
        assert reply.content == {"status": ReplyStatus.OK, "seen_by": 9}
        assert reply.buffers == [b"x"]
        assert reply.metadata["engine_id"] == 9 and "started" in reply.metadata
    assert calls == [MsgType.TYPED_REQUEST]


def test_a_handler_that_cannot_load_answers_with_the_load_error(declared, kernel):
    declared[MsgType.TYPED_REQUEST] = "no_such_module_anywhere:factory"
    reply = kernel.handle(request(MsgType.TYPED_REQUEST))
    assert reply.msg_type == MsgType.TYPED_REPLY
    assert reply.content["status"] == ReplyStatus.ERROR
    assert (
        "cannot load the typed_request handler no_such_module_anywhere:factory"
        in reply.content["evalue"]
    )


def test_types_without_a_reply_type_or_a_declaration_get_no_handler(declared, kernel):
    declared["made_up_request"] = f"{__name__}:echo_factory"
    assert handlers.find_handler("made_up_request", kernel) is None  # no reply type for it
    assert handlers.find_handler(MsgType.EXECUTE_REQUEST, kernel) is None  # nothing declared
