"""An IMPI server conformance tester: ``zpar conformance impi HOST:PORT --clients N``.

Like NIST's IMPI tester (seed 003), it plays N clients against a server it knows nothing
about, checking the start-up wire protocol byte by byte: AUTH refusals, the AUTH reply
without a command header, IMPI's size, COLL's masks, lengths and rank order (with a label
one client skips), DONE only after the last client's DONE, and FINI without an answer.
Each check is reported passed or failed; the exit code is 0 only when all passed.

The server must be fresh (serving a job of exactly N clients) and must offer the method
asked for with ``--auth`` (``key``: zpar's HMAC challenge or the spec's key, whichever the
server chooses; the key comes from $IMPI_AUTH_KEY).
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass

from . import impi_wire as w
from .rendezvous import AUTH_HMAC, AUTH_KEY, AUTH_METHODS, AUTH_NONE, hmac_proof, impi_key_value

#: Seconds to wait for any answer the server owes.
REPLY_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    passed: bool
    detail: str = ""

    def __str__(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}" + (
            f": {self.detail}" if self.detail else ""
        )


class ConformanceFailure(Exception):
    """A check failed in a way that stops the run (the connection is unusable)."""


class _PlayedClient:
    """One simulated IMPI client on a blocking socket."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.reader = w.StreamReader()
        self._items: list = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next(self) -> w.Command | w.Raw | w.ServerAuth:
        while not self._items:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionResetError("the server closed the connection")
            self._items += self.reader.feed(data)
        return self._items.pop(0)

    def closed_by_server(self) -> bool:
        """True when the server closes this connection (EOF or reset) within the timeout."""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def nothing_pending(self) -> bool:
        """No byte from the server is waiting now (it has not answered early)."""
        if self._items or self.reader.pending:
            return False
        self.sock.setblocking(False)
        try:
            return not self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True
        finally:
            self.sock.settimeout(REPLY_TIMEOUT)

    def close(self) -> None:
        self.sock.close()


