"""Fixed controller ports (setting port) and a fixed cluster key (setting key): the
controller binds exactly the ports asked for, a port in use is one clear error, a client
connects with a pre-distributed key, and the key is never printed."""

from __future__ import annotations

import json
import os
import random
import socket
import stat
import subprocess
import sys
from urllib.parse import urlsplit

import psutil
import pytest

from zpar.cluster import settings as S
from zpar.cluster.connection import wait_for_connection_file
from zpar.hub.schedproc import PORT_ORDER, check_ports_free
from zpar.wire.messages import MsgType

KEY = "0123456789abcdef" * 4


def free_port_run() -> int:
    """A first port whose len(PORT_ORDER) consecutive ports are free right now."""
    for _ in range(50):
        first = random.randrange(20000, 60000)
        try:
            check_ports_free("127.0.0.1", first)
        except OSError:
            continue
        return first
    raise RuntimeError("no free run of ports")


def tcp_ports(value, out: set[int]) -> set[int]:
    """Every tcp port in a (nested) dict of addresses."""
    if isinstance(value, str) and value.startswith("tcp://"):
        out.add(int(value.rsplit(":", 1)[1]))
    elif isinstance(value, dict):
        for v in value.values():
            tcp_ports(v, out)
    elif isinstance(value, list):
        for v in value:
            tcp_ports(v, out)
    return out


def listening(pid: int) -> set[int]:
    """tcp ports the controller and its task scheduler listen on."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return {
        conn.laddr.port
        for p in procs
        for conn in p.net_connections(kind="tcp")
        if conn.status == psutil.CONN_LISTEN
    }


def start_controller(zpar_dir, *args, env=None):
    url_dir = zpar_dir / "urls"
    proc = subprocess.Popen(
        [sys.executable, "-m", "zpar.hub", "--url-file-dir", str(url_dir), "--log-level",
         "WARNING", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env or dict(os.environ),
    )  # fmt: skip
    return proc, url_dir


def stop(proc):
    proc.terminate()
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()


def test_port_setting_checks_range():
    assert S.load("default", {"port": "10100"}, {}).port == 10100
    with pytest.raises(ValueError, match="setting port = 80 in flag --port: expected 0"):
        S.load("default", {"port": "80"}, {})
    with pytest.raises(ValueError, match="setting port = 65530 in environment variable"):
        S.load("default", {}, {"ZPAR_PORT": "65530"})


def test_fixed_ports_and_key_in_connection_files_and_a_client_connects(zpar_dir):
    first = free_port_run()
    env = dict(os.environ, ZPAR_KEY=KEY)  # the key from the environment, the port a flag
    proc, url_dir = start_controller(zpar_dir, "--port", str(first), env=env)
    try:
        client_file = url_dir / "zpar-client.json"
        info = wait_for_connection_file(client_file, timeout=60)
        assert info.key == KEY
        engine = json.loads((url_dir / "zpar-engine.json").read_text())
        assert engine["key"] == KEY
        for f in (client_file, url_dir / "zpar-engine.json"):
            assert stat.S_IMODE(f.stat().st_mode) == 0o600
        assert info.registration == f"tcp://127.0.0.1:{first}"
        # the fixed range, and the dashboard's own port on loopback (no firewall hole needed)
        dashboard = {urlsplit(info.dashboard).port} if info.dashboard else set()
        assert info.dashboard.startswith("http://127.0.0.1:")
        assert listening(proc.pid) == set(range(first, first + len(PORT_ORDER))) | dashboard
        from zpar import Client

        with Client(str(client_file), timeout=30) as c:  # signs with the fixed key
            reply = c.sender.query(MsgType.CONNECTION_REQUEST, {}, 30)
            client_side = tcp_ports(reply.content, set()) - tcp_ports(reply.content["local"], set())
            order = {first + i: name for i, name in enumerate(PORT_ORDER)}
            assert {order[p] for p in client_side} == {
                "mux client", "control client", "iopub client", "task client", "notification"
            }  # fmt: skip
            assert c.ids == []
    finally:
        stop(proc)
    assert proc.returncode is not None


def test_a_port_in_use_is_one_line_naming_port_and_setting(zpar_dir):
    first = free_port_run()
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", first + 5))
    holder.listen()
    try:
        proc, url_dir = start_controller(zpar_dir, "--port", str(first))
        _, err = proc.communicate(timeout=60)
    finally:
        holder.close()
    assert proc.returncode == 1
    last = first + len(PORT_ORDER) - 1
    assert err.strip() == (
        f"zpar controller: tcp port {first + 5} (mux engine) is in use (Address already in "
        f"use); setting port = {first} takes ports {first}-{last}: free them or choose "
        "another port"
    )
    assert not (url_dir / "zpar-client.json").exists()


def test_key_with_insecure_and_a_short_key_are_refused(zpar_dir):
    proc, _ = start_controller(zpar_dir, "--insecure", env=dict(os.environ, ZPAR_KEY=KEY))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "exclude each other" in err and KEY not in err
    proc, _ = start_controller(zpar_dir, "--key", "tooshort")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "at least 16 characters" in err and "tooshort" not in err


def test_key_is_masked_in_config_show_and_repr(zpar_dir):
    d = S.create_profile("sec")
    (d / "config.toml").write_text(f"[controller]\nkey = '{KEY}'\nport = 10100\n")
    r = subprocess.run(
        [sys.executable, "-m", "zpar", "config", "show", "--profile", "sec"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert KEY not in r.stdout
    rows = {line.split("=")[0].strip(): line for line in r.stdout.splitlines()[1:]}
    assert '"********"' in rows["key"] and "# profile" in rows["key"]
    assert "= 10100 " in rows["port"]
    s = S.load("sec", {}, {})
    assert s.key == KEY and KEY not in repr(s)


def test_cluster_passes_port_as_flag_and_key_in_the_environment(zpar_dir):
    import zpar

    c = zpar.Cluster(n=0, profile="default", timeout=60, port=10100, key=KEY)
    cmd = c.launcher.controller_command()
    assert cmd[cmd.index("--port") + 1] == "10100"
    assert KEY not in " ".join(cmd)  # a command line is every user's to read


def test_cluster_with_fixed_port_and_key_runs_a_task(zpar_dir):
    import zpar

    first = free_port_run()
    cluster = zpar.Cluster(n=1, port=first, key=KEY, timeout=90)
    with cluster as rc:
        info = wait_for_connection_file(cluster.url_file, timeout=30)
        assert (info.key, info.registration) == (KEY, f"tcp://127.0.0.1:{first}")
        assert rc[:].apply_sync(lambda: 6 * 7) == [42]
