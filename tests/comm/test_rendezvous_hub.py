"""The hub's rendezvous end to end: engines of a real cluster on 127.0.0.1 join
communicators through the hub (comm.member -> hub service -> comm.rendezvous)."""

from __future__ import annotations

import os
import signal
import time

import pytest

import zpar
from tests.clusters import FAST_HB, module_cluster, shipped_by_value
from zpar.cluster.connection import read_connection_file
from zpar.constants import ZPAR_LABEL_ENDPOINTS, ZPAR_LABEL_HOSTNAME
from zpar.errors import RemoteError

#: with FAST_HB a killed engine is noticed (and its rendezvous failed) in about 0.5 s
TIMEOUT = 60.0


@pytest.fixture(autouse=True, scope="module")
def _ship_by_value():
    import sys

    yield from shipped_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from module_cluster(
        tmp_path_factory,
        "zpar-rdv",
        3,
        wait_timeout=TIMEOUT,
        controller_args=FAST_HB,
        timeout=TIMEOUT,
        log_level="INFO",
    )


def info(cluster):
    return read_connection_file(cluster.url_file)


def join_and_exchange(comm_id, rank, size, skip_second):
    """On an engine: join, exchange two labels (maybe skipping the second), DONE, FINI."""
    from zpar.comm.member import RendezvousMember

    m = RendezvousMember.from_engine(comm_id, rank, size, timeout=30.0)
    first = m.coll(ZPAR_LABEL_HOSTNAME, f"r{rank}".encode())
    if skip_second:
        second = None
    else:
        second = m.coll(ZPAR_LABEL_ENDPOINTS, f"x{rank}".encode())
    m.done()
    m.fini()
    return first, second


def test_engines_exchange_payloads_through_the_hub(cluster) -> None:
    rc = cluster.client
    ids = sorted(rc.ids)[:3]
    results = [
        rc[eid].apply_async(join_and_exchange, "world", rank, 3, rank == 1)
        for rank, eid in enumerate(ids)
    ]
    out = [r.get(timeout=TIMEOUT) for r in results]
    for rank, (first, second) in enumerate(out):
        assert first == (0x7, [b"r0", b"r1", b"r2"])
        if rank == 1:
            assert second is None
        else:  # rank 1 skipped the label: its bit is clear and only the others' data comes
            assert second == (0x5, [b"x0", None, b"x2"])


def test_several_communicators_at_once_with_a_member_outside_the_engines(cluster) -> None:
    from zpar.comm.member import RendezvousMember

    rc = cluster.client
    e0, e1, e2 = sorted(rc.ids)[:3]
    pair = [
        rc[e].apply_async(join_and_exchange, "pair", r, 2, False) for r, e in enumerate((e0, e1))
    ]
    mixed = rc[e2].apply_async(join_and_exchange, "mixed", 0, 2, True)
    ci = info(cluster)
    with RendezvousMember(ci.registration, ci.key, "mixed", 1, 2, timeout=30.0) as me:
        assert me.coll(ZPAR_LABEL_HOSTNAME, b"client") == (0x3, [b"r0", b"client"])
        assert me.coll(ZPAR_LABEL_ENDPOINTS, b"only me") == (0x2, [None, b"only me"])
        me.done()
    assert mixed.get(timeout=TIMEOUT) == ((0x3, [b"r0", b"client"]), None)
    for r in pair:
        first, second = r.get(timeout=TIMEOUT)
        assert first == (0x3, [b"r0", b"r1"]) and second == (0x3, [b"x0", b"x1"])


def test_auth_none_refused_on_a_keyed_cluster(cluster) -> None:
    from zpar.comm.member import RendezvousFailed, RendezvousMember

    ci = info(cluster)
    assert ci.key  # the cluster signs: the hub offers only KEY
    with pytest.raises(RendezvousFailed, match="no common authentication method"):
        RendezvousMember(ci.registration, ci.key, "insecure", 0, 1, auth="none", timeout=30.0)


def test_wrong_key_never_reaches_the_rendezvous(cluster) -> None:
    """A member without the cluster key: its messages fail the hub's signature check, so it
    hears nothing and gives up at its own deadline, blaming the hub."""
    from zpar.comm import member as member_mod
    from zpar.comm.member import RendezvousFailed, RendezvousMember

    ci = info(cluster)
    mp = pytest.MonkeyPatch()
    mp.setattr(member_mod, "HUB_GRACE", 0.5)
    try:
        with pytest.raises(RendezvousFailed, match="no answer from the hub"):
            RendezvousMember(ci.registration, "0" * 64, "forged", 0, 1, timeout=0.5)
    finally:
        mp.undo()


