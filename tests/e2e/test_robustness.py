"""Garbage, forged and truncated messages on every public socket: dropped, nothing breaks."""

from __future__ import annotations

import os

import zmq

from zpar.constants import BAD_KEY, DELIM
from zpar.wire import Session
from zpar.wire.messages import MsgType

GARBAGE = [
    [b""],
    [b"\x00" * 10, b"\xff" * 100],
    [DELIM],
    [DELIM, b"sig", b"h", b"p", b"m", b"c"],
    [b"not-an-engine", DELIM, b"x"],
    [os.urandom(64) for _ in range(12)],
]


def test_garbage_on_every_socket_is_dropped_and_cluster_keeps_working(rc, cluster_addresses):
    info, addrs = cluster_addresses
    ctx = zmq.Context.instance()
    socks = []
    try:
        for addr in (info.registration, addrs["mux"], addrs["control"], addrs["task"]):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(addr)
            socks.append(s)
            for frames in GARBAGE:
                s.send_multipart(frames)
        # forged: a well-formed request signed with the wrong key, to every engine
        forger = Session(b"wrong key")
        for uuid in rc._io.engines.values():
            forger.send(
                socks[1],
                MsgType.EXECUTE_REQUEST,
                {"code": "import os; os._exit(1)"},
                idents=[uuid.encode()],
            )
        forger.send(socks[3], MsgType.EXECUTE_REQUEST, {"code": "import os; os._exit(1)"})
        assert rc[:].apply_sync(lambda: 1) == [1, 1]
        assert rc.load_balanced_view().map_sync(lambda x: x + 1, range(20)) == list(range(1, 21))
        # the registration socket tells a sender whose signature fails that its key is
        # wrong, in one unsigned frame and nothing else; no other refusal is answered
        while socks[0].poll(200):
            assert socks[0].recv_multipart() == [BAD_KEY]
        for s in socks[1:]:
            assert not s.poll(200), "a refused message was answered"
        assert rc.ids == [0, 1]
    finally:
        for s in socks:
            s.close()
