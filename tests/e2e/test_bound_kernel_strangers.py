"""Strangers on a bound kernel's ports (issue 26, item 2): ``zpar.bind_kernel()`` makes an
engine listen on five tcp ports for Jupyter frontends. A process without the key opens raw
tcp connections to all of them, half stopped in the middle of a ZMTP greeting, until the
engine is out of file descriptors (RLIMIT_NOFILE lowered for it). The engine stays up,
counts the refusals (``controller_status()["refused"]["engine N"]``), runs tasks, and once
the stranger goes a Jupyter client attaches (the positive control)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import zpar
from tests.clusters import wait_until

pytestmark = pytest.mark.cluster

TIMEOUT = 60.0
#: descriptors left to the engine above what it uses once its kernel is bound
SPARE = 48
#: seconds a connection has to finish its handshake (ZPAR_HANDSHAKE_TIMEOUT; 10 by default)
HANDSHAKE = 2.0
PORTS = ("shell_port", "control_port", "iopub_port", "stdin_port", "hb_port")


def test_descriptor_flood_on_a_bound_kernel_is_survived(tmp_path, monkeypatch):
    from jupyter_client import BlockingKernelClient

    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    monkeypatch.setenv("ZPAR_HANDSHAKE_TIMEOUT", str(HANDSHAKE))
    with zpar.Cluster(n=1, timeout=TIMEOUT, log_level="INFO") as rc:
        rc.wait_for_engines(1, timeout=TIMEOUT)
        e = rc[0]
        path = e.apply_sync(zpar.bind_kernel, connection_file=str(tmp_path / "k.json"))
        kc = BlockingKernelClient(connection_file=path)
        kc.load_connection_file()
        ports = [getattr(kc, p) for p in PORTS]
        engine = psutil.Process(e.apply_sync(os.getpid))
        ready = time.monotonic()
        wait_until(lambda: time.monotonic() - ready > HANDSHAKE, "the engine's age", TIMEOUT)
        limit = engine.num_fds() + SPARE
        engine.rlimit(resource.RLIMIT_NOFILE, (limit, engine.rlimit(resource.RLIMIT_NOFILE)[1]))

        def refused(reason: str) -> int:
            counts = rc.controller_status()["refused"].get(f"engine {rc.ids[0]}", {})
            return counts.get(f"connections-{reason}", 0)

        stranger = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("stranger.py")),
                "127.0.0.1",
                str(limit + 200),
                *map(str, ports),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert int(stranger.stdout.readline()) > SPARE
            wait_until(lambda: refused("descriptors"), "the engine's descriptor refusals", TIMEOUT)
            assert e.apply_sync(lambda: "during") == "during"
        finally:
            stranger.stdin.close()
            stranger.wait(TIMEOUT)
            stranger.stdout.close()
        assert engine.is_running()
        # the positive control: a frontend attaches and runs code in the engine
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=TIMEOUT)
            reply = kc.execute_interactive("21 * 2", timeout=TIMEOUT, output_hook=lambda m: None)
            assert reply["content"]["status"] == "ok"
        finally:
            kc.stop_channels()
        assert e.apply_sync(lambda: "after") == "after"
        wait_until(lambda: refused("handshake"), "the engine's handshake refusals", TIMEOUT)
