"""Strangers on a communicator's peer-link port (issue 26, item 2): each rank's accepting
socket listens on tcp for ranks on other hosts, so anyone who reaches the host can connect.
A process without the key opens raw tcp connections to every engine's peer-link port, half
of them stopped in the middle of a ZMTP greeting, until the engines are out of file
descriptors (RLIMIT_NOFILE lowered for them). The engines stay up, count the refusals
(reported to the hub: ``controller_status()["refused"]["engine N"]``), and the
communicator's collectives work during and after the flood, as does a new communicator
(the positive control)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import zpar
from tests.clusters import FAST_HB, shipped_by_value, wait_until

pytestmark = pytest.mark.cluster

TIMEOUT = 60.0
#: descriptors left to each engine above what it uses once its communicator is open
SPARE = 48
#: seconds a connection has to finish its handshake (ZPAR_HANDSHAKE_TIMEOUT; 10 by default)
HANDSHAKE = 2.0
STRANGER = Path(__file__).parents[1] / "e2e" / "stranger.py"


@pytest.fixture(scope="module", autouse=True)
def _ship_by_value():
    yield from shipped_by_value(sys.modules[__name__])


def _link_port() -> int:
    from zpar.namespace import current

    return int(current()["comm"]._links.endpoints["tcp"].rsplit(":", 1)[1])


def _allreduce_rank():
    from zpar.namespace import current

    c = current()["comm"]
    return c.allreduce(c.rank + 1)


def _engine_counts(rc, reason: str) -> list[int]:
    refused = rc.controller_status()["refused"]
    return [refused.get(f"engine {eid}", {}).get(f"connections-{reason}", 0) for eid in rc.ids]


def _stranger(ports: list[int], total: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(STRANGER), "127.0.0.1", str(total), *map(str, ports)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _release(stranger: subprocess.Popen) -> None:
    stranger.stdin.close()
    stranger.wait(TIMEOUT)
    stranger.stdout.close()


def test_descriptor_flood_on_the_peer_links_is_survived(tmp_path, monkeypatch):
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    monkeypatch.setenv("ZPAR_HANDSHAKE_TIMEOUT", str(HANDSHAKE))
    with zpar.Cluster(n=2, timeout=TIMEOUT, log_level="INFO") as rc:
        rc.wait_for_engines(2, timeout=TIMEOUT)
        dv = rc[:]
        assert dv.communicator(timeout=TIMEOUT).size == 2
        ports = dv.apply_sync(_link_port)
        engines = [psutil.Process(pid) for pid in dv.apply_sync(__import__("os").getpid)]
        # the dance's links are older than the handshake deadline when the flood comes:
        # out of descriptors, only younger connections (strangers mid-handshake) are shed
        ready = time.monotonic()
        wait_until(lambda: time.monotonic() - ready > HANDSHAKE, "the links' age", TIMEOUT)
        limits = []
        for proc in engines:
            limits.append(proc.num_fds() + SPARE)
            _, hard = proc.rlimit(resource.RLIMIT_NOFILE)
            proc.rlimit(resource.RLIMIT_NOFILE, (limits[-1], hard))
        stranger = _stranger(ports, sum(limits) + 200)
        try:
            held = int(stranger.stdout.readline())
            assert held > SPARE * len(engines), held
            wait_until(
                lambda: all(_engine_counts(rc, "descriptors")),
                "each engine's descriptor refusals in the controller's status",
                TIMEOUT,
            )
            assert dv.apply_sync(_allreduce_rank) == [3, 3]  # during the flood
        finally:
            _release(stranger)
        assert all(p.is_running() for p in engines)
        # the positive control: the communicator works, and a new one opens
        assert dv.apply_sync(_allreduce_rank) == [3, 3]
        assert dv.communicator(name="comm", timeout=TIMEOUT).size == 2
        assert dv.apply_sync(_allreduce_rank) == [3, 3]
        wait_until(
            lambda: all(_engine_counts(rc, "handshake")),
            "each engine's handshake refusals (the silent strangers) in the status",
            TIMEOUT,
        )


def test_connections_past_the_per_address_limit_on_the_peer_links(tmp_path, monkeypatch):
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    # the controller takes the limit too: room for the client's, the launcher's, the
    # engines' and their rendezvous members' connections to its registration port
    monkeypatch.setenv("ZPAR_MAX_CONNECTIONS_PER_ADDRESS", "16")
    with zpar.Cluster(n=2, controller_args=FAST_HB, timeout=TIMEOUT, log_level="INFO") as rc:
        rc.wait_for_engines(2, timeout=TIMEOUT)
        dv = rc[:]
        assert dv.communicator(timeout=TIMEOUT).size == 2
        ports = dv.apply_sync(_link_port)
        stranger = _stranger(ports, 72)
        try:
            assert int(stranger.stdout.readline()) == 72
            # the ranks of one host link over ipc: no tcp peer of theirs is counted, so
            # 20 of each engine's 36 are closed
            wait_until(
                lambda: all(n >= 20 for n in _engine_counts(rc, "per-address")),
                "connections past the limit closed on each engine",
                TIMEOUT,
            )
            assert dv.apply_sync(_allreduce_rank) == [3, 3]
        finally:
            _release(stranger)
        assert dv.communicator(timeout=TIMEOUT).size == 2
        assert dv.apply_sync(_allreduce_rank) == [3, 3]


def test_a_strangers_packets_on_the_peer_links_are_dropped(tmp_path, monkeypatch):
    """Anyone who finishes the (NULL) handshake can send: a packet from an identity that
    is no higher rank is dropped and counted, not a reason to break the communicator."""
    import zmq

    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    with zpar.Cluster(n=2, controller_args=FAST_HB, timeout=TIMEOUT, log_level="INFO") as rc:
        rc.wait_for_engines(2, timeout=TIMEOUT)
        dv = rc[:]
        assert dv.communicator(timeout=TIMEOUT).size == 2
        ports = dv.apply_sync(_link_port)
        ctx = zmq.Context()
        socks = []
        try:
            for port in ports:
                for ident in (None, b"x", b"r0", b"r99", b"r"):
                    s = ctx.socket(zmq.DEALER)
                    s.setsockopt(zmq.LINGER, 0)
                    if ident is not None:
                        s.setsockopt(zmq.ROUTING_ID, ident)
                    s.connect(f"tcp://127.0.0.1:{port}")
                    s.send_multipart([b"\0" * 64, b"garbage"])
                    s.send(b"")  # a wake-up's shape
                    socks.append(s)
            # the ranks read the strangers' packets while they reduce
            wait_until(
                lambda: (
                    dv.apply_sync(_allreduce_rank) == [3, 3]
                    and all(n >= 10 for n in _engine_counts(rc, "stranger-packet"))
                ),
                "the strangers' packets dropped and counted on each engine",
                TIMEOUT,
            )
        finally:
            for s in socks:
                s.close()
            ctx.term()
        assert dv.apply_sync(_allreduce_rank) == [3, 3]
