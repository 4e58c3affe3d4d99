"""Engines publish each task's output live on IOPub, parented to the request."""

from __future__ import annotations

import time

import zmq

from tests.e2e.conftest import wait_until
from zpar.wire import Session
from zpar.wire.messages import MsgType
from zpar.wire.privacy import iopub_topic


def _talk():
    import sys

    print("hello from the engine")
    print("and on stderr", file=sys.stderr)
    return 1


def _until_subscribed(rc, sub):
    """Until ``sub``'s subscription reached the IOPub relay (PUB/SUB drops what is
    published before it): engine 0 prints until ``sub`` receives something."""
    deadline = time.monotonic() + 20
    while True:
        rc[0].apply_sync(print, "subscribed?")
        if sub.poll(200):
            return
        assert time.monotonic() < deadline, "the subscription never reached the IOPub relay"


def _iopub_refusals(rc):
    return rc.controller_status()["refused"].get("iopub", {}).get("subscription", 0)


def test_stream_and_status_messages_reach_an_iopub_subscriber(rc, cluster_addresses):
    info, addrs = cluster_addresses
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, iopub_topic(info.key))  # only key holders know it
    sub.connect(addrs["iopub"])
    session = Session(info.key)
    try:
        _until_subscribed(rc, sub)
        ar = rc[0].apply_async(_talk)
        assert ar.get(timeout=10) == 1
        seen = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(seen) < 4:
            if sub.poll(500):
                msg = session.feed(sub.recv_multipart())
                if msg is not None and msg.parent_header.get("msg_id") == ar.msg_ids[0]:
                    seen.append((msg.msg_type, dict(msg.content)))
        streams = {c["name"]: c["text"] for t, c in seen if t == MsgType.STREAM}
        states = [c["execution_state"] for t, c in seen if t == MsgType.STATUS]
        assert streams == {"stdout": "hello from the engine\n", "stderr": "and on stderr\n"}
        assert states == ["busy", "idle"]
    finally:
        sub.close()


def _slow_talk(n):
    import sys
    import time

    for i in range(n):
        print(f"line {i}", flush=True)
        sys.stdout.flush()
        time.sleep(0.1)
    return n


def test_stream_outputs_arrive_while_the_task_runs(rc, cluster_addresses):
    import threading

    if rc._io.iopub_addr is None:
        rc._io.iopub_addr = cluster_addresses[1]["iopub"]
    seen = []
    lock = threading.Lock()
    first_line_at = []

    def collect(eid, name, text):
        with lock:
            if not first_line_at:
                first_line_at.append(time.monotonic())
            seen.append((eid, name, text))

    rc[0].apply_sync(lambda: None)  # the engine is idle and connected
    ar = rc[0].apply_async(_slow_talk, 8)
    ar.stream_outputs(collect)
    assert ar.get(timeout=20) == 8
    done_at = time.monotonic()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and "line 7" not in "".join(t for _, _, t in seen):
        time.sleep(0.05)
    text = "".join(t for _, _, t in seen)
    assert "line 7" in text, text
    assert first_line_at and first_line_at[0] < done_at - 0.3, "output did not stream live"
    assert ar.stdout == "".join(f"line {i}\n" for i in range(8))


def test_a_subscriber_without_the_key_reads_no_output(rc, cluster_addresses):
    """Subscribing to everything (or to a guessed topic) is refused by the relay: the
    output of a task reaches the key holder's subscription and never the stranger's."""
    info, addrs = cluster_addresses
    ctx = zmq.Context.instance()
    strangers = []
    refused_before = _iopub_refusals(rc)
    for topic in (b"", b"0" * 32):
        s = ctx.socket(zmq.SUB)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SUBSCRIBE, topic)
        s.connect(addrs["iopub"])
        strangers.append(s)
    owner = ctx.socket(zmq.SUB)
    owner.setsockopt(zmq.LINGER, 0)
    owner.setsockopt(zmq.SUBSCRIBE, iopub_topic(info.key))
    owner.connect(addrs["iopub"])
    session = Session(info.key)
    try:
        # the strangers' subscriptions reached the relay (and were refused there) and the
        # owner's too: what is published from now on would reach them if it could
        wait_until(
            lambda: _iopub_refusals(rc) >= refused_before + len(strangers),
            "the strangers' subscriptions refused",
        )
        _until_subscribed(rc, owner)
        ar = rc[0].apply_async(_talk)
        assert ar.get(timeout=10) == 1
        got_output = False
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not got_output:
            if owner.poll(500):
                msg = session.feed(owner.recv_multipart())
                got_output = (
                    msg is not None
                    and msg.msg_type == MsgType.STREAM
                    and msg.parent_header.get("msg_id") == ar.msg_ids[0]
                )
        assert got_output, "the key holder's subscription saw no output"
        # everything the owner got was sent before this point: the strangers got none of it
        for s in strangers:
            assert not s.poll(200), "a subscriber without the key received IOPub output"
    finally:
        for s in (*strangers, owner):
            s.close()
