"""A hub on inproc sockets, for tests of its handlers without processes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

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


@contextmanager
def hub_rig(key: bytes) -> Iterator[tuple[Hub, Callable[..., zmq.Socket], zmq.Socket]]:
    """An inproc_hub with the scheduler's end of its events socket connected; yields (hub,
    sock, events). ``sock(kind, addr=None, bind=True, ident=None)`` makes a peer socket (bound
    or connected to ``addr``, with routing id ``ident``). The hub's store is flushed and every
    socket closed on exit."""
    ctx = zmq.Context()
    socks: list[zmq.Socket] = []

    def sock(kind: int, addr: str | None = None, bind: bool = True, ident: bytes | None = None):
        s = ctx.socket(kind)
        s.setsockopt(zmq.LINGER, 0)
        if ident is not None:
            s.setsockopt(zmq.ROUTING_ID, ident)
        socks.append(s)
        if addr:
            s.bind(addr) if bind else s.connect(addr)
        return s

    try:
        hub = inproc_hub(sock, key)
        events = sock(zmq.PULL, "inproc://e", bind=False)  # a PUSH without a peer blocks
        try:
            yield hub, sock, events
        finally:
            hub.writer.flush(everything=True)
    finally:
        for s in socks:
            s.close()
        ctx.term()
