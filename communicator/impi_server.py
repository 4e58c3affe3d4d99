"""A byte-exact IMPI server over plain TCP: ``zpar impi-server --clients N``.

The rendezvous of seed 003 for any IMPI client (LAM/MPI's, or zpar's conformance tester),
driving the same state machine as the hub (comm.rendezvous). It prints ``IP:port``, serves
one job of N clients and exits 0 once every client sent FINI, 1 when the job failed (a
client vanished or the rendezvous timed out; the reason is logged and printed).

Authentication (``--auth``): ``none`` offers IMPI_AUTH_NONE; ``key`` offers zpar's HMAC
challenge (method 2, preferred: the key never crosses the wire) and the spec's
IMPI_AUTH_KEY (method 1: the 64-bit key in the clear, which is what LAM's client sends);
``hmac`` offers only the challenge. The key is the IMPI_AUTH_KEY environment variable, a
decimal 64-bit integer, as the spec says.
"""

from __future__ import annotations

import argparse
import logging
import os
import selectors
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from zpar.constants import WILDCARDS
from zpar.wire.admission import AUTH_TIMEOUT, MAX_PEERS, Admission

from . import impi_wire as w
from .rendezvous import (
    AUTH_HMAC,
    AUTH_KEY,
    AUTH_METHODS,
    AUTH_NONE,
    MAX_MEMBERS_IMPI,
    AuthChoice,
    AuthMethod,
    CollReply,
    DoneReply,
    Failed,
    Finished,
    Instruction,
    RefuseMember,
    Rendezvous,
    SizeReply,
)

log = logging.getLogger(__name__)

#: --auth choices: the methods offered, most preferred first.
AUTH_CHOICES: dict[str, tuple[AuthMethod, ...]] = {
    "none": (AUTH_NONE,),
    "key": (AUTH_HMAC, AUTH_KEY),
    "hmac": (AUTH_HMAC,),
}

#: Environment variable holding the key (the spec's name).
KEY_ENV = "IMPI_AUTH_KEY"

#: Seconds a job has from the server's start until every client's DONE.
DEFAULT_TIMEOUT = 300.0

#: Seconds a blocked send to one client may take before the client is dropped.
SEND_TIMEOUT = 30.0


@dataclass(slots=True)
class _Client:
    sock: socket.socket
    address: str
    reader: w.StreamReader = field(default_factory=w.StreamReader)


