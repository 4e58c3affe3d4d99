"""Signed messages past the bounds (zpar.wire.bounds) on a live cluster: each refused,
counted by reason, answered with the field where the sender can be answered, and every
process still serving; a positive control in each case runs the same message within the
bounds, so a refusal is never a signing mismatch (issue 26)."""

from __future__ import annotations

import time

import msgpack
import pytest
import zmq

from tests.e2e.conftest import wait_until
from zpar.constants import DELIM
from zpar.serialize import pack_apply
from zpar.wire import Session
from zpar.wire.bounds import MAX_NESTING
from zpar.wire.messages import MsgType

pytestmark = pytest.mark.cluster


def _deep(n):
    x = []
    for _ in range(n):
        x = [x]
    return x


@pytest.fixture
def dealer():
    ctx = zmq.Context.instance()
    made = []

    def make(addr):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(addr)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def _signed(key, msg_type, content, *, metadata=None, header_extra=None, buffers=(), dest=None):
    """A signed message built by hand (Session.serialize refuses what is past the bounds)."""
    s = Session(key)
    header = s.make_header(msg_type, dest=dest)
    header.update(header_extra or {})
    tags = [b"" for _ in buffers]  # small buffers: signed inline
    env = msgpack.packb([header, {}, metadata or {}, content, tags], use_bin_type=True)
    return header, [DELIM, s.sign([env, *buffers]), env, *buffers]


