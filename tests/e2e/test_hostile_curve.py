"""A --curve cluster attacked (issue 26): a peer holding the cluster's Curve keys and key
sends hypothesis' signed messages and messages past the bounds to the hub and the task
scheduler; strangers without the keys send ZMTP and raw garbage to every tcp port. Every
refusal is counted (past the handshake by reason, before it under ``curve``), a signed
request within the bounds still runs (the positive control), and every process serves."""

from __future__ import annotations

import dataclasses
import os
import socket
import time

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings

from tests.clusters import module_cluster
from tests.e2e.conftest import FAST_HB, wait_until
from tests.e2e.fuzzing import signed_messages
from zpar.cluster.connection import read_connection_file
from zpar.constants import DELIM
from zpar.serialize import pack_apply
from zpar.wire import Session
from zpar.wire.curve import CurveKeys, secure
from zpar.wire.messages import MsgType

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def curve_cluster(tmp_path_factory):
    yield from module_cluster(
        tmp_path_factory,
        "zpar-curve-hostile",
        2,
        wait_timeout=60,
        env={"ZPAR_TRANSPORT": "tcp"},
        curve=True,
        controller_args=FAST_HB,
        timeout=60,
    )


@pytest.fixture(scope="module")
def insider(curve_cluster):
    """(ConnectionInfo, addresses, make(address) -> a Curve DEALER with the cluster's keys)."""
    info = read_connection_file(curve_cluster.url_file)
    ctx = zmq.Context.instance()
    made = []

    def make(address):
        s = secure(ctx.socket(zmq.DEALER), info)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(address)
        made.append(s)
        return s

    q = make(info.registration)
    session = Session(info.key)
    session.send(q, MsgType.CONNECTION_REQUEST, {})
    assert q.poll(30_000), "the hub did not answer over Curve"
    addrs = session.feed(q.recv_multipart()).content
    yield info, addrs, make
    for s in made:
        s.close()


def _run_signed(info, sock, dest="task"):
    """The positive control: a signed apply within the bounds runs through ``sock``."""
    session = Session(info.key)
    h = session.send(sock, MsgType.APPLY_REQUEST, {}, buffers=pack_apply(abs, (-4,), {}), dest=dest)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if sock.poll(100):
            msg = session.feed(sock.recv_multipart())
            if msg is not None and msg.parent_header.get("msg_id") == h["msg_id"]:
                return msg.content["status"]
    return None


def test_an_insider_past_the_bounds_and_hypothesis_messages_over_curve(curve_cluster, insider):
    info, addrs, make = insider
    rc = curve_cluster.client
    task, query = make(addrs["task"]), make(info.registration)
    assert _run_signed(info, task) == "ok"
    deep = []
    for _ in range(1000):
        deep = [deep]
    s = Session(info.key)
    header = s.make_header(MsgType.APPLY_REQUEST, dest="task")
    env = msgpack.packb([header, {}, {"x": deep}, {}, []])
    task.send_multipart([DELIM, s.sign([env]), env])
    header = s.make_header(MsgType.DB_REQUEST)
    env = msgpack.packb([header, {}, {}, {"query": {"x": deep}}, []])
    query.send_multipart([DELIM, s.sign([env]), env])
    assert query.poll(30_000)  # a query refused for a bound is answered, naming the field
    reply = s.feed(query.recv_multipart())
    assert reply.content["status"] == "error" and "content nests" in reply.content["evalue"]

    @settings(
        max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(signed_messages(info.key.encode() if isinstance(info.key, str) else info.key, "task"))
    def throw(frames):
        task.send_multipart(frames)
        query.send_multipart(frames)

    throw()
    assert _run_signed(info, task) == "ok"  # still runs signed work over Curve
    wait_until(
        lambda: rc.controller_status()["refused"].get("scheduler", {}).get("too-deep", 0) >= 1,
        "the scheduler's too-deep refusal counted",
        30,
    )
    status = rc.controller_status()["refused"]
    assert status["hub"].get("too-deep", 0) >= 1
    assert rc[:].apply_sync(lambda: 1) == [1, 1]
    assert rc.controller_status()["pid"] == curve_cluster.launcher.controller.pid


def test_strangers_without_the_keys_reach_nothing(curve_cluster, insider):
    info, addrs, make = insider
    rc = curve_cluster.client
    before = rc.controller_status()["refused"].get("curve", {}).get("handshake", 0)
    ports = {
        a.rsplit(":", 1)[1]
        for a in [info.registration, addrs["task"], addrs["mux"], addrs["control"]]
        if a.startswith("tcp://")
    }
    ctx = zmq.Context.instance()
    stranger = CurveKeys.generate()
    forged = dataclasses.replace(
        info, curve_public_key=stranger.client_public, curve_secret_key=stranger.client_secret
    )
    held = []  # the refused Curve peers, open until their refusals are counted
    for port in ports:
        # a Curve peer with a key pair of its own: refused by the ZAP handler, counted
        wrong = secure(ctx.socket(zmq.DEALER), forged)
        wrong.setsockopt(zmq.LINGER, 0)
        wrong.connect(f"tcp://127.0.0.1:{port}")
        # a ZMTP peer without Curve: its handshake fails, nothing it sends is read
        plain = ctx.socket(zmq.DEALER)
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(f"tcp://127.0.0.1:{port}")
        for sock in (wrong, plain):
            sock.send_multipart([DELIM, os.urandom(32), b"\x95" + os.urandom(64)])
        assert not wrong.poll(200) and not plain.poll(50)
        held.append(wrong)
        plain.close()
        # raw bytes that are not even ZMTP
        with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as raw:
            raw.sendall(os.urandom(4096))
    wait_until(
        lambda: (
            rc.controller_status()["refused"].get("curve", {}).get("handshake", 0)
            > before  # the controller's ZAP (the scheduler's logs its own)
        ),
        "the strangers' handshakes refused and counted",
        30,
    )
    for sock in held:
        sock.close()

    assert rc[:].apply_sync(lambda: 2) == [2, 2]
    task = make(addrs["task"])
    assert _run_signed(info, task) == "ok"  # the insider still gets through
