"""The byte-exact IMPI server over TCP on 127.0.0.1, and the conformance tester against it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from zpar.comm import conformance
from zpar.comm import impi_wire as w
from zpar.comm.impi_server import ImpiServer
from zpar.comm.rendezvous import hmac_proof, impi_key_value

KEY = b"5678"
TIMEOUT = 30.0
_sockets: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    yield
    while _sockets:
        _sockets.pop().close()


@contextmanager
def serving(clients: int, **kw) -> Iterator[tuple[ImpiServer, dict]]:
    server = ImpiServer(clients, host="127.0.0.1", key=kw.pop("key", KEY), **kw)
    result: dict = {}
    t = threading.Thread(target=lambda: result.setdefault("code", server.serve()), daemon=True)
    t.start()
    try:
        yield server, result
    finally:
        t.join(TIMEOUT)
        assert not t.is_alive(), "the IMPI server did not stop"


def connect(server: ImpiServer) -> socket.socket:
    host, port = server.address.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=TIMEOUT)
    _sockets.append(s)
    return s


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def auth_none(s: socket.socket) -> None:
    s.sendall(w.encode_auth(0x1))
    assert recv_exact(s, 8) == bytes(8)  # IMPI_Server_auth {0, 0}, no header


def test_conformance_passes_against_our_server_with_key() -> None:
    with serving(3, auth="key") as (server, result):
        checks = conformance.run(server.address, 3, auth="key", key=KEY)
    failed = [str(c) for c in checks if not c.passed]
    assert not failed, failed
    assert len(checks) >= 9
    assert result["code"] == 0  # every client sent FINI: the job succeeded


def test_conformance_passes_with_auth_none_and_one_client() -> None:
    with serving(1, auth="none", key=b"") as (server, result):
        checks = conformance.run(server.address, 1, auth="none")
    assert all(c.passed for c in checks), [str(c) for c in checks]
    assert result["code"] == 0


def test_seed_004_bytes_three_clients_nhosts_and_missing_label() -> None:
    with serving(3, auth="none") as (server, result):
        socks = [connect(server) for _ in range(3)]
        for s in socks:
            auth_none(s)
        for rank, s in enumerate(socks):
            s.sendall(w.encode_impi(rank))
        for s in socks:
            assert recv_exact(s, 12) == bytes.fromhex("494d5049 00000004 00000003".replace(" ", ""))
        for s, n in zip(socks, (3, 2, 2), strict=True):
            s.sendall(w.encode_coll(w.IMPI_C_NHOSTS, w.int4s(n)))
        expect = bytes.fromhex("434f4c4c000000140000110000000007000000030000000200000002")
        for s in socks:
            assert recv_exact(s, len(expect)) == expect
        socks[0].sendall(w.encode_coll(w.IMPI_C_DATALEN, w.int4s(8000)))
        socks[2].sendall(w.encode_coll(w.IMPI_C_DATALEN, w.int4s(4000)))
        socks[1].sendall(w.encode_coll(w.IMPI_C_TAGUB, w.int4s(32767)))  # skips DATALEN
        expect = bytes.fromhex("434f4c4c00000010000013000000000500001f4000000fa0")
        for s in socks:
            assert recv_exact(s, len(expect)) == expect
        for s in socks:
            s.close()  # vanishing before FINI: the job fails
    assert result["code"] == 1


def test_spec_key_as_lam_sends_it() -> None:
    # a LAM client offers only IMPI_AUTH_KEY (0x2) and sends the 64-bit key in the clear
    with serving(1, auth="key") as (server, result):
        s = connect(server)
        s.sendall(w.encode_auth(0x2))
        assert recv_exact(s, 8) == bytes.fromhex("0000000100000000")
        s.sendall(impi_key_value(KEY))
        s.sendall(w.encode_impi(0))
        assert recv_exact(s, 12) == w.encode_impi(1)
        s.sendall(w.encode_done())
        assert recv_exact(s, 8) == w.encode_done()
        s.sendall(w.encode_fini())
        assert closed(s)
    assert result["code"] == 0


def test_hmac_challenge_preferred_and_wrong_key_closed() -> None:
    with serving(1, auth="key", timeout=TIMEOUT) as (server, result):
        bad = connect(server)
        bad.sendall(w.encode_auth(0x6))
        which, length = w._HDR.unpack(recv_exact(bad, 8))
        assert (which, length) == (2, 32)
        challenge = recv_exact(bad, 32)
        bad.sendall(hmac_proof(b"1234", challenge))
        assert closed(bad)
        good = connect(server)
        good.sendall(w.encode_auth(0x6))
        assert recv_exact(good, 8)[:4] == bytes.fromhex("00000002")
        good.sendall(hmac_proof(KEY, recv_exact(good, 32)))
        good.sendall(w.encode_impi(0))
        assert recv_exact(good, 12) == w.encode_impi(1)
        good.sendall(w.encode_done() + w.encode_fini())
        assert recv_exact(good, 8) == w.encode_done()
        good.close()
    assert result["code"] == 0


def test_no_common_method_closed() -> None:
    with serving(1, auth="hmac") as (server, result):
        s = connect(server)
        s.sendall(w.encode_auth(0x3))  # NONE and the clear key: this server offers neither
        assert closed(s)
        server.rendezvous.deadline = 0  # end the job now
    assert result["code"] == 1
    assert "rank(s) 0" in server.failure  # nobody joined: the reason still names them


def test_unknown_command_discarded_and_garbage_drops_only_that_client() -> None:
    with serving(1, auth="none") as (server, result):
        junk = connect(server)
        junk.sendall(b"\xff" * 8)  # length -1
        assert closed(junk)
        s = connect(server)
        auth_none(s)
        s.sendall(w.encode_cmd(0x58585858, b"xx"))  # 'XXXX': discarded (forward compatible)
        s.sendall(w.encode_impi(0))
        assert recv_exact(s, 12) == w.encode_impi(1)
        s.sendall(w.encode_done() + w.encode_fini())
        assert recv_exact(s, 8) == w.encode_done()
    assert result["code"] == 0


def test_timeout_fails_and_closes_the_clients() -> None:
    with serving(2, auth="none", timeout=0.5) as (server, result):
        s = connect(server)
        auth_none(s)
        s.sendall(w.encode_impi(0))
        assert closed(s)  # rank 1 never came
    assert result["code"] == 1
    assert "rank(s) 1" in server.failure


def test_invalid_arguments_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="clients"):
        ImpiServer(33, auth="none")
    with pytest.raises(ValueError, match="IMPI_AUTH_KEY"):
        ImpiServer(2, auth="key", key=b"")
    with pytest.raises(ValueError, match="decimal"):
        ImpiServer(2, auth="key", key=b"not-a-number")


@pytest.mark.cluster
def test_cli_server_and_conformance_tester() -> None:
    env = {**os.environ, "IMPI_AUTH_KEY": "5678"}
    zpar = [sys.executable, "-m", "zpar"]
    server = subprocess.Popen(
        [*zpar, "impi-server", "--clients", "2", "--auth", "key"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd="/tmp",
    )
    try:
        address = server.stdout.readline().strip()
        host, port = address.rsplit(":", 1)
        assert host == "127.0.0.1" and port.isdigit()
        tester = subprocess.run(
            [*zpar, "conformance", "impi", address, "--clients", "2"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            cwd="/tmp",
        )
        assert tester.returncode == 0, tester.stdout + tester.stderr
        assert "FAIL" not in tester.stdout and "checks passed" in tester.stdout
        assert server.wait(30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdout.close()
        server.stderr.close()


def lam_client(server: ImpiServer, rank: int, nprocs: int, out: dict) -> None:
    """What LAM/MPI 7.1.4's client.c writes, write() by write(): IMPI_Cmd, then the label,
    then the data, for every label of do_cmd_coll in its order; then DONE and FINI."""
    s = connect(server)
    try:
        s.sendall(w.encode_auth(0x2))  # only IMPI_AUTH_KEY in its mask
        assert recv_exact(s, 8) == bytes.fromhex("0000000100000000")
        s.sendall(impi_key_value(KEY))  # IMPI_Auth_key, swapped to network order
        s.sendall(w.CMD_IMPI.to_bytes(4, "big") + (4).to_bytes(4, "big"))  # IMPI_Cmd alone
        s.sendall(w.int4s(rank))  # then IMPI_Impi
        assert recv_exact(s, 12) == w.encode_impi(2)
        ip = bytes(12) + bytes([127, 0, 0, 1])  # IPv4 in the last 4 bytes of an IPv6 slot
        labels = [
            (w.IMPI_C_VERSION, w.int4s(0, 0)),
            (w.IMPI_C_NHOSTS, w.int4s(1)),
            (w.IMPI_C_NPROCS, w.int4s(nprocs)),
            (w.IMPI_C_DATALEN, w.int4s(8192)),
            (w.IMPI_C_TAGUB, w.int4s(32767)),
            (w.IMPI_C_COLL_XSIZE, w.int4s(-1)),
            (w.IMPI_C_COLL_MAXLINEAR, w.int4s(-1)),
            (w.IMPI_H_IPV6, ip),
            (w.IMPI_H_PORT, w.int4s(5000 + rank)),
            (w.IMPI_H_NPROCS, w.int4s(nprocs)),
            (w.IMPI_H_ACKMARK, w.int4s(10)),
            (w.IMPI_H_HIWATER, w.int4s(20)),
            (w.IMPI_P_IPV6, ip * nprocs),
            (w.IMPI_P_PID, b"".join((1000 * rank + p).to_bytes(8, "big") for p in range(nprocs))),
        ]
        got = {}
        for label, data in labels:
            s.sendall(w.CMD_COLL.to_bytes(4, "big") + (4 + len(data)).to_bytes(4, "big"))
            s.sendall(label.to_bytes(4, "big"))
            s.sendall(data)
            cmd, length = w._HDR.unpack(recv_exact(s, 8))
            assert cmd & 0xFFFFFFFF == w.CMD_COLL
            got[label] = w.decode_coll_reply(recv_exact(s, length))
        s.sendall(w.encode_done())
        assert recv_exact(s, 8) == w.encode_done()
        s.sendall(w.encode_fini())
        out[rank] = got
    except BaseException as e:
        out[rank] = e


def test_two_lam_clients_through_every_label() -> None:
    out: dict = {}
    with serving(2, auth="key") as (server, result):
        threads = [
            threading.Thread(target=lam_client, args=(server, r, n, out), daemon=True)
            for r, n in ((0, 2), (1, 3))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
    assert result["code"] == 0
    assert not isinstance(out[0], BaseException), out[0]
    assert out[0] == out[1]
    got = out[0]
    assert got[w.IMPI_C_NPROCS] == (w.IMPI_C_NPROCS, 0x3, w.int4s(2, 3))
    assert got[w.IMPI_H_PORT] == (w.IMPI_H_PORT, 0x3, w.int4s(5000, 5001))
    # per-proc labels: 2 + 3 procs, client 0's first
    label, mask, pids = got[w.IMPI_P_PID]
    assert (label, mask, len(pids)) == (w.IMPI_P_PID, 0x3, 8 * 5)
    assert [int.from_bytes(pids[i : i + 8], "big") for i in range(0, 40, 8)] == [
        0,
        1,
        1000,
        1001,
        1002,
    ]