class ImpiServer:
    """One IMPI job's server. ``serve()`` returns when the job is over (0: every FINI)."""

    def __init__(
        self,
        clients: int,
        *,
        auth: str = "key",
        key: bytes = b"",
        host: str = "127.0.0.1",
        port: int = 0,
        timeout: float = DEFAULT_TIMEOUT,
        max_strangers: int = MAX_PEERS,
        auth_timeout: float = AUTH_TIMEOUT,
    ) -> None:
        """``max_strangers``: connections that have not joined the job yet held at once (the
        oldest is closed for a newer one); ``auth_timeout``: seconds one has to join (AUTH
        and IMPI) before it is closed (zpar.wire.admission)."""
        if not 1 <= clients <= MAX_MEMBERS_IMPI:
            raise ValueError(
                f"--clients must be 1..{MAX_MEMBERS_IMPI} (the client_mask has 32 bits), "
                f"got {clients}"
            )
        if auth not in AUTH_CHOICES:
            raise ValueError(f"--auth must be one of {sorted(AUTH_CHOICES)}, got {auth!r}")
        methods = AUTH_CHOICES[auth]
        if any(m.proof_size for m in methods):
            if not key:
                raise ValueError(f"--auth {auth} needs the key in ${KEY_ENV}")
            if AUTH_KEY in methods:
                AUTH_KEY.prove(key, b"")  # a key that is no 64-bit integer fails here
        self.rendezvous = Rendezvous(
            "impi",
            size=clients,
            methods=methods,
            key=key,
            timeout=timeout,
            now=time.monotonic(),
        )
        self.listener = socket.create_server((host if host not in WILDCARDS else "", port))
        self.listener.setblocking(False)
        self.host = host
        self.clients: dict[int, _Client] = {}
        self._serial = 0
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.listener, selectors.EVENT_READ, None)
        self.ok: bool | None = None  # set when the job is over
        self.failure = ""
        #: who may hold a connection: the job's clients, and max_strangers others
        self.admission = Admission(
            "IMPI server",
            max_peers=clients + max_strangers,
            auth_timeout=auth_timeout,
            evict=lambda peer: self._lost(peer, "closed for a newer connection"),
        )

    @property
    def address(self) -> str:
        """``IP:port`` as the spec's server prints it."""
        port = self.listener.getsockname()[1]
        host = self.host
        if host in WILDCARDS:
            host = socket.gethostbyname(socket.gethostname())
        return f"{host}:{port}"

    def serve(self, stop_after: float | None = None) -> int:
        """Serve until the job is over (or ``stop_after`` s pass: for tests)."""
        end = None if stop_after is None else time.monotonic() + stop_after
        try:
            while self.ok is None:
                for key, _ in self._sel.select(timeout=0.25):
                    if key.data is None:
                        self._accept()
                    else:
                        self._read(key.data)
                    if self.ok is not None:
                        break
                now = time.monotonic()
                for peer in self.admission.overdue(now):
                    self._lost(peer, f"did not join within {self.admission.auth_timeout:g} s")
                self._run(self.rendezvous.tick(now))
                if end is not None and time.monotonic() >= end and self.ok is None:
                    self.ok, self.failure = False, "stopped"
        finally:
            self.close()
        return 0 if self.ok else 1

    def close(self) -> None:
        for peer in list(self.clients):
            self._drop(peer)
        try:
            self._sel.unregister(self.listener)
        except (KeyError, ValueError):
            pass
        self.listener.close()
        self._sel.close()
        self.admission.close()

    # -- sockets --------------------------------------------------------------------------------

    def _accept(self) -> None:
        accepted = self.admission.accept(self.listener)
        if accepted is None:  # none waiting, or refused (counted and logged there)
            return
        sock, address = accepted
        sock.settimeout(SEND_TIMEOUT)  # reads happen only when the selector says readable
        self._serial += 1
        peer = self._serial
        self.clients[peer] = _Client(sock, address)
        self._sel.register(sock, selectors.EVENT_READ, peer)
        log.info("IMPI client connection %d from %s", peer, address)
        self.admission.opened(peer)  # may evict the oldest not joined (its _lost)

    def _read(self, peer: int) -> None:
        c = self.clients.get(peer)
        if c is None:
            return
        try:
            data = c.sock.recv(65536)
        except OSError as e:
            data, why = b"", f"connection error: {e}"
        else:
            why = "connection closed"
        if not data:
            self._lost(peer, why)
            return
        try:
            items = c.reader.feed(data)
        except w.ImpiWireError as e:
            self._lost(peer, f"not IMPI: {e}")
            return
        for item in items:
            if peer not in self.clients:
                return
            try:
                self._run(self._event(peer, c, item))
            except w.ImpiWireError as e:
                self._lost(peer, f"not IMPI: {e}")
                return
        if peer in self.admission.pending and self.rendezvous.authenticated(peer):
            self.admission.authenticated(peer)  # no deadline once it passed AUTH

    def _event(self, peer: int, c: _Client, item: w.Command | w.Raw | w.ServerAuth) -> list:
        r = self.rendezvous
        if isinstance(item, w.Raw):
            return r.auth_proof(peer, item.data)
        if not isinstance(item, w.Command):
            raise w.ImpiWireError("unexpected bytes")
        cmd = item.cmd
        if cmd == w.CMD_AUTH:
            return r.auth_offer(peer, w.decode_auth(item.payload))
        if cmd == w.CMD_IMPI:
            return r.impi(peer, w.decode_int(item.payload, "IMPI"), who=c.address)
        if cmd == w.CMD_COLL:
            label, data = w.decode_coll(item.payload)
            return r.coll(peer, label, data)
        if cmd == w.CMD_DONE:
            return r.done(peer)
        if cmd == w.CMD_FINI:
            return r.fini(peer)
        # forward compatibility (seed 003, 2.3.2): commands it does not know are discarded
        log.warning("IMPI client %s: unknown command %s discarded", c.address, item.name)
        return []

    def _run(self, instructions: Sequence[Instruction]) -> None:
        for ins in instructions:
            if isinstance(ins, Finished):
                self.ok = ins.ok
                self.failure = self.failure or (self.rendezvous.failure or "")
                continue
            c = self.clients.get(ins.peer)
            if c is None:
                continue
            if isinstance(ins, AuthChoice):
                method = AUTH_METHODS[ins.which]
                if method is AUTH_NONE:
                    log.warning("IMPI client %s authenticated with IMPI_AUTH_NONE", c.address)
                self._send(ins.peer, w.encode_server_auth(ins.which, ins.challenge))
                if method.proof_size:
                    c.reader.expect_raw(method.proof_size)
            elif isinstance(ins, SizeReply):
                self._send(ins.peer, w.encode_impi(ins.size))
            elif isinstance(ins, CollReply):
                self._send(ins.peer, w.encode_coll_reply(ins.label, ins.mask, ins.payloads))
            elif isinstance(ins, DoneReply):
                self._send(ins.peer, w.encode_done())
            elif isinstance(ins, RefuseMember):
                log.error("IMPI client %s refused: %s", c.address, ins.reason)
                self._drop(ins.peer)
            elif isinstance(ins, Failed):
                self.failure = ins.reason
                log.error("IMPI job failed (client %s dropped): %s", c.address, ins.reason)
                self._drop(ins.peer)

    def _send(self, peer: int, data: bytes) -> None:
        c = self.clients[peer]
        try:
            c.sock.sendall(data)
        except OSError as e:
            self._lost(peer, f"send failed: {e}")

    def _lost(self, peer: int, reason: str) -> None:
        c = self.clients.get(peer)
        where = c.address if c else str(peer)
        self._drop(peer)
        self._run(self.rendezvous.disconnect(peer, f"{where}: {reason}"))

    def _drop(self, peer: int) -> None:
        self.admission.closed(peer)
        c = self.clients.pop(peer, None)
        if c is None:
            return
        try:
            self._sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        c.sock.close()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zpar impi-server",
        description="an IMPI rendezvous server (seed 003): prints IP:port, serves one job",
    )
    p.add_argument("--clients", type=int, required=True, help="number of IMPI clients")
    p.add_argument("--auth", choices=sorted(AUTH_CHOICES), default="key")
    p.add_argument("--port", type=int, default=0, help="TCP port (default: any free one)")
    p.add_argument("--ip", default="127.0.0.1", help="interface to listen on")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    p.add_argument(
        "--max-strangers",
        type=int,
        default=MAX_PEERS,
        help="connections not yet joined held at once; the oldest is closed for a newer one",
    )
    p.add_argument(
        "--auth-timeout",
        type=float,
        default=AUTH_TIMEOUT,
        help="seconds a connection has to join the job (AUTH, IMPI) before it is closed",
    )
    p.add_argument("--log-level", default="WARNING")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(message)s")
    try:
        server = ImpiServer(
            args.clients,
            auth=args.auth,
            key=os.environ.get(KEY_ENV, "").encode(),
            host=args.ip,
            port=args.port,
            timeout=args.timeout,
            max_strangers=args.max_strangers,
            auth_timeout=args.auth_timeout,
        )
    except (ValueError, OSError) as e:
        print(f"zpar impi-server: {e}", file=sys.stderr)
        return 2
    print(server.address, flush=True)
    try:
        code = server.serve()
    except KeyboardInterrupt:
        print("zpar impi-server: interrupted", file=sys.stderr)
        return 130
    if code:
        print(f"zpar impi-server: job failed: {server.failure}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
