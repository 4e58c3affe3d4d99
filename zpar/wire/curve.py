"""CurveZMQ for a cluster started with ``--curve``: keys, socket set-up, ZAP authentication.

One server key pair belongs to the controller's processes (hub, relays, task scheduler);
one client key pair is shared by every engine and client holding the cluster's connection
file. A socket the controller binds is a Curve server; a socket a peer connects to one of
the controller's addresses is a Curve client. Curve encrypts and authenticates the link;
the ZAP handler of each controller process then admits only the cluster's client key, so
knowing the server's public key (it is public) is not enough to complete a handshake.

The engine's own direct ipc socket and the hub-scheduler pipes stay plain: they live in the
controller's 0700 run directory, reachable only by the user who can read the key anyway.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import zmq

from .pollthread import PollThread

log = logging.getLogger(__name__)

#: Where libzmq asks its ZAP handler (RFC 27) whether to admit a peer: one per context.
ZAP_ENDPOINT = "inproc://zeromq.zap.01"
ZAP_VERSION = b"1.0"
#: The ZAP domain of every zpar Curve server socket.
ZAP_DOMAIN = "zpar"


@dataclass(frozen=True, slots=True)
class CurveKeys:
    """A cluster's Curve keys (Z85 text). ``server_secret`` is empty outside the controller."""

    server_public: str
    client_public: str
    client_secret: str
    server_secret: str = ""

    @classmethod
    def generate(cls) -> CurveKeys:
        spub, ssec = zmq.curve_keypair()
        cpub, csec = zmq.curve_keypair()
        return cls(spub.decode(), cpub.decode(), csec.decode(), ssec.decode())

    def for_peers(self) -> CurveKeys:
        """The keys an engine or client gets: never the server's secret."""
        return CurveKeys(self.server_public, self.client_public, self.client_secret)

    def write(self, path: Path) -> Path:
        """Write to a new 0600 file (the controller hands its scheduler the keys this way)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(self), f)
        return path

    @classmethod
    def read(cls, path: str | Path) -> CurveKeys:
        data = json.loads(Path(path).read_text())
        return cls(**{k: str(data[k]) for k in cls.__dataclass_fields__ if k in data})


def keys_of(info: Any) -> CurveKeys | None:
    """The peer keys in a ConnectionInfo, or None for a cluster without Curve."""
    if not getattr(info, "curve_server_key", ""):
        return None
    return CurveKeys(info.curve_server_key, info.curve_public_key, info.curve_secret_key)


def secure(sock: zmq.Socket, keys: CurveKeys | Any | None, *, server: bool = False) -> zmq.Socket:
    """Make ``sock`` a Curve server (a socket the controller binds) or client (a socket a
    peer connects to the controller), before it binds or connects. ``keys``: CurveKeys, or a
    ConnectionInfo; None or a cluster without Curve leaves the socket as it is."""
    if keys is not None and not isinstance(keys, CurveKeys):
        keys = keys_of(keys)
    if keys is None:
        return sock
    if server:
        if not keys.server_secret:
            raise ValueError("a Curve server socket needs the server's secret key")
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, keys.server_secret.encode("ascii"))
        sock.setsockopt_string(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
    else:
        sock.setsockopt(zmq.CURVE_SERVERKEY, keys.server_public.encode("ascii"))
        sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.client_public.encode("ascii"))
        sock.setsockopt(zmq.CURVE_SECRETKEY, keys.client_secret.encode("ascii"))
    return sock


class ZapAuthenticator:
    """A ZAP handler thread admitting Curve peers that present the cluster's client key.

    Without a handler libzmq admits any Curve client that knows the server's public key;
    with this one, a peer with any other key pair is refused at handshake (and counted in
    ``refused`` by peer address). Plain (NULL) connections are admitted: only the private
    ipc sockets, which never set a ZAP domain, use them.
    """

    def __init__(self, ctx: zmq.Context, allowed: set[str] | frozenset[str]) -> None:
        self.allowed = frozenset(k.encode("ascii") for k in allowed)
        self.refused: Counter[str] = Counter()
        self._sock = ctx.socket(zmq.REP)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(ZAP_ENDPOINT)  # before any Curve server binds: no unjudged peer
        self._thread = PollThread(ctx, "zpar-zap", self._run).start()

    def judge(self, request: list[bytes]) -> list[bytes]:
        """The ZAP reply frames for one request (RFC 27): 200 admits, 400 refuses."""
        if len(request) < 6:
            return [ZAP_VERSION, request[1] if len(request) > 1 else b"", b"400", b"", b"", b""]
        version, request_id, _domain, address, _identity, mechanism = request[:6]
        if version != ZAP_VERSION:
            return [ZAP_VERSION, request_id, b"400", b"bad ZAP version", b"", b""]
        if mechanism == b"NULL":
            return [ZAP_VERSION, request_id, b"200", b"OK", b"", b""]
        if mechanism == b"CURVE" and len(request) > 6:
            from zmq.utils import z85

            if z85.encode(request[6]) in self.allowed:
                return [ZAP_VERSION, request_id, b"200", b"OK", b"cluster", b""]
        peer = address.decode("ascii", "replace")
        self.refused[peer] += 1
        log.warning(
            "refused a %s handshake from %s: not this cluster's client key (%d refused)",
            mechanism.decode("ascii", "replace"),
            peer,
            sum(self.refused.values()),
        )
        return [ZAP_VERSION, request_id, b"400", b"unknown client key", b"", b""]

    def _run(self, wake: zmq.Socket) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(wake, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if wake in ready:
                    return
                if self._sock in ready:
                    self._sock.send_multipart(self.judge(self._sock.recv_multipart()))
        finally:
            self._sock.close(linger=0)

    def stop(self) -> None:
        """End the thread (before the context is terminated); safe to call twice."""
        self._thread.stop()
