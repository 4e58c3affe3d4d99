"""Engines publish each task's output live on IOPub, parented to the request."""

from __future__ import annotations

import time

import zmq

from zpar.messages import MsgType
from zpar.wire import Session


def _talk():
    import sys

    print("hello from the engine")
    print("and on stderr", file=sys.stderr)
    return 1


def test_stream_and_status_messages_reach_an_iopub_subscriber(rc, cluster_addresses):
    info, addrs = cluster_addresses
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(addrs["iopub"])
    session = Session(info.key)
    try:
        time.sleep(0.3)  # PUB/SUB: let the subscription propagate through the XPUB relay
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
