"""A tcpdump capture of some loopback ports, for the tests that check what Curve hides.

Needs root; tcpdump is installed by scripts/install_capture_tools.sh when missing.
``settle()`` waits, without a timed grace, until the file holds every packet sent so far:
it sends an end mark through a loopback connection of its own (its port is in the filter)
and waits for the mark in the file. tcpdump ``-U`` writes packets in the order the kernel
handed them over, and on loopback a packet is handed over as it is sent, before its
receiver reads it: what a test sent and saw answered before the mark is in the file by then.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.clusters import wait_until

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


class LoopbackCapture:
    """tcpdump on ``lo`` for ``ports`` (and its end-mark port), writing ``path``;
    listening when the constructor returns."""

    def __init__(self, ports: list[int], path: Path) -> None:
        if os.geteuid() != 0:
            pytest.skip("a loopback capture needs root (tcpdump), and this test runs as a user")
        _install_tcpdump()
        self.path = path
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._mark_port = self._listener.getsockname()[1]
        flt = " or ".join(f"tcp port {p}" for p in [*ports, self._mark_port])
        self.proc = subprocess.Popen(
            ["tcpdump", "-i", "lo", "--immediate-mode", "-U", "-s", "0", "-w", str(path), flt],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
        )
        line = self.proc.stderr.readline()  # "listening on lo, ..." once the filter is set
        if b"listening" not in line:
            self.stop()
            raise AssertionError(f"tcpdump did not start: {line!r}")

    def settle(self, timeout: float = 30.0) -> None:
        """Return once the file holds every packet sent before this call (module doc)."""
        mark = b"ZPAR-CAPTURE-END-" + secrets.token_hex(8).encode()
        with socket.create_connection(("127.0.0.1", self._mark_port), timeout=timeout) as c:
            peer, _ = self._listener.accept()
            with peer:
                c.sendall(mark)
                peer.settimeout(timeout)
                peer.recv(len(mark))  # crossed loopback: tcpdump was handed it
        wait_until(
            lambda: self.path.exists() and mark in self.path.read_bytes(),
            "the capture's end mark in its file",
            timeout=timeout,
        )

    def read(self) -> bytes:
        return self.path.read_bytes()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        self.proc.wait(10)
        self.proc.stderr.close()
        self._listener.close()


def _install_tcpdump() -> None:
    if shutil.which("tcpdump") is not None:
        return
    done = subprocess.run(
        ["sh", str(SCRIPTS / "install_capture_tools.sh")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 or shutil.which("tcpdump") is None:
        pytest.fail(f"could not install tcpdump: {done.stderr.strip()[-500:]}")