class ImpiConformance:
    def __init__(
        self, host: str, port: int, clients: int, *, auth: str = "key", key: bytes = b""
    ) -> None:
        if not 1 <= clients <= 32:
            raise ValueError(f"--clients must be 1..32, got {clients}")
        self.host, self.port, self.n = host, port, clients
        self.auth, self.key = auth, key
        self.checks: list[Check] = []

    def check(self, name: str, passed: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, passed, detail))
        return passed

    def run(self) -> list[Check]:
        try:
            self._refusals()
            clients = [self._connect() for _ in range(self.n)]
            try:
                self._session(clients)
            finally:
                for c in clients:
                    c.close()
        except (ConformanceFailure, OSError, w.ImpiWireError) as e:
            self.check("run to the end", False, f"{type(e).__name__}: {e}")
        return self.checks

    # -- the checks ------------------------------------------------------------------------------

    def _connect(self) -> _PlayedClient:
        return _PlayedClient(self.host, self.port, REPLY_TIMEOUT)

    def _refusals(self) -> None:
        c = self._connect()
        try:
            c.send(w.encode_auth(1 << 31))  # a method nobody defines
            self.check(
                "AUTH: no common method -> connection closed",
                c.closed_by_server(),
                "offered only method 31",
            )
        finally:
            c.close()
        c = self._connect()
        try:
            c.send(w.encode_impi(0))  # AUTH must come first (seed 003, 2.3.3)
            self.check("IMPI before AUTH -> connection closed", c.closed_by_server())
        finally:
            c.close()
        if self.auth == "none":
            return
        c = self._connect()
        try:
            mask = AUTH_HMAC.bit | AUTH_KEY.bit
            c.send(w.encode_auth(mask))
            c.reader.expect_server_auth()
            reply = c.next()
            if not isinstance(reply, w.ServerAuth) or reply.which not in (1, 2):
                self.check("AUTH: wrong key -> connection closed", False, f"got {reply}")
                return
            wrong = str(int(self.key or b"0") + 1).encode()
            c.send(self._proof(reply.which, wrong, reply.data))
            self.check("AUTH: wrong key -> connection closed", c.closed_by_server())
        finally:
            c.close()

    def _proof(self, which: int, key: bytes, challenge: bytes) -> bytes:
        return hmac_proof(key, challenge) if which == AUTH_HMAC.which else impi_key_value(key)

    def _authenticate(self, c: _PlayedClient, index: int) -> None:
        mask = AUTH_NONE.bit if self.auth == "none" else AUTH_HMAC.bit | AUTH_KEY.bit
        c.send(w.encode_auth(mask))
        c.reader.expect_server_auth()
        reply = c.next()
        assert isinstance(reply, w.ServerAuth)
        method = AUTH_METHODS.get(reply.which)
        ok = method is not None and bool(mask & method.bit)
        ok = ok and len(reply.data) == method.challenge_size  # type: ignore[union-attr]
        if index == 0:
            self.check(
                "AUTH: IMPI_Server_auth {which, len} without a command header",
                ok,
                f"which={reply.which}, len={len(reply.data)} (offered mask {mask:#x})",
            )
        if not ok or method is None:
            raise ConformanceFailure(f"server chose method {reply.which} outside mask {mask:#x}")
        if method.proof_size:
            c.send(self._proof(method.which, self.key, reply.data))

    def _session(self, clients: list[_PlayedClient]) -> None:
        n = self.n
        for i, c in enumerate(clients):
            self._authenticate(c, i)
        # IMPI: ranks sent in a shuffled order; the size must come back to each client
        order = list(range(n))
        random.shuffle(order)
        for rank in order:
            clients[rank].send(w.encode_impi(rank))
        sizes = [self._expect(c, w.CMD_IMPI) for c in clients]
        self.check(
            "IMPI: every client gets {IMPI, 4, size}",
            all(p == w.int4s(n) for p in sizes),
            f"expected size {n}, got {[p.hex() for p in sizes]}",
        )
        full = (1 << n) - 1
        # C_VERSION: every client supports 0.0
        self._coll_round(clients, w.IMPI_C_VERSION, {r: w.int4s(0, 0) for r in range(n)})
        # C_NHOSTS as seed 004's example (3, 2, 2, ...): mask all ones, len 8 + 4n
        nhosts = {r: w.int4s(3 if r == 0 else 2) for r in range(n)}
        got = self._coll_round(clients, w.IMPI_C_NHOSTS, nhosts)
        self.check(
            f"COLL C_NHOSTS: mask {full:#x}, len {8 + 4 * n}, values in rank order",
            got == [(w.IMPI_C_NHOSTS, full, b"".join(nhosts[r] for r in range(n)))] * n,
            _show(got[:1]),
        )
        # C_DATALEN skipped by client 1 (it sends C_TAGUB first): its bit is clear
        skipper = 1 if n > 1 else None
        datalen = {r: w.int4s(8000 if r == 0 else 4000) for r in range(n) if r != skipper}
        tagub = {r: w.int4s(32767) for r in range(n)}
        for r in range(n):
            if r != skipper:
                clients[r].send(w.encode_coll(w.IMPI_C_DATALEN, datalen[r]))
        if skipper is not None:
            clients[skipper].send(w.encode_coll(w.IMPI_C_TAGUB, tagub[skipper]))
        got = [self._coll_reply(c) for c in clients]
        mask = full & ~(1 << skipper) if skipper is not None else full
        body = b"".join(datalen[r] for r in sorted(datalen))
        self.check(
            f"COLL C_DATALEN with a client skipping it: mask {mask:#x}, len {8 + len(body)}",
            got == [(w.IMPI_C_DATALEN, mask, body)] * n,
            _show(got[:1]),
        )
        for r in range(n):
            if r != skipper:
                clients[r].send(w.encode_coll(w.IMPI_C_TAGUB, tagub[r]))
        got = [self._coll_reply(c) for c in clients]
        self.check(
            "COLL C_TAGUB after the skip",
            got == [(w.IMPI_C_TAGUB, full, b"".join(tagub[r] for r in range(n)))] * n,
            _show(got[:1]),
        )
        # H_PORT: per-host arrays of different lengths, concatenated in rank order
        ports = {
            r: w.int4s(*(5001 + 1000 * r + h for h in range(3 if r == 0 else 2))) for r in range(n)
        }
        got = self._coll_round(clients, w.IMPI_H_PORT, ports)
        body = b"".join(ports[r] for r in range(n))
        self.check(
            f"COLL H_PORT: arrays of unequal length, len {8 + len(body)}",
            got == [(w.IMPI_H_PORT, full, body)] * n,
            _show(got[:1]),
        )
        # DONE: no answer until the last client's DONE, then {DONE, 0} to everyone
        for c in clients[:-1]:
            c.send(w.encode_done())
        early = all(c.nothing_pending() for c in clients)
        clients[-1].send(w.encode_done())
        done = [self._expect(c, w.CMD_DONE) for c in clients]
        self.check(
            "DONE: answered {DONE, 0} to all, only after the last DONE",
            early and all(p == b"" for p in done),
            "" if early else "a client had an answer before the last DONE",
        )
        # FINI: no answer
        for c in clients:
            c.send(w.encode_fini())
        quiet = all(c.nothing_pending() for c in clients)
        self.check("FINI: the server sends nothing back", quiet)

    def _coll_round(
        self, clients: list[_PlayedClient], label: int, data: dict[int, bytes]
    ) -> list[tuple[int, int, bytes]]:
        for r in random.sample(sorted(data), len(data)):
            clients[r].send(w.encode_coll(label, data[r]))
        return [self._coll_reply(c) for c in clients]

    def _coll_reply(self, c: _PlayedClient) -> tuple[int, int, bytes]:
        return w.decode_coll_reply(self._expect(c, w.CMD_COLL))

    def _expect(self, c: _PlayedClient, cmd: int) -> bytes:
        item = c.next()
        if not isinstance(item, w.Command) or item.cmd != cmd:
            raise ConformanceFailure(f"expected {w.CMD_NAMES[cmd]} from the server, got {item}")
        return item.payload


def _show(got: list[tuple[int, int, bytes]]) -> str:
    return ", ".join(f"label {lab:#x} mask {m:#x} data {d.hex()}" for lab, m, d in got)


def run(
    address: str,
    clients: int,
    *,
    auth: str = "key",
    key: bytes = b"",
    report: Callable[[str], None] | None = None,
) -> list[Check]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    checks = ImpiConformance(host, int(port), clients, auth=auth, key=key).run()
    if report is not None:
        for c in checks:
            report(str(c))
    return checks


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="zpar conformance", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="protocol", required=True)
    impi = sub.add_parser("impi", help="check an IMPI server (seed 003's start-up protocol)")
    impi.add_argument("address", help="HOST:PORT the server printed")
    impi.add_argument("--clients", type=int, required=True)
    impi.add_argument("--auth", choices=("none", "key"), default="key")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    key = os.environ.get("IMPI_AUTH_KEY", "").encode()
    if args.auth == "key" and not key:
        print("zpar conformance: --auth key needs the key in $IMPI_AUTH_KEY", file=sys.stderr)
        return 2
    try:
        checks = run(args.address, args.clients, auth=args.auth, key=key, report=print)
    except ValueError as e:
        print(f"zpar conformance: {e}", file=sys.stderr)
        return 2
    failed = sum(not c.passed for c in checks)
    print(f"{len(checks) - failed}/{len(checks)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
