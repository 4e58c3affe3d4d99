"""The AMUSE gateway fed garbage and strangers (issue 26): a `zpar amuse-worker` given
random bytes or headers claiming more than they carry answers an error or ends cleanly
(exit 1, no traceback, no allocation of what a header claims); AmuseWorker's listening
port takes only its own worker's connection, not a stranger's who connected first."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

import numpy as np
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.typed.test_typed_gateway import WORKER, declare, worker_env
from zpar.typed import AmuseWorker, function_id_for
from zpar.typed.amuse import recv_amuse, send_amuse
from zpar.typed.codec import AmuseHeader, amuse_counts, pack_amuse_header

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


class Worker:
    """A `zpar amuse-worker` connected to a socket of this test."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        port = self.server.getsockname()[1]
        self.proc = subprocess.Popen(
            [str(WORKER), str(port), "127.0.0.1", "false"],
            env=worker_env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        self.server.settimeout(60)
        self.sock, _ = self.server.accept()
        self.sock.settimeout(60)

    def close(self):
        self.sock.close()
        self.server.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        return err


def _add_request(call_id=1):
    x, y = np.arange(3.0), np.ones(3)
    arrays = {"float64": np.concatenate([x, y])}
    return AmuseHeader(call_id, function_id_for("add"), 3, amuse_counts(arrays)), arrays


def _answers(w: Worker) -> bool:
    h, arrays = _add_request(77)
    send_amuse(w.sock, h, arrays)
    reply, out, _ = recv_amuse(w.sock)
    return reply.call_id == 77 and not reply.error and out["float64"].tolist() == [1, 2, 3]


@settings(max_examples=12, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.binary(min_size=1, max_size=300))
def test_random_bytes_are_answered_or_end_the_worker_cleanly(garbage):
    w = Worker()
    try:
        assert _answers(w)  # positive control
        w.sock.sendall(garbage)
        w.sock.shutdown(socket.SHUT_WR)
        w.proc.wait(60)  # it cannot be in step after garbage and a closed stream: it ends
    finally:
        err = w.close()
    assert w.proc.returncode == 1, err
    assert "Traceback" not in err and "MemoryError" not in err


@pytest.mark.parametrize(
    "counts",
    [(0, 0, 0, 2**31 - 1, 0, 0), (2**31 - 1, 0, 0, 0, 0, 0), (0, 0, 0, 0, 2**31 - 1, 0)],
    ids=["2**31 float64", "2**31 int32", "2**31 strings"],
)
def test_a_header_claiming_more_than_it_carries_allocates_nothing_of_it(counts):
    w = Worker()
    try:
        assert _answers(w)
        proc = psutil.Process(w.proc.pid)
        rss = peak = proc.memory_info().rss
        h = AmuseHeader(5, function_id_for("add"), 2**31 - 1, counts)
        w.sock.sendall(pack_amuse_header(h) + b"\x00" * 4096)
        w.sock.shutdown(socket.SHUT_WR)
        while w.proc.poll() is None:  # its peak while it reads what arrived, until it ends
            try:
                peak = max(peak, proc.memory_info().rss)
            except psutil.Error:
                break
        w.proc.wait(60)
        grown = peak - rss
    finally:
        err = w.close()
    assert grown < 50 * 2**20  # before: a 16 GB bytearray for 2**31 float64
    assert w.proc.returncode == 1 and "Traceback" not in err, err
    assert "closed the connection" in err


def test_zero_input_calls_past_the_bound_are_an_error_reply(tmp_path):
    script = tmp_path / "noinput.py"
    script.write_text(
        "import zpar\n@zpar.typed_function(returns='int32')\ndef seven():\n    return 7\n"
    )
    env = worker_env()
    env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
    env["ZPAR_TYPED_MODULES"] = "noinput"
    with AmuseWorker([str(WORKER)], env=env) as aw:
        aw.declare("seven", returns="int32")
        h = AmuseHeader(9, function_id_for("seven"), 2**31 - 1, (0,) * 6)
        send_amuse(aw.sock, h, {})
        reply, out, _ = recv_amuse(aw.sock)
        assert reply.error and "at most 1000000 calls" in out["string"][0]
        send_amuse(aw.sock, AmuseHeader(10, function_id_for("seven"), 4, (0,) * 6), {})
        reply, out, _ = recv_amuse(aw.sock)  # positive control: 4 calls
        assert not reply.error and out["int32"].tolist() == [7, 7, 7, 7]


def _listening_ports() -> set[int]:
    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def test_a_stranger_connecting_first_does_not_take_the_workers_place(tmp_path):
    slow = tmp_path / "slow_worker.sh"
    slow.write_text(f'#!/bin/sh\nsleep 1\nexec {WORKER} "$@"\n')
    slow.chmod(0o755)
    before = _listening_ports()
    strangers: list[socket.socket] = []

    def connect_first():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not strangers:
            for port in _listening_ports() - before:
                strangers.append(socket.create_connection(("127.0.0.1", port), timeout=30))
            time.sleep(0.01)

    t = threading.Thread(target=connect_first, daemon=True)
    t.start()
    try:
        with AmuseWorker([str(slow)], env=worker_env()) as w:
            t.join(30)
            assert strangers, "the stranger never found the port"
            declare(w)
            assert w.add(np.arange(3.0), 1.0)[1].tolist() == [1.0, 2.0, 3.0]
            strangers[0].settimeout(30)
            assert strangers[0].recv(1) == b""  # closed by the gateway
    finally:
        for s in strangers:
            s.close()
