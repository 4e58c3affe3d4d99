"""Fuzz every listening socket of a cluster (issue 13): hypothesis' frames and signed
messages of random types and fields, and a bounded seeded generator's mutations of valid
messages. After each socket's turn every process is up with the same pid and answers the
next valid request on every path; what was refused is counted in the process that refused
it and shown, per process and reason, by rc.controller_status() and `zpar cluster status`."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.clusters import module_cluster, wait_until
from tests.e2e import fuzzing
from zpar.cluster.connection import read_connection_file
from zpar.cluster.launchers.hubquery import HubLine
from zpar.wire import Session
from zpar.wire.messages import MsgType
from zpar.wire.privacy import iopub_topic
from zpar.wire.transport import direct_dir

#: Messages hypothesis sends to one socket (each test) and the seeded generator (each seed).
EXAMPLES = 30
MUTATIONS = 150


def _hello():
    print("still here")
    return 1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two engines on the default heartbeat (0.5 s x 4): the e2e clusters' 0.1 s x 4 lets
    a hub busy for 0.5 s on a loaded machine declare live engines dead, which is not what
    this suite is about."""
    yield from module_cluster(tmp_path_factory, "zpar-fuzz", 2, timeout=60, log_level="INFO")


@pytest.fixture(scope="module")
def surface(cluster):
    """(ConnectionInfo, targets by name, engine uuids) of the module's cluster; the
    engine-side addresses from a registration the hub drops unanswered by heartbeats."""
    rc = cluster.client
    rc.wait_for_engines(2, timeout=60)
    info = read_connection_file(cluster.url_file)
    session = Session(info.key)
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(info.registration)
    try:
        replies = {}
        for msg_type, content in (
            (MsgType.CONNECTION_REQUEST, {}),
            (MsgType.REGISTRATION_REQUEST, {"uuid": "fuzz-not-an-engine"}),
        ):
            session.send(s, msg_type, content)
            assert s.poll(20_000), f"the hub did not answer {msg_type}"
            reply = session.feed(s.recv_multipart())
            assert reply is not None and reply.content["status"] == "ok", reply
            replies[msg_type] = dict(reply.content)
    finally:
        s.close()
    client = replies[MsgType.CONNECTION_REQUEST]
    engine = replies[MsgType.REGISTRATION_REQUEST]
    uuids = [rc._io.engines[i] for i in sorted(rc._io.engines)]
    rundir = direct_dir(client["local"]["mux"])
    assert rundir, "the client side has no ipc twins: the direct sockets cannot be found"
    return info, fuzzing.targets(info, client, engine, uuids, rundir), uuids


@pytest.fixture(scope="module")
def processes(cluster, surface):
    """The controller, its task scheduler and the engines, as psutil processes."""
    ctl = psutil.Process(cluster.launcher.controller.pid)
    procs = [ctl, *ctl.children()]
    assert any("zpar.schedulers" in " ".join(p.cmdline()) for p in procs), procs
    line = HubLine(cluster.url_file)
    try:
        engines = [psutil.Process(e["pid"]) for e in line.engine_info().values()]
    finally:
        line.close()
    assert len(engines) == 2, engines
    return procs + engines


