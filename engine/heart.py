"""The engine's heart: echoes the controller's pings from a C proxy thread, GIL-free.

    hub hb_ping PUB ──► SUB ═══ zmq.proxy_steerable (C, no GIL) ═══ DEALER(uuid) ──► hub hb_pong ROUTER
                                         ▲ PAIR inproc: b"TERMINATE" stops it

User code holds the GIL in the main thread for as long as it likes; the proxy never needs it,
so a long pure-Python task cannot get its engine declared dead (pyzmq's
examples/heartbeat/heart.py does the same with a plain device).

The heart's sockets live in a zmq context of their own, so they have a libzmq I/O thread of
their own: on a --curve cluster the engine's I/O thread decrypts and encrypts every byte of
its tasks' messages, and a 100 MB array there held the pongs back past the hub's limit (the
engine was declared dead in the middle of a push; tests/e2e/test_curve_heartbeat.py).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import zmq

from zpar.wire.curve import secure
from zpar.wire.sockets import configure

log = logging.getLogger(__name__)


class Heart:
    """Start with ``start()``; ``stop()`` ends the proxy and closes its sockets."""

    def __init__(self, ping: str, pong: str, identity: bytes, curve: Any = None) -> None:
        """``curve``: the cluster's zpar.wire.curve keys (or its ConnectionInfo) on --curve. The
        heart makes a zmq context of its own when it starts (see the module doc)."""
        self._ctx: zmq.Context | None = None
        self._curve = curve
        self.ping = ping
        self.pong = pong
        self.identity = identity
        self._control_addr = f"inproc://zpar-heart-{id(self):x}"
        self._control: zmq.Socket | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._ctx = zmq.Context()
        sub = secure(configure(self._ctx.socket(zmq.SUB)), self._curve)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(self.ping)
        dealer = secure(configure(self._ctx.socket(zmq.DEALER), self.identity), self._curve)
        dealer.connect(self.pong)
        self._control = configure(self._ctx.socket(zmq.PAIR))
        self._control.bind(self._control_addr)
        remote = configure(self._ctx.socket(zmq.PAIR))
        remote.connect(self._control_addr)
        self._thread = threading.Thread(
            target=self._run, args=(sub, dealer, remote), name="zpar-heart", daemon=True
        )
        self._thread.start()
        log.debug("heart started: %s -> %s as %s", self.ping, self.pong, self.identity)

    def _run(self, sub: zmq.Socket, dealer: zmq.Socket, control: zmq.Socket) -> None:
        try:
            zmq.proxy_steerable(sub, dealer, None, control)
        except zmq.ContextTerminated:
            pass
        except zmq.ZMQError as e:  # pragma: no cover - only on a broken context
            log.error("heart stopped: %s", e)
        finally:
            for s in (sub, dealer, control):
                s.close(linger=0)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the proxy and wait for its thread; safe to call twice."""
        if self._control is None:
            return
        try:
            self._control.send(b"TERMINATE")
        finally:
            if self._thread is not None:
                self._thread.join(timeout)
            self._control.close(linger=0)
            self._control = None
            if self._ctx is not None and (self._thread is None or not self._thread.is_alive()):
                self._ctx.term()
                self._ctx = None
