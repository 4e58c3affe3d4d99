"""A real multi-host cluster in network namespaces (issue 18, item 7):

    192.0.2.1  ctl   controller + its launcher (zpar cluster start --engines ssh)
    192.0.2.11 e1    sshd; 2 engines started over ssh
    192.0.2.12 e2    sshd; 2 engines started over ssh
    192.0.2.21 cli   the client
    all four joined by br0, a bridge in a fifth namespace; nothing routes anywhere else.

The client runs a job across both engine hosts, then unplugs e2 mid-job: the hub must
unregister e2's engines within the heartbeat budget and the job must finish on e1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from netns import make_network  # noqa: I001
from sshd import ensure_openssh, make_keys, start_sshd

HERE = Path(__file__).parent
HB_PERIOD, HB_MISSES = 0.5, 4  # the default budget: 2 s (the issue asks <= 3 s)


@pytest.fixture
def network():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    net = make_network(f"zp{os.getpid() % 100000}")
    try:
        for name, octet in (("ctl", 1), ("e1", 11), ("e2", 12), ("cli", 21)):
            net.add_host(name, octet)
        yield net
    finally:
        net.teardown()


def netns_of(pid: int) -> str:
    r = subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True, text=True)
    return r.stdout.strip()


@pytest.mark.timeout(300)
def test_engines_on_two_hosts_and_one_unplugged(network, tmp_path, zpar_dir):
    ensure_openssh()
    keys = tmp_path / "keys"
    make_keys(keys)
    servers = [start_sshd(keys, network.hosts[h], 2222, netns=network.ns(h)) for h in ("e1", "e2")]
    env = dict(os.environ, ZPAR_DIR=str(zpar_dir))
    zpar = [sys.executable, "-m", "zpar"]
    try:
        subprocess.run([*zpar, "profile", "create", "mh"], env=env, check=True, timeout=60)
        (zpar_dir / "profile_mh" / "config.toml").write_text(
            f"[controller]\nip = '{network.hosts['ctl']}'\nhb_period = {HB_PERIOD}\n"
            f"hb_misses = {HB_MISSES}\n"
            f"[engines]\nengines = 'ssh'\nn = 4\ntimeout = 120\n"
            f"[ssh]\nhosts = {{'{network.hosts['e1']}:2222' = 2, '{network.hosts['e2']}:2222' = 2}}\n"
            f"args = {json.dumps(servers[0].client_args)}\npython = '{sys.executable}'\n"
            f"remote_dir = '{tmp_path / 'remote'}'\n"
        )  # fmt: skip
        start = subprocess.run(
            network.exec("ctl", [*zpar, "cluster", "start", "--profile", "mh", "--daemon"]),
            env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert start.returncode == 0, start.stderr
        url = zpar_dir / "profile_mh" / "security" / "zpar-client.json"
        client = subprocess.run(
            network.exec("cli", [sys.executable, str(HERE / "multihost_client.py"), str(url),
                                 network.bridge_ns, "p-e2", str(HB_PERIOD * HB_MISSES)]),
            env=dict(env, PYTHONPATH=str(HERE)), capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert client.returncode == 0, client.stderr[-3000:]
        facts = json.loads(client.stdout.strip().splitlines()[-1])
        where = [netns_of(p) for p in facts["pids"]]
        assert sorted(where) == sorted([network.ns("e1")] * 2 + [network.ns("e2")] * 2)
        assert facts["first"] == list(range(1, 17))
        assert len(facts["gone"]) == 2
        # unregistered within the heartbeat budget (+ one period of phase, + scheduling slack
        # on a loaded machine), printed for the record
        print(f"e2 unplugged -> its engines unregistered in {facts['unregistered_after']:.2f} s")
        assert facts["unregistered_after"] < HB_PERIOD * (HB_MISSES + 1) + 2.0
        assert facts["results"] == [x * x for x in range(40)]
        assert {netns_of(p) for p in facts["left"]} == {network.ns("e1")}
    finally:
        subprocess.run(
            network.exec("ctl", [*zpar, "cluster", "stop", "--profile", "mh"]),
            env=env, capture_output=True, timeout=120,
        )  # fmt: skip
        for s in servers:
            s.stop()


@pytest.mark.timeout(300)
def test_ssh_tunnel_reaches_a_controller_on_loopback(network, tmp_path, zpar_dir):
    """The controller listens on ctl's 127.0.0.1 only: e1 cannot reach it, except through
    the ssh -R tunnels the launcher opens."""
    ensure_openssh()
    keys = tmp_path / "keys"
    make_keys(keys)
    server = start_sshd(keys, network.hosts["e1"], 2222, netns=network.ns("e1"))
    env = dict(os.environ, ZPAR_DIR=str(zpar_dir))
    script = (
        "import os, sys, zpar\n"
        f"c = zpar.Cluster(n=2, cluster_id='tun', engines='ssh', ssh_tunnel=True, ip='127.0.0.1',"
        f" ssh_hosts={{'{network.hosts['e1']}:2222': 2}}, ssh_args={server.client_args!r},"
        f" ssh_python={sys.executable!r}, ssh_remote_dir={str(tmp_path / 'remote')!r},"
        " timeout=120)\n"
        "with c as rc:\n"
        "    pids = rc[:].apply_sync(os.getpid)\n"
        "    reg = zpar.cluster.connection.read_connection_file(c.url_file).registration\n"
        "    where = [os.popen(f'ip netns identify {p}').read().strip() for p in pids]\n"
        "    print(reg, *where)\n"
    )
    try:
        r = subprocess.run(network.exec("ctl", [sys.executable, "-c", script]), env=env,
                           capture_output=True, text=True, timeout=240)  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        reg, *where = r.stdout.split()
        assert reg.startswith("tcp://127.0.0.1:")  # not reachable from e1 but by the tunnel
        assert where == [network.ns("e1")] * 2
    finally:
        server.stop()
