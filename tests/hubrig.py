"""A hub on inproc sockets, for tests of its handlers without processes."""

from __future__ import annotations

from collections.abc import Callable

import zmq

from zpar.hub.heartmonitor import HeartMonitor
from zpar.hub.hub import Addresses, Hub
from zpar.wire import Session


def inproc_hub(sock: Callable[..., zmq.Socket], key: bytes) -> Hub:
    """A Hub whose sockets ``sock(kind, address)`` binds: registration ``inproc://q``,
    notification ``inproc://n``, monitor ``inproc://m``, events ``inproc://e``, heartbeat
    ``inproc://ping`` / ``inproc://pong`` (1 s x 3). Connect a PULL to ``inproc://e``: a
    PUSH without a peer blocks."""
    heart = HeartMonitor(
        sock(zmq.PUB, "inproc://ping"),
        sock(zmq.ROUTER, "inproc://pong"),
        period=1.0,
        max_misses=3,
        on_new_heart=lambda u: None,
        on_heart_failure=lambda u, r: None,
    )
    return Hub(
        Session(key),
        query=sock(zmq.ROUTER, "inproc://q"),
        notification=sock(zmq.XPUB, "inproc://n"),
        monitor=sock(zmq.PULL, "inproc://m"),
        events=sock(zmq.PUSH, "inproc://e"),
        heart=heart,
        addresses=Addresses({}, {}),
    )
