"""The attacks of issue 12, each tried on a live cluster, each followed by the cluster still
answering: spliced relays, swapped buffers, replays, forged records, malformed signed
fields, another protocol version."""

from __future__ import annotations

import time
import uuid as uuidlib

import msgpack
import pytest
import zmq

from tests.e2e.conftest import wait_until
from zpar.cluster.connection import read_connection_file
from zpar.constants import DELIM, PROTOCOL_VERSION
from zpar.serialize import deserialize_object, pack_apply
from zpar.wire import Session
from zpar.wire.messages import MsgType

#: milliseconds an attacker's socket is watched for anything the cluster sent it
QUIET_MS = 300


@pytest.fixture
def dealer():
    """Factory of DEALER sockets (closed at the end), optionally with a chosen identity."""
    ctx = zmq.Context.instance()
    made = []

    def make(addr, identity=None):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        if identity is not None:
            s.setsockopt(zmq.IDENTITY, identity)
        s.connect(addr)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture(scope="module")
def engine_side(cluster_addresses, cluster):
    """The relays' engine-side addresses, as a registration reply gives them (the
    registration it opens is never completed and expires)."""
    info, _ = cluster_addresses
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(info.registration)
        session = Session(info.key)
        session.send(s, MsgType.REGISTRATION_REQUEST, {"uuid": f"probe-{uuidlib.uuid4()}"})
        assert s.poll(10_000)
        reply = session.feed(s.recv_multipart())
        assert reply is not None and reply.content["status"] == "ok"
        return reply.content
    finally:
        s.close()


