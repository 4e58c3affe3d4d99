"""`zpar impi-server` against strangers who only connect (issue 26): connections past its
limit, and past RLIMIT_NOFILE set low for the server's process. It refuses, logs and goes
on, and a real client then completes the job (the positive control)."""

from __future__ import annotations

import resource
import socket
import subprocess
import sys

import pytest

from tests.comm.test_impi_fuzz import _recv
from zpar.comm import impi_wire as w

pytestmark = pytest.mark.cluster  # starts a server process

TIMEOUT = 60.0


def _start(
    *args: str, nofile: int | None = None, clients: str = "1"
) -> tuple[subprocess.Popen, str, int]:
    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "zpar",
            "impi-server",
            "--clients",
            clients,
            "--auth",
            "none",
            "--log-level",
            "INFO",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit,
    )
    line = p.stdout.readline().strip()
    assert line, p.stderr.read()
    host, port = line.rsplit(":", 1)
    return p, host, int(port)


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
        p.wait()
    p.stdout.close()
    p.stderr.close()


def _real_client(host: str, port: int) -> None:
    with socket.create_connection((host, port), timeout=TIMEOUT) as s:
        s.sendall(w.encode_auth(0x1))
        assert _recv(s, 8) == bytes(8)
        s.sendall(w.encode_impi(0))
        assert _recv(s, 12) == w.encode_impi(1)
        s.sendall(w.encode_done() + w.encode_fini())
        assert _recv(s, 8) == w.encode_done()


def _flood(host: str, port: int, n: int) -> list[socket.socket]:
    """n connections that never say anything (each accepted or refused by the server)."""
    out = []
    for _ in range(n):
        try:
            out.append(socket.create_connection((host, port), timeout=TIMEOUT))
        except OSError:
            break  # the backlog is full: the server is not accepting (the bug)
    return out


@pytest.mark.parametrize(
    ("args", "nofile", "reason"),
    [
        (["--max-strangers", "8"], None, "evicted"),
        ([], 40, "out of file descriptors"),
    ],
    ids=["past the connection limit", "past RLIMIT_NOFILE"],
)
def test_strangers_holding_connections_do_not_stop_the_job(args, nofile, reason):
    p, host, port = _start(*args, nofile=nofile)
    strangers = []
    try:
        strangers = _flood(host, port, 200)
        _real_client(host, port)
        code = p.wait(TIMEOUT)
        err = p.stderr.read()
        assert code == 0, err
        assert reason in err
        assert "Traceback" not in err
    finally:
        for s in strangers:
            s.close()
        _stop(p)


def test_a_silent_stranger_is_closed_at_the_auth_deadline():
    p, host, port = _start("--auth-timeout", "0.5")
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT) as s:
            assert s.recv(1) == b""  # closed by the server, not by us
        _real_client(host, port)
        assert p.wait(TIMEOUT) == 0
        err = p.stderr.read()
        assert "auth-timeout" in err and "did not authenticate within 0.5 s" in err
    finally:
        _stop(p)


def test_a_member_that_authenticated_waits_past_the_deadline_for_the_others():
    p, host, port = _start("--auth-timeout", "0.5", clients="2")
    try:
        with socket.create_connection((host, port), timeout=TIMEOUT) as first:
            first.sendall(w.encode_auth(0x1))
            assert _recv(first, 8) == bytes(8)
            first.sendall(w.encode_impi(0))
            # a silent stranger connected after it is closed at the deadline: it has passed
            with socket.create_connection((host, port), timeout=TIMEOUT) as stranger:
                assert stranger.recv(1) == b""
            with socket.create_connection((host, port), timeout=TIMEOUT) as second:
                second.sendall(w.encode_auth(0x1))
                assert _recv(second, 8) == bytes(8)
                second.sendall(w.encode_impi(1))
                for s in (first, second):
                    assert _recv(s, 12) == w.encode_impi(2)
                    s.sendall(w.encode_done())
                for s in (first, second):
                    assert _recv(s, 8) == w.encode_done()
                    s.sendall(w.encode_fini())
        assert p.wait(TIMEOUT) == 0, p.stderr.read()
    finally:
        _stop(p)
