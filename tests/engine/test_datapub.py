"""publish_data in the kernel, in memory: each call goes out as an IOPub data_message with
the task's header as parent, and the merge of a task's data travels in its reply."""

from __future__ import annotations

import pickle

import pytest

from zpar import namespace
from zpar.datapub import publish_data, set_publisher
from zpar.engine.kernel import Kernel
from zpar.serialize import pack_apply
from zpar.wire import Message, Session
from zpar.wire.messages import MsgType

pytestmark = pytest.mark.timeout(30)

SESSION = Session(b"test-key")


def apply(f):
    header = SESSION.make_header(MsgType.APPLY_REQUEST)
    return Message([b"client"], header, {}, {}, {}, list(pack_apply(f, (), {})))


@pytest.fixture
def published():
    return []


@pytest.fixture
def kernel(published):
    k = Kernel(3, "uuid-3", publish=lambda t, c, p: published.append((t, dict(c), p)))
    yield k
    k.close()
    namespace.set_current(None)
    set_publisher(None)


def publishing():
    from zpar.datapub import publish_data

    for i in range(3):
        publish_data({"i": i})
    publish_data({"done": True})
    return "ok"


def test_published_data_goes_live_and_merged_in_the_reply(kernel, published):
    msg = apply(publishing)
    reply = kernel.handle(msg)
    assert pickle.loads(reply.metadata["data"]) == {"i": 2, "done": True}
    data = [(c, p) for t, c, p in published if t == MsgType.DATA_MESSAGE]
    assert [pickle.loads(c["data"]) for c, _ in data] == [
        {"i": 0},
        {"i": 1},
        {"i": 2},
        {"done": True},
    ]
    assert all(p["msg_id"] == msg.msg_id for _, p in data) and data[0][0]["keys"] == ["i"]


def test_a_task_that_publishes_nothing_carries_no_data(kernel):
    reply = kernel.handle(apply(lambda: 1))
    assert "data" not in reply.metadata


def test_each_task_starts_afresh(kernel):
    kernel.handle(apply(publishing))
    reply = kernel.handle(apply(lambda: __import__("zpar.datapub").datapub.publish_data({"x": 1})))
    assert pickle.loads(reply.metadata["data"]) == {"x": 1}


def test_outside_a_task_publish_data_says_where_it_works(kernel):
    with pytest.raises(RuntimeError, match="inside a task"):
        publish_data({"i": 1})
    set_publisher(None)
    with pytest.raises(RuntimeError, match="zpar engine"):
        publish_data({"i": 1})
    with pytest.raises(TypeError, match="dict"):
        publish_data([1])


def test_ipyparallels_import_paths():
    from zpar.engine.datapub import publish_data as engine_path

    assert engine_path is publish_data