@pytest.fixture(scope="module")
def tcp_client(cluster):
    """A client that reaches every relay and the scheduler over tcp (the fuzzed sockets),
    where the module's client uses the ipc twins and the engines' direct sockets."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ZPAR_TRANSPORT", "tcp")
    c = cluster.connect_client()
    mp.undo()
    yield c
    c.close()


def _iopub_answers(info, address, rc) -> None:
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, iopub_topic(info.key))
    sub.connect(address)
    session = Session(info.key)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the subscription has reached the relay
            ar = rc[0].apply_async(_hello)
            ar.get(timeout=60)
            while sub.poll(300):
                msg = session.feed(sub.recv_multipart())
                if msg is not None and msg.msg_type == MsgType.STREAM:
                    if msg.content.get("text") == "still here\n":
                        return
        raise AssertionError("IOPub carried no output after the fuzzing")
    finally:
        sub.close()


def assert_everything_answers(rc, tcp_client, processes, surface) -> None:
    """Every process up with the same pid; each path answers a valid request."""
    for p in processes:
        assert p.is_running() and p.status() != psutil.STATUS_ZOMBIE, f"{p} died"
    info, targets, _ = surface
    assert rc.controller_status()["engines"] == [0, 1]
    for client in (rc, tcp_client):
        assert client[:].apply_sync(_hello) == [1, 1]  # direct / mux relay, engines
        assert client.load_balanced_view().map_sync(abs, [-1, -2]) == [1, 2]  # scheduler
        client.clear(block=True)  # control relay
        assert client.queue_status()["unassigned"] == 0  # hub
    _iopub_answers(info, targets["iopub client"].address, tcp_client)
    _rendezvous_answers(info)
    assert rc.ids == [0, 1]  # heartbeats: no engine lost


def _rendezvous_answers(info) -> None:
    """The hub's rendezvous service (comm.hubservice) answers a member's first request."""
    session = Session(info.key)
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(info.registration)
    try:
        comm_id = f"fuzz-check-{time.monotonic_ns()}"
        content = {"comm_id": comm_id, "auth_mask": 0x4, "timeout": 2.0}  # the key method
        session.send(s, MsgType.RENDEZVOUS_AUTH_REQUEST, content)
        assert s.poll(30_000), "the rendezvous service did not answer"
        reply = session.feed(s.recv_multipart())
        assert reply is not None and reply.msg_type == MsgType.RENDEZVOUS_AUTH_REPLY, reply
        assert reply.content["comm_id"] == comm_id
    finally:
        s.close()


def _send_all(sock: zmq.Socket, target, multiparts) -> None:
    for frames in multiparts:
        sock.send_multipart([*target.prefix, *frames])


def _dest(name: str, uuids: list[str]) -> str | None:
    if name.startswith("direct "):
        return uuids[int(name.split()[1])]
    if name in ("mux client", "control client"):
        return uuids[0]
    return "task" if name == "task client" else None


SOCKETS = [
    "registration",
    "notification",
    "mux client",
    "control client",
    "task client",
    "iopub client",
    "mux engine",
    "control engine",
    "task engine",
    "iopub engine",
    "heartbeat ping",
    "heartbeat pong",
    "signal",
    "direct 0",
    "direct 1",
]


#: Sockets where the controller refuses nothing itself: a PUB ignores what its subscribers
#: send; the notification XPUB takes any subscription (it carries nothing secret); IOPub's
#: client side counts only subscriptions (frames starting with 1: the dedicated test sends
#: one) and its engine side passes what engines publish on to subscribers, who check it.
UNCOUNTED = {"heartbeat ping", "notification", "iopub client", "iopub engine"}


@pytest.mark.parametrize("name", SOCKETS)
def test_hypothesis_frames_on_every_socket(name, rc, tcp_client, processes, surface):
    info, targets, uuids = surface
    target = targets[name]
    sock = fuzzing.connect(zmq.Context.instance(), target)
    key = info.key.encode() if isinstance(info.key, str) else info.key
    try:

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(
            st.lists(
                fuzzing.raw_frames | fuzzing.signed_messages(key, _dest(name, uuids)),
                min_size=1,
                max_size=4,
            )
        )
        def throw(multiparts):
            _send_all(sock, target, multiparts)

        before = rc.controller_status()["total_refused"]
        throw()
        assert_everything_answers(rc, tcp_client, processes, surface)
        if name not in UNCOUNTED:
            wait_until(
                lambda: rc.controller_status()["total_refused"] > before,
                f"no refusal counted for the frames sent to {name}",
                timeout=30,
            )
    finally:
        sock.close()


@pytest.mark.parametrize("seed", [1, 2])
def test_seeded_mutations_of_valid_messages_on_every_socket(
    seed, rc, tcp_client, processes, surface
):
    info, targets, uuids = surface
    key = info.key.encode() if isinstance(info.key, str) else info.key
    session = Session(key)
    rng = random.Random(seed)
    ctx = zmq.Context.instance()
    for name in SOCKETS:
        target = targets[name]
        msg_type = MsgType.APPLY_REQUEST if _dest(name, uuids) else MsgType.QUEUE_REQUEST
        _, valid = session.serialize(
            msg_type, {"targets": [0]}, dest=_dest(name, uuids), buffers=[b"x" * 10]
        )
        sock = fuzzing.connect(ctx, target)
        try:
            _send_all(sock, target, fuzzing.mutations(valid, key, rng, MUTATIONS))
        finally:
            sock.close(linger=2000)
    assert_everything_answers(rc, tcp_client, processes, surface)


def test_refusals_are_counted_per_process_and_reason(cluster, rc, surface):
    """A known bad message to each process shows up under its name and reason, in the
    client's status and in `zpar cluster status --json`."""
    info, targets, uuids = surface
    key = info.key.encode() if isinstance(info.key, str) else info.key
    before = rc.controller_status()["refused"]
    ctx = zmq.Context.instance()
    forger, session = Session(b"wrong key"), Session(key)
    socks = {n: fuzzing.connect(ctx, targets[n]) for n in targets}
    try:
        # bad signatures: the hub, the scheduler, engine 0 through its direct socket
        forger.send(socks["registration"], MsgType.QUEUE_REQUEST, {})
        forger.send(socks["task client"], MsgType.APPLY_REQUEST, {}, dest="task")
        forger.send(socks["direct 0"], MsgType.APPLY_REQUEST, {}, dest=uuids[0])
        # misrouted: engine 1 is sent a request bound to engine 0
        session.send(socks["direct 1"], MsgType.EXECUTE_REQUEST, {"code": ""}, dest=uuids[0])
        # replayed: one query twice
        _, frames = session.serialize(MsgType.QUEUE_REQUEST, {"targets": []})
        socks["registration"].send_multipart(frames)
        socks["registration"].send_multipart(frames)
        # misframed to a relay, malformed heartbeats, a subscription to everything
        socks["mux client"].send_multipart([b"only one frame"])
        socks["heartbeat pong"].send_multipart([b"not a ping"])
        socks["iopub client"].send(b"\x01")

        def grew(status, process, reason):
            return status.get(process, {}).get(reason, 0) > before.get(process, {}).get(reason, 0)

        expected = [
            ("hub", "bad-signature"),
            ("hub", "replayed"),
            ("scheduler", "bad-signature"),
            ("engine 0", "bad-signature"),
            ("engine 1", "misrouted"),
            ("mux relay", "misframed-client"),
            ("heartbeat", "malformed"),
            ("iopub", "subscription"),
        ]

        def all_counted():
            status = rc.controller_status()["refused"]
            return all(grew(status, p, r) for p, r in expected)

        wait_until(all_counted, f"refusals counted as {expected}", timeout=60)
    finally:
        for s in socks.values():
            s.close()
    status = rc.controller_status()
    assert status["total_refused"] == sum(sum(c.values()) for c in status["refused"].values())
    launcher = cluster.launcher
    out = subprocess.run(
        [sys.executable, "-m", "zpar", "cluster", "status", "--json"]
        + ["--profile", launcher.profile, "--cluster-id", launcher.cluster_id],
        capture_output=True,
        text=True,
        timeout=60,
        # the module's cluster lives in the ZPAR_DIR its fixture chose, not this test's
        env={**os.environ, "ZPAR_DIR": str(Path(cluster.url_file).parents[3])},
    )
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["pid"] == status["pid"] and shown["engines"] == [0, 1]
    for p, r in expected:
        assert shown["refused"][p][r] >= status["refused"][p][r] > 0
