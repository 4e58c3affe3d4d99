"""ClientLink: the task scheduler's client ROUTER driven by a ClientLedger (the I/O half).

::

    client DEALER ──[msg]──► ROUTER client ──recv: identity + its connection's fd──► scheduler
    client DEALER ◄─[reply]── ROUTER client ◄──send: identity frame with NOBLOCK first
                              (SNDHWM = CLIENT_SNDHWM, ROUTER_MANDATORY)
                                  EAGAIN: the client's pipe is full -> ledger parks
                                  EHOSTUNREACH: no such connection  -> client gone
    socket monitor (inproc PAIR) ──EVENT_DISCONNECTED(fd)──► ledger.closed(fd, socket) -> client gone

What libzmq 4.3 does, pinned by tests/schedulers/test_clientlink.py: with ROUTER_MANDATORY
a send to a peer whose pipe is at SNDHWM fails with EAGAIN under ZMQ_DONTWAIT (and blocks
without it: every send here is NOBLOCK), and with EHOSTUNREACH when no connection has the
identity (the HWM is checked when the identity frame is sent, so nothing of the message
leaves); a closed peer's full pipe keeps answering EAGAIN until the ROUTER is polled. ZMQ_SRCFD on a received frame is the connection's fd, the value the monitor's
ACCEPTED / DISCONNECTED events carry. ZMQ_ROUTER_NOTIFY would name the identity at
disconnection directly but is a draft option: libzmq 4.3.5 without the draft API (pyzmq's
wheels) refuses it with EINVAL.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from enum import Enum
from typing import Any

import zmq

from zpar.constants import CLIENT_KEEPALIVE, CLIENT_RCVHWM, CLIENT_SNDHWM
from zpar.wire import recv_message, send_frames
from zpar.wire.sockets import recv_monitor_event, socket_identity

from .clientledger import ClientLedger, Delivery

log = logging.getLogger(__name__)

#: Seconds a close event whose descriptor still names its client's socket is looked at
#: again: libzmq emits the event just before it closes the descriptor; past this the event
#: was about an earlier connection on that number.
RECHECK_FOR = 0.5

#: zmq_msg_get's ZMQ_SRCFD (deprecated in libzmq's docs, still served by 4.3): pyzmq names
#: no constant for it.
SRCFD = 2


class Send(Enum):
    """What one non-blocking send of a reply to a client did."""

    SENT = "sent"
    FULL = "full"  # the client's pipe is at its high-water mark: try again later
    GONE = "gone"  # no connection has that identity any more


def _short(client: bytes) -> str:
    return client.hex()


class ClientLink:
    """Non-blocking replies, parked when a client's pipe is full, and clients found gone.

    Made before ``sock`` binds: a listener copies the socket's options when it binds, so
    an SNDHWM set later would not reach the clients' connections.

    ``on_gone(client)`` is called once per client whose connection closed (or that no send
    could reach): the scheduler cancels its tasks not yet on an engine. ``ledger`` is the
    task book's Ledger: it admits no task of a client that is not reading, or gone.
    """

    def __init__(
        self,
        sock: zmq.Socket,
        on_gone: Callable[[bytes], None],
        hwm: int = CLIENT_SNDHWM,
        monitor: zmq.Socket | None = None,
    ) -> None:
        """``monitor``: a socket of ``sock``'s EVENT_DISCONNECTED events when another
        part owns its monitor (zpar.wire.listenguard), else one is made here."""
        if hwm <= 0:
            raise ValueError(f"the client high-water mark must be > 0 messages, got {hwm}")
        sock.setsockopt(zmq.SNDHWM, hwm)
        # what libzmq reads ahead of us from one client (a batch is one message): while
        # the scheduler pauses its reading (schedulers/quota.py) the rest stays with the client
        sock.setsockopt(zmq.RCVHWM, CLIENT_RCVHWM)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        idle, interval, probes = CLIENT_KEEPALIVE  # a vanished host closes its connections too
        sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
        sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, idle)
        sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, interval)
        sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, probes)
        self.sock = sock
        self.hwm = hwm
        self.on_gone = on_gone
        self.ledger = ClientLedger()
        self._own_monitor = monitor is None
        self.monitor = monitor or sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        #: fd -> until when: a close event named it while it still named its client's socket
        self._unsure: dict[int, float] = {}

    def close(self) -> None:
        if self._own_monitor:
            self.sock.disable_monitor()
        self.monitor.close(linger=0)

    # -- receiving --------------------------------------------------------------------------

    def recv(self, flags: int = 0) -> list[Any]:
        """One client message as recv_message returns it, its sender's connection noted."""
        head = self.sock.recv(flags, copy=False)
        client = head.bytes
        frames = [client, *recv_message(self.sock)] if head.more else [client]
        fd = head.get(SRCFD)
        if not self.ledger.known(client, fd):
            # a connection new to us: first the closes reported before this message
            # (its fd may be a dead client's, reused at once by the OS; the event may still
            # be on its way through the listener guard: the socket tells them apart)
            self.poll_closed()
            displaced = self.ledger.seen(client, fd, socket_identity(fd))
            if displaced is not None:
                self._gone(displaced, "its connection closed (its descriptor was reused)")
        return frames

    def poll_closed(self) -> None:
        """Handle every connection-closed event the monitor has."""
        while True:
            try:
                event = recv_monitor_event(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self._closed(event["value"], time.monotonic() + RECHECK_FOR)

    def _closed(self, fd: int, until: float) -> None:
        client = self.ledger.closed(fd, socket_identity(fd))
        if client is not None:
            self._unsure.pop(fd, None)
            self._gone(client, "its connection closed")
        elif self.ledger.owner(fd) is not None and time.monotonic() < until:
            self._unsure[fd] = until  # still its client's socket: looked at again (flush)
        else:
            self._unsure.pop(fd, None)

    def is_gone(self, client: bytes) -> bool:
        return self.ledger.is_gone(client)

    # -- sending ----------------------------------------------------------------------------

    def _try_send(self, client: bytes, frames: list[Any]) -> Send:
        try:
            self.sock.send(client, zmq.SNDMORE | zmq.NOBLOCK)
        except zmq.Again:
            return Send.FULL
        except zmq.ZMQError as e:
            if e.errno == zmq.EHOSTUNREACH:
                return Send.GONE
            raise
        send_frames(self.sock, frames)
        return Send.SENT

    def send(self, client: bytes, frames: list[Any]) -> None:
        """Send ``[client, *frames]`` now, or park it until the client reads again; a gone
        client's reply is dropped."""
        ledger = self.ledger
        if ledger.deliver(client, frames) is not Delivery.SEND:
            return  # parked behind earlier replies, or dropped: its client is gone
        outcome = self._try_send(client, frames)
        if outcome is Send.FULL:
            ledger.full(client, frames)
            log.info(
                "client %s is not reading (%d replies in its pipe): its replies wait here "
                "and its queued tasks are held",
                _short(client),
                self.hwm,
            )
        elif outcome is Send.GONE:
            self._gone(client, "no connection has its identity")

    @property
    def busy(self) -> bool:
        """Replies are parked, or a close event is looked at again: call ``flush`` soon."""
        return self.ledger.busy or bool(self._unsure)

    def flush(self) -> list[bytes]:
        """Retry parked replies, oldest first, until a client's pipe is full again; the
        clients that caught up (their held tasks may run). Close events whose descriptor
        still named its client's socket are looked at again."""
        for fd, until in list(self._unsure.items()):
            self._closed(fd, until)
        ledger = self.ledger
        caught_up = []
        for client in ledger.stalled_clients():
            while True:
                outcome = self._try_send(client, ledger.oldest(client))
                if outcome is Send.FULL:
                    break
                if outcome is Send.GONE:
                    self._gone(client, "no connection has its identity")
                    break
                if ledger.sent_oldest(client):
                    log.info("client %s reads again: its held tasks may run", _short(client))
                    caught_up.append(client)
                    break
        return caught_up

    def _gone(self, client: bytes, why: str) -> None:
        parked = self.ledger.parked_of(client)
        self.ledger.forget(client)
        log.info(
            "client %s is gone (%s): %d parked repl(ies) dropped, its queued tasks cancelled",
            _short(client),
            why,
            parked,
        )
        self.on_gone(client)
