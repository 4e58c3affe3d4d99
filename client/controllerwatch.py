"""ControllerWatch: how a client learns that its controller is lost or refuses its keys.

docs/security.md: a refused handshake or signature is a wrong key, a lost query connection
a lost controller; never a silent hang. The watch reads the query socket's monitor (the I/O
thread, client.ioloop.ClientIO, polls it) and turns what it says into the error every
pending and later request fails with; it holds no request itself.
"""

from __future__ import annotations

from typing import Any

import zmq

from zpar.errors import ControllerLost, WrongKey, ZparError
from zpar.wire.sockets import recv_monitor_event

#: Socket-monitor events of a refused ZMTP handshake (mechanism or keys).
HANDSHAKE_FAILED = (
    zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


class ControllerWatch:
    """The query socket's refused handshakes and lost connection, for the client's life.

    query: the DEALER to the hub, not connected yet (its monitor must see the first
    handshake); where: the connection file, named in errors; controller: the controller's
    address and pid, named when it is lost.
    """

    def __init__(self, query: zmq.Socket, where: str = "", controller: str = "") -> None:
        self.where = where
        self.controller = controller
        self._query = query
        #: the monitor's PAIR socket, for the I/O thread's poller; None once ended
        self.socket: zmq.Socket | None = query.get_monitor_socket(
            HANDSHAKE_FAILED | zmq.EVENT_DISCONNECTED
        )

    def on_event(self) -> ZparError | None:
        """Read one monitor event: the error it means for every request (a wrong key, a
        lost controller), or None. Raises zmq.Again when none is waiting."""
        assert self.socket is not None
        event = recv_monitor_event(self.socket, zmq.NOBLOCK)
        if event["event"] & HANDSHAKE_FAILED:
            return self.handshake_refused(event)
        if event["event"] == zmq.EVENT_DISCONNECTED:
            # the controller's process is gone (the OS closes its sockets), or the network
            # between us broke: no reply of what is pending can reach us (routing
            # identities change on reconnection)
            return ControllerLost(
                f"lost the controller {self.controller or ''} ({self.where}): its "
                "connection closed; every pending request failed. Start a client "
                "again once a controller runs"
            )
        return None

    def handshake_refused(self, event: dict[str, Any]) -> WrongKey:
        return WrongKey(
            f"the controller refused this client's handshake (event {event['event']:#x} "
            f"on {event['endpoint']!r}): the Curve keys in {self._file()} are not the "
            "running cluster's, or one side uses Curve and the other not"
        )

    def signature_refused(self) -> WrongKey:
        """The controller answered BAD_KEY: it refused this client's signature."""
        return WrongKey(
            "the controller refused this client's signature: the key in "
            f"{self._file()} is not the running cluster's "
            "(a file of another or an earlier cluster?)"
        )

    def _file(self) -> str:
        return self.where or "the connection file"

    def end(self) -> None:
        """Stop monitoring and close the monitor's socket (the I/O thread, at its end)."""
        mon, self.socket = self.socket, None
        if mon is None:
            return
        if not self._query.closed:
            self._query.disable_monitor()
        mon.close(linger=0)
