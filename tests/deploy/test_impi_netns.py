"""The rendezvous's TCP side across hosts (issue 26): `zpar impi-server` in one network
namespace, its members in three others, a stranger flooding it from a fifth. A job
completes (the positive control); then a member SIGKILLed after it joined fails the job at
once for the others, named, and the server exits instead of waiting for it.

    192.0.2.1  srv   zpar impi-server --clients 3
    192.0.2.11 a     rank 0        192.0.2.12 b   rank 1        192.0.2.13 c   rank 2
    192.0.2.21 x     a stranger holding silent connections
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from netns import make_network  # noqa: I001

HERE = Path(__file__).parent
pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

STRANGER = (
    "import socket, sys, time\n"
    "socks = []\n"
    "for _ in range(100):\n"
    "    try:\n"
    "        socks.append(socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5))\n"
    "    except OSError:\n"
    "        pass\n"
    "print('holding', len(socks), flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.fixture
def network():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    net = make_network(f"zi{os.getpid() % 100000}")
    try:
        for name, octet in (("srv", 1), ("a", 11), ("b", 12), ("c", 13), ("x", 21)):
            net.add_host(name, octet)
        yield net
    finally:
        net.teardown()


def _server(network):
    p = subprocess.Popen(
        network.exec("srv", [sys.executable, "-m", "zpar", "impi-server", "--clients", "3",
                             "--auth", "none", "--ip", network.hosts["srv"],
                             "--max-strangers", "16", "--timeout", "120",
                             "--log-level", "INFO"]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    address = p.stdout.readline().strip()
    assert address, p.stderr.read()
    return p, address


def _member(network, host, address, rank, *extra):
    return subprocess.Popen(
        network.exec(host, [sys.executable, str(HERE / "impi_member.py"), address, str(rank),
                            *extra]),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finish(p, timeout=120):
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def test_a_job_across_namespaces_then_a_member_killed(network):
    # the positive control, with a stranger holding connections from another host
    server, address = _server(network)
    host, port = address.rsplit(":", 1)
    stranger = subprocess.Popen(
        network.exec("x", [sys.executable, "-c", STRANGER, host, port]),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert stranger.stdout.readline().startswith("holding")
        members = [_member(network, h, address, r) for r, h in enumerate(("a", "b", "c"))]
        results = [_finish(m) for m in members]
        assert [r[0] for r in results] == [0, 0, 0], results
        assert all("done" in r[1] for r in results)
        code, _, err = _finish(server)
        assert code == 0, err
        assert "evicted" in err  # the stranger's connections made room for the members
    finally:
        stranger.stdin.close()
        stranger.wait(30)
        stranger.stdout.close()

    # a member killed after it joined: the others are dropped at once, the job fails named
    server, address = _server(network)
    members = [
        _member(network, "a", address, 0),
        _member(network, "b", address, 1),
        _member(network, "c", address, 2, "hold"),  # still working when it is killed
    ]
    assert members[2].stdout.readline().strip() == "joined"
    os.kill(members[2].pid, signal.SIGKILL)  # ip netns exec runs it in place (exec)
    results = [_finish(m) for m in members[:2]]
    members[2].wait(30)
    for f in (members[2].stdin, members[2].stdout, members[2].stderr):
        f.close()
    code, _, err = _finish(server)
    assert code == 1
    assert "rank 2" in err and "vanished" in err, err
    assert [r[0] for r in results] == [1, 1], results  # waiting for DONE: dropped
    assert all(r[1].startswith("joined\nclosed") for r in results), results
    assert all("done" not in r[1] for r in results)
    assert "Traceback" not in err