def _reply(session, sock, msg_id, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.poll(100):
            msg = session.feed(sock.recv_multipart())
            if msg is not None and msg.parent_header.get("msg_id") == msg_id:
                return msg
    return None


def _refused(rc):
    return rc.controller_status()["refused"]


def _controller_log(cluster):
    return (cluster.launcher.log_dir / f"{cluster.cluster_id}-controller.log").read_text()


HOSTILE_APPLY = {
    "metadata nested 1,000 deep": {"metadata": {"x": _deep(1000)}},
    "metadata nested one past the bound": {"metadata": {"x": _deep(MAX_NESTING)}},
    "header field nested 1,000 deep": {"header_extra": {"extra": _deep(1000)}},
    "session longer than the store's column": {"header_extra": {"session": "s" * 10_000}},
    "username a list": {"header_extra": {"username": [1]}},
}


@pytest.mark.parametrize("case", list(HOSTILE_APPLY), ids=list(HOSTILE_APPLY))
def test_a_signed_load_balanced_apply_past_the_bounds_is_refused(
    rc, cluster, cluster_addresses, dealer, case
):
    info, addrs = cluster_addresses
    task = dealer(addrs["task"])
    session = Session(info.key)
    bufs = pack_apply(lambda: 6 * 7, (), {})
    before = _refused(rc).get("scheduler", {})
    # positive control: the same message, within the bounds, runs
    h, frames = _signed(info.key, MsgType.APPLY_REQUEST, {}, buffers=bufs, dest="task")
    task.send_multipart(frames)
    ok = _reply(session, task, h["msg_id"])
    assert ok is not None and ok.content["status"] == "ok"
    h, frames = _signed(
        info.key, MsgType.APPLY_REQUEST, {}, buffers=bufs, dest="task", **HOSTILE_APPLY[case]
    )
    task.send_multipart(frames)
    assert not task.poll(300)  # refused before any handler: nothing runs, nothing answers

    def counted():
        after = _refused(rc).get("scheduler", {})
        return sum(after.values()) > sum(before.values())

    wait_until(counted, "the scheduler's refusal in the status", timeout=10)
    reasons = set(_refused(rc)["scheduler"])
    assert reasons & {"too-deep", "too-long", "malformed"}
    assert rc[:].apply_sync(lambda: 1) == [1, 1]  # every process still serves
    assert rc.db_query({"msg_id": h["msg_id"]}) == []  # nothing of it stored
    assert "Traceback" not in _controller_log(cluster)


def test_deep_metadata_to_an_engine_and_to_the_hub_is_refused_and_counted(
    rc, cluster, cluster_addresses, dealer
):
    info, addrs = cluster_addresses
    uuid0 = rc._io.engines[0]
    mux = dealer(addrs["mux"])
    query = dealer(info.registration)
    session = Session(info.key)
    bufs = pack_apply(lambda: 1, (), {})
    _, frames = _signed(
        info.key,
        MsgType.APPLY_REQUEST,
        {},
        buffers=bufs,
        dest=uuid0,
        metadata={"x": _deep(1000)},
    )
    mux.send_multipart([uuid0.encode(), *frames])
    # a query with a deep content: answered, naming the field
    h, frames = _signed(info.key, MsgType.DB_REQUEST, {"query": {"x": _deep(1000)}})
    query.send_multipart(frames)
    reply = _reply(session, query, h["msg_id"])
    assert reply is not None and reply.content["status"] == "error"
    assert "content" in reply.content["evalue"] and "deeper" in reply.content["evalue"]
    # positive control: a sound query gets its records
    h, frames = _signed(info.key, MsgType.DB_REQUEST, {"query": {}, "keys": ["msg_id"]})
    query.send_multipart(frames)
    reply = _reply(session, query, h["msg_id"])
    assert reply is not None and reply.content["status"] == "ok"
    wait_until(
        lambda: _refused(rc).get("engine 0", {}).get("too-deep", 0) >= 1,
        "the engine's too-deep refusal in the status",
        timeout=10,
    )
    assert _refused(rc)["hub"].get("too-deep", 0) >= 1
    assert rc[0].apply_sync(lambda: 2) == 2


HOSTILE_DB = {
    "huge int": ({"submitted": {"$lt": 2**64 - 1}}, "past 64 bits"),
    "huge negative int": ({"retries": -(2**63)}, "past 64 bits"),
    "list where a number goes": ({"completed": {"$gt": [1, 2]}}, "needs a number"),
    "map where a str goes": ({"msg_id": {"$eq": {"a": 1}}}, "needs a str"),
    "bool where a number goes": ({"retries": {"$gte": True}}, "needs a number"),
    "nested $in values": ({"engine_uuid": {"$in": [[["x"]]]}}, "needs a str"),
    "deep JSON value": ({"metadata": {"$eq": {"a": _deep(58)}}}, "deeper"),
    "$in of 100,000 values": ({"msg_id": {"$in": ["m"] * 100_000}}, "at most"),
    "a query that is a list": ([1, 2], "map of record keys"),
}


@pytest.mark.parametrize("case", list(HOSTILE_DB), ids=list(HOSTILE_DB))
def test_hostile_db_request_values_get_a_clear_error(rc, cluster, cluster_addresses, dealer, case):
    info, _ = cluster_addresses
    query = dealer(info.registration)
    session = Session(info.key)
    rc[:].apply_sync(lambda: 0)
    assert rc.db_query({"completed": {"$ne": None}}, keys=["msg_id"])  # positive control
    q, words = HOSTILE_DB[case]
    session.send(query, MsgType.DB_REQUEST, {"query": q})
    reply = session.feed(query.recv_multipart()) if query.poll(20_000) else None
    assert reply is not None and reply.content["status"] == "error"
    assert words in reply.content["evalue"]
    assert reply.content["ename"] == "HubRefused"
    assert "Traceback" not in _controller_log(cluster)
    assert rc[:].apply_sync(lambda: 1) == [1, 1]


@pytest.mark.parametrize(
    "fields",
    [{"pid": [1]}, {"pid": 2**64 - 1}, {"hostname": {"a": 1}}, {"id": "zero"}, {"pid": True}],
    ids=["pid list", "pid huge", "hostname map", "id str", "pid bool"],
)
def test_a_registration_with_hostile_fields_is_refused_naming_the_field(
    rc, cluster, cluster_addresses, dealer, fields
):
    info, _ = cluster_addresses
    query = dealer(info.registration)
    session = Session(info.key)
    content = {"uuid": f"hostile-{time.monotonic_ns()}", "hostname": "h", "pid": 1, **fields}
    session.send(query, MsgType.REGISTRATION_REQUEST, content)
    assert query.poll(20_000)
    reply = session.feed(query.recv_multipart())
    assert reply.content["status"] == "error"
    assert next(iter(fields)) in reply.content["evalue"]
    # positive control: the same request with sound fields is accepted
    good = {"uuid": f"probe-{time.monotonic_ns()}", "hostname": "h", "pid": 1}
    session.send(query, MsgType.REGISTRATION_REQUEST, good)
    assert query.poll(20_000)
    assert session.feed(query.recv_multipart()).content["status"] == "ok"
    assert "Traceback" not in _controller_log(cluster)
    assert rc[:].apply_sync(lambda: 1) == [1, 1]