def test_timeout_names_the_missing_rank(cluster) -> None:
    from zpar.comm.member import RendezvousFailed, RendezvousMember

    ci = info(cluster)
    t0 = time.monotonic()
    with pytest.raises(RendezvousFailed, match=r"waiting for rank\(s\) 1") as e:
        RendezvousMember(ci.registration, ci.key, "lonely", 0, 2, timeout=1.0)
    assert e.value.missing == [1]
    assert time.monotonic() - t0 < 1.0 + 9.0  # the hub's error, not the member's backstop


def test_duplicate_rank_refused(cluster) -> None:
    import zmq

    from zpar.comm.member import RendezvousFailed, RendezvousMember
    from zpar.comm.rendezvous import AUTH_HMAC, hmac_proof
    from zpar.wire import Session
    from zpar.wire.messages import MsgType

    ci = info(cluster)
    # a bare member takes rank 0 (it does not wait for the answer)
    session = Session(ci.key)
    bare = zmq.Context.instance().socket(zmq.DEALER)
    bare.setsockopt(zmq.LINGER, 0)
    try:
        bare.connect(ci.registration)
        session.send(
            bare,
            MsgType.RENDEZVOUS_AUTH_REQUEST,
            {"comm_id": "dup", "auth_mask": AUTH_HMAC.bit, "timeout": 30.0},
        )
        assert bare.poll(int(TIMEOUT * 1000)), "no AUTH answer from the hub"
        reply = session.feed(bare.recv_multipart())
        assert reply is not None and reply.msg_type == MsgType.RENDEZVOUS_AUTH_REPLY
        proof = hmac_proof(ci.key_bytes, reply.content["challenge"])
        session.send(bare, MsgType.RENDEZVOUS_KEY, {"comm_id": "dup", "proof": proof})
        session.send(
            bare, MsgType.RENDEZVOUS_IMPI_REQUEST, {"comm_id": "dup", "rank": 0, "size": 2}
        )
        with pytest.raises(RendezvousFailed, match="rank 0 is already taken"):
            RendezvousMember(ci.registration, ci.key, "dup", 0, 2, timeout=30.0)
        with pytest.raises(RendezvousFailed, match="size 3 differs from the communicator.s size 2"):
            RendezvousMember(ci.registration, ci.key, "dup", 1, 3, timeout=30.0)
        # rank 1 completes the IMPI phase: both get the size
        m1 = RendezvousMember(ci.registration, ci.key, "dup", 1, 2, timeout=30.0)
        assert bare.poll(int(TIMEOUT * 1000))
        reply = session.feed(bare.recv_multipart())
        assert reply.msg_type == MsgType.RENDEZVOUS_IMPI_REPLY and reply.content["size"] == 2
        m1.fini()
    finally:
        bare.close()


def join_then_hang(comm_id, rank, size, flag):
    from zpar.comm.member import RendezvousMember

    m = RendezvousMember.from_engine(comm_id, rank, size, timeout=60.0)
    open(flag, "w").close()
    time.sleep(600)  # never sends its label: killed here
    return m


def join_then_coll(comm_id, rank, size):
    from zpar.comm.member import RendezvousFailed, RendezvousMember

    m = RendezvousMember.from_engine(comm_id, rank, size, timeout=60.0)
    try:
        m.coll(ZPAR_LABEL_HOSTNAME, b"waiting")
    except RendezvousFailed as e:
        return str(e), e.missing
    return "no error", []


@pytest.mark.cluster
def test_engine_killed_mid_rendezvous_fails_the_others_naming_it(tmp_path, caplog) -> None:
    mp = pytest.MonkeyPatch()
    mp.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    c = zpar.Cluster(n=2, controller_args=FAST_HB, timeout=TIMEOUT, log_level="INFO")
    c.start()
    try:
        rc = c.client
        rc.wait_for_engines(2, timeout=TIMEOUT)
        e0, e1 = sorted(rc.ids)[:2]
        pid = rc[e1].apply_sync(os.getpid)
        flag = str(tmp_path / "joined")
        rc[e1].apply_async(join_then_hang, "doomed", 1, 2, flag)
        waiting = rc[e0].apply_async(join_then_coll, "doomed", 0, 2)
        deadline = time.monotonic() + TIMEOUT
        while not os.path.exists(flag):
            assert time.monotonic() < deadline, "engine never joined the rendezvous"
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        message, missing = waiting.get(timeout=TIMEOUT)  # an error, not a hang
        assert missing == [1]
        assert "rank 1" in message and f"engine {e1}" in message, message
        # the client hears of it too (the hub publishes rendezvous_error)
        deadline = time.monotonic() + TIMEOUT
        while not any("rendezvous doomed failed" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "the client was not told"
            time.sleep(0.01)
    finally:
        c.stop()
        mp.undo()


def test_rendezvous_error_is_picklable() -> None:
    import pickle

    from zpar.comm.member import RendezvousFailed

    e = pickle.loads(pickle.dumps(RendezvousFailed("rank 2 vanished", [2])))
    assert str(e) == "rank 2 vanished" and e.missing == [2]
    assert not isinstance(e, RemoteError)
