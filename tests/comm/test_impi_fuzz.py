"""Fuzz the IMPI server (issue 13): random bytes and mutated IMPI commands from peers that
are not part of the job drop only those peers; a real client then completes the job."""

from __future__ import annotations

import random
import socket
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zpar.comm import impi_wire as w
from zpar.comm.impi_server import ImpiServer

TIMEOUT = 30.0


def _valid_commands() -> list[bytes]:
    return [
        w.encode_auth(0x1),
        w.encode_impi(0),
        w.encode_cmd(0x58585858, b"xx"),
        w.encode_done(),
        w.encode_fini(),
    ]


def _mutated(rng: random.Random) -> bytes:
    """A run of IMPI commands, some cut, flipped or with lying lengths."""
    out = b""
    for cmd in rng.choices(_valid_commands(), k=rng.randrange(1, 5)):
        b = bytearray(cmd)
        kind = rng.randrange(4)
        if kind == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b = b[: rng.randrange(len(b) + 1)]
        elif kind == 2:
            b[:4] = rng.randbytes(4)  # the command's length or type
        out += bytes(b)
    return out


def _throw(server: ImpiServer, data: bytes) -> None:
    host, port = server.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(2)
            while s.recv(4096):  # until the server drops us (or gives up waiting for more)
                pass
        except OSError:
            pass  # reset by the server: dropped, as expected


def _one_real_client(server: ImpiServer) -> None:
    host, port = server.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as s:
        s.sendall(w.encode_auth(0x1))
        assert _recv(s, 8) == bytes(8)
        s.sendall(w.encode_impi(0))
        assert _recv(s, 12) == w.encode_impi(1)
        s.sendall(w.encode_done() + w.encode_fini())
        assert _recv(s, 8) == w.encode_done()


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, f"the server closed after {len(buf)} of {n} bytes"
        buf += chunk
    return buf


def _serve_while(junk) -> None:
    server = ImpiServer(1, host="127.0.0.1", auth="none", timeout=TIMEOUT)
    result: dict = {}
    t = threading.Thread(target=lambda: result.setdefault("code", server.serve()), daemon=True)
    t.start()
    junk(server)
    _one_real_client(server)
    t.join(TIMEOUT)
    assert not t.is_alive(), "the IMPI server did not finish its job"
    assert result["code"] == 0, server.failure


@settings(max_examples=15, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=4))
def test_hypothesis_bytes_from_strangers_leave_the_job_intact(payloads):
    _serve_while(lambda server: [_throw(server, p) for p in payloads])


@pytest.mark.parametrize("seed", range(3))
def test_seeded_mutated_commands_leave_the_job_intact(seed):
    rng = random.Random(seed)
    _serve_while(lambda server: [_throw(server, _mutated(rng)) for _ in range(8)])