def _call(session, sock, uuid, code, timeout=20.0):
    """A signed execute_request to engine ``uuid`` through a relay; its reply's content."""
    header = session.send(
        sock, MsgType.EXECUTE_REQUEST, {"code": code}, idents=[uuid.encode()], dest=uuid
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sock.poll(100):
            msg = session.feed(sock.recv_multipart())
            if msg is not None and msg.parent_header.get("msg_id") == header["msg_id"]:
                return msg.content
    raise AssertionError(f"no reply to {code!r} within {timeout} s")


def _still_answers(rc):
    assert rc[:].apply_sync(lambda: 1) == [1, 1]
    assert rc.load_balanced_view().map_sync(lambda x: x + 1, range(20)) == list(range(1, 21))
    assert rc.ids == [0, 1]
    rc.hub_history()  # the hub and its store answer


def _uuids(rc):
    return [rc._io.engines[i] for i in sorted(rc._io.engines)]


# -- relays that cannot be desynchronised -----------------------------------------------------


def _misframed(rc, relay: str) -> int:
    """Messages the relay dropped whole for their framing, from the client side (what the
    controller counts in its status: docs/security.md)."""
    return rc.controller_status()["refused"].get(f"{relay} relay", {}).get("misframed-client", 0)


@pytest.mark.parametrize("relay", ["mux", "control"])
@pytest.mark.parametrize(
    "attack",
    [
        "one-frame",
        "engine-uuid-alone",
        "extra-identity",
        "no-delimiter",
        "empty",
    ],
)
def test_bad_framing_to_a_relay_is_dropped_whole(rc, cluster_addresses, dealer, relay, attack):
    """An attacker's ill-framed message must not leave the relay mid-message: the next
    (victim's) message is relayed as sent, and nothing reaches the attacker."""
    info, addrs = cluster_addresses
    uuid0, uuid1 = _uuids(rc)
    attacker = dealer(addrs[relay])
    victim = dealer(addrs[relay])
    session = Session(info.key)
    frames = {
        "one-frame": [b"x"],
        "engine-uuid-alone": [uuid1.encode()],
        "extra-identity": [uuid1.encode(), b"attacker", DELIM, b"s", b"e"],
        "no-delimiter": [uuid1.encode(), b"a", b"b", b"c"],
        "empty": [b""],
    }[attack]
    dropped = _misframed(rc, relay)
    attacker.send_multipart(frames)
    # the relay took it (and dropped it whole) before the victim's message
    wait_until(lambda: _misframed(rc, relay) > dropped, f"the {relay} relay dropping it", 30)
    if relay == "mux":
        content = _call(session, victim, uuid0, "6 * 7")
        assert content["status"] == "ok" and content["execute_result"] == "42"
    else:
        header = session.send(
            victim, MsgType.CLEAR_REQUEST, {}, idents=[uuid0.encode()], dest=uuid0
        )
        assert victim.poll(20_000), "the control relay stalled"
        reply = session.feed(victim.recv_multipart())
        assert reply.parent_header["msg_id"] == header["msg_id"]
        assert reply.idents == [uuid0.encode()]  # from the engine it was sent to
    assert not attacker.poll(QUIET_MS), "the attacker received another peer's traffic"
    _still_answers(rc)


def test_over_long_message_with_buffers_to_mux_is_dropped(rc, cluster_addresses, dealer):
    info, addrs = cluster_addresses
    uuid0, _ = _uuids(rc)
    attacker = dealer(addrs["mux"])
    session = Session(info.key)
    _, frames = session.serialize(
        MsgType.EXECUTE_REQUEST, {"code": "1"}, dest=uuid0, buffers=[b"a", b"b"]
    )
    # a second identity in front of the delimiter: refused by the relay, not re-routed
    attacker.send_multipart([uuid0.encode(), uuid0.encode(), *frames])
    assert not attacker.poll(QUIET_MS)
    _still_answers(rc)


# -- signed buffers ---------------------------------------------------------------------------


def test_swapped_buffers_do_not_run(rc, cluster_addresses, dealer, tmp_path):
    info, addrs = cluster_addresses
    uuid0, _ = _uuids(rc)
    marker = tmp_path / "swapped-ran"
    session = Session(info.key)
    _, real = session.serialize(
        MsgType.APPLY_REQUEST, {}, buffers=pack_apply(int, ("1",)), dest=uuid0
    )
    evil = pack_apply(marker.write_text, ("pwned",))
    sock = dealer(addrs["mux"])
    sock.send_multipart([uuid0.encode(), *real[:3], *evil])
    assert not sock.poll(QUIET_MS), "a message with swapped buffers was answered"
    sock.send_multipart([uuid0.encode(), *real])  # the real one still runs
    assert sock.poll(20_000)
    reply = session.feed(sock.recv_multipart())
    assert reply.content["status"] == "ok" and deserialize_object(reply.buffers) == 1
    _still_answers(rc)
    assert not marker.exists()


# -- replays -----------------------------------------------------------------------------------


def test_request_replayed_to_another_engine_or_through_the_scheduler_is_refused(
    rc, cluster_addresses, dealer, tmp_path
):
    info, addrs = cluster_addresses
    uuid0, uuid1 = _uuids(rc)
    marker = tmp_path / "replayed"
    session = Session(info.key)
    code = f"open({str(marker)!r}, 'a').write('x')"
    _, frames = session.serialize(MsgType.EXECUTE_REQUEST, {"code": code}, dest=uuid0)
    mux, task = dealer(addrs["mux"]), dealer(addrs["task"])
    mux.send_multipart([uuid1.encode(), *frames])  # to the engine it was not meant for
    task.send_multipart(frames)  # through the scheduler
    assert not mux.poll(QUIET_MS) and not task.poll(QUIET_MS)
    _still_answers(rc)
    assert not marker.exists()
    mux.send_multipart([uuid0.encode(), *frames])  # where it was meant to go: runs once
    assert mux.poll(20_000)
    assert session.feed(mux.recv_multipart()).content["status"] == "ok"
    mux.send_multipart([uuid0.encode(), *frames])  # and never twice
    assert not mux.poll(QUIET_MS)
    assert marker.read_text() == "x"


def test_replays_through_the_scheduler_never_take_a_slot(rc, cluster_addresses, dealer):
    """Load-balanced requests replayed (again, and with another's msg_id) are refused by
    the scheduler; engines' slots stay free, so load-balanced work goes on (a stuck slot
    would hang the map below: the default hwm is 1)."""
    info, addrs = cluster_addresses
    session = Session(info.key)
    sock = dealer(addrs["task"])
    sent = []
    for i in range(2):
        _, frames = session.serialize(MsgType.EXECUTE_REQUEST, {"code": f"{i} + 1"}, dest="task")
        sock.send_multipart(frames)
        sent.append(frames)
    replies = []
    while len(replies) < 2:
        assert sock.poll(20_000)
        replies.append(session.feed(sock.recv_multipart()))
    assert sorted(r.content["execute_result"] for r in replies) == ["1", "2"]
    for frames in sent * 3:
        sock.send_multipart(frames)
    assert not sock.poll(QUIET_MS), "a replayed task was run or answered"
    for _ in range(3):
        _still_answers(rc)


# -- nothing unsigned recorded, results written once -------------------------------------------


def test_forged_records_and_late_replies_are_not_stored(rc, cluster_addresses, engine_side, dealer):
    info, addrs = cluster_addresses
    uuid0, _ = _uuids(rc)
    ar = rc.load_balanced_view().apply_async(lambda: "real")
    assert ar.get(30) == "real"
    direct = rc[0].apply_async(lambda: "direct")
    assert direct.get(30) == "direct"
    forger, signer = Session(b"not the key"), Session(info.key)
    unsigned = Session(None, allow_insecure=True)
    # forged requests through the MUX relay: must not appear in the store
    mux = dealer(addrs["mux"])
    forged_ids = []
    for s in (forger, unsigned):
        header, frames = s.serialize(MsgType.APPLY_REQUEST, {}, dest=uuid0)
        forged_ids.append(header["msg_id"])
        mux.send_multipart([uuid0.encode(), *frames])
    # an unsigned message with a nil msg_id (it once broke the store for good)
    env = msgpack.packb([{"msg_id": None, "msg_type": "apply_request"}, {}, {}, {}, []])
    mux.send_multipart([uuid0.encode(), DELIM, b"", env])
    # late replies to the finished tasks, from a peer on the engine side: unsigned, under
    # a wrong key, and signed but from an engine the task was not bound to
    fake = dealer(engine_side["mux"], identity=b"fake-engine")
    bad = pack_apply(int, ("666",))
    for msg_id in (ar.msg_ids[0], direct.msg_ids[0]):
        parent = {"msg_id": msg_id, "msg_type": "apply_request", "dest": uuid0}
        for s in (forger, unsigned, signer):
            _, frames = s.serialize(
                MsgType.APPLY_REPLY,
                {"status": "ok"},
                parent=parent,
                metadata={"status": "ok", "engine_uuid": "fake-engine"},
                buffers=bad,
            )
            fake.send_multipart([b"victim", *frames])
    time.sleep(0.3)  # the forgeries must NOT be recorded: an absence cannot be waited on
    _still_answers(rc)
    history = rc.hub_history()
    assert not set(forged_ids) & set(history)
    assert len(history) == len(set(history))
    other = type(rc)(url_file=rc.url_file)  # another client reads the stored results
    try:
        assert other.get_result(ar.msg_ids[0]).get(30) == "real"
        assert other.get_result(direct.msg_ids[0]).get(30) == "direct"
    finally:
        other.close()


# -- malformed signed fields -------------------------------------------------------------------


def _envelope_with(header_changes, key):
    s = Session(key)
    header = s.make_header(MsgType.EXECUTE_REQUEST)
    header.update(header_changes)
    env = msgpack.packb([header, {}, {}, {"code": "import os; os._exit(3)"}, []])
    return [DELIM, s.sign([env]), env]


MALFORMED = {
    "msg_type int": {"msg_type": 5},
    "msg_type list": {"msg_type": ["execute_request"]},
    "msg_type map": {"msg_type": {"a": 1}},
    "msg_id nil": {"msg_id": None},
    "msg_id int": {"msg_id": 12345},
    "msg_id empty": {"msg_id": ""},
    "unknown type": {"msg_type": "frobnicate_request"},
}


@pytest.mark.parametrize("fields", list(MALFORMED), ids=list(MALFORMED))
def test_malformed_signed_fields_to_every_socket(rc, cluster_addresses, dealer, fields):
    info, addrs = cluster_addresses
    uuid0, uuid1 = _uuids(rc)
    socks = {name: dealer(addrs[name]) for name in ("mux", "control", "task")}
    socks["query"] = dealer(info.registration)
    for uuid in (uuid0, uuid1):
        changes = {**MALFORMED[fields], "dest": uuid}
        socks["mux"].send_multipart([uuid.encode(), *_envelope_with(changes, info.key)])
        socks["control"].send_multipart([uuid.encode(), *_envelope_with(changes, info.key)])
    socks["task"].send_multipart(_envelope_with({**MALFORMED[fields], "dest": "task"}, info.key))
    socks["query"].send_multipart(_envelope_with(MALFORMED[fields], info.key))
    for name, s in socks.items():
        assert not s.poll(QUIET_MS if name == "mux" else 50), f"{name} answered"
    _still_answers(rc)


def test_mixed_msg_id_types_then_engine_death_keep_the_controller(make_cluster, dealer):
    """Int and str msg_ids for one engine once crashed the controller when it died."""
    c = make_cluster(n=2)
    rc = c.client
    rc.wait_for_engines(2, timeout=30)
    info = read_connection_file(c.url_file)
    query = dealer(info.registration)
    session = Session(info.key)
    session.send(query, MsgType.CONNECTION_REQUEST, {})
    assert query.poll(10_000)
    addrs = session.feed(query.recv_multipart()).content
    uuid0 = rc._io.engines[0]
    mux = dealer(addrs["mux"])
    for changes in ({"msg_id": 7}, {"msg_id": "str-id"}, {"msg_id": None}):
        mux.send_multipart([uuid0.encode(), *_envelope_with({**changes, "dest": uuid0}, info.key)])
    rc[0].apply_async(lambda: __import__("os")._exit(1))
    wait_until(lambda: rc.ids == [1], "engine 0 unregistered", timeout=30)
    assert rc[1].apply_sync(lambda: 2) == 2
    rc.hub_history()


# -- another protocol version ------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["v2 framing, other version", "protocol 1 framing"])
def test_a_peer_of_another_version_is_told_both_versions(cluster_addresses, dealer, shape):
    info, _ = cluster_addresses
    s = Session(info.key)
    header = s.make_header(MsgType.CONNECTION_REQUEST)
    if shape == "protocol 1 framing":
        header["version"] = "1.0"
        parts = [msgpack.packb(p) for p in (header, {}, {}, {})]
        frames = [DELIM, b"0" * 64, *parts]
        theirs = "1.0"
    else:
        header["version"] = "2.1"
        env = msgpack.packb([header, {}, {}, {}, []])
        frames = [DELIM, s.sign([env]), env]
        theirs = "2.1"
    sock = dealer(info.registration)
    sock.send_multipart(frames)
    assert sock.poll(10_000), "no answer to a peer of another version"
    reply = s.feed(sock.recv_multipart())
    assert reply.content["status"] == "error"
    assert f"'{theirs}'" in reply.content["evalue"]
    assert f"'{PROTOCOL_VERSION}'" in reply.content["evalue"]


# -- records -----------------------------------------------------------------------------------


def test_hub_records_each_task_exactly_once(rc):
    lview = rc.load_balanced_view()
    ars = [lview.apply_async(lambda x: x, i) for i in range(50)]
    ars += [rc[i % 2].apply_async(lambda x: x, i) for i in range(10)]
    ars.append(rc.broadcast_view().apply_async(lambda: 1))
    for ar in ars:
        ar.get(60)
    msg_ids = [m for ar in ars for m in ar.msg_ids]

    def all_recorded():
        recs = rc.db_query({"msg_id": {"$in": msg_ids}}, keys=["msg_id", "status"])
        return len(recs) == len(set(msg_ids)) and all(r["status"] == "ok" for r in recs)

    wait_until(all_recorded, "every task recorded once, ok", timeout=30)
    history = rc.hub_history()
    assert len(history) == len(set(history))
