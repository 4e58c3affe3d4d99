"""The SSH launcher against a real sshd on 127.0.0.1 (throwaway keys, started by conftest)."""

from __future__ import annotations

import os
import stat
import sys

import psutil

import zpar
from zpar.cluster.launchers.ssh import parse_host, split_over_hosts, stop_script


def test_host_specs_and_placement():
    assert parse_host("node1") == ("", "node1", "")
    assert parse_host("me@node2:2222", "other") == ("me", "node2", "2222")
    assert parse_host("node3", "default-user") == ("default-user", "node3", "")
    assert split_over_hosts(3, {"a": 2, "b": 4}) == [("a", 2), ("b", 1)]
    import pytest

    from zpar.cluster.launchers import LaunchError

    with pytest.raises(LaunchError, match="offer 6 engines, 7 asked"):
        split_over_hosts(7, {"a": 2, "b": 4})
    with pytest.raises(LaunchError, match="user@host:port"):
        parse_host("node:abc")
    assert "grep -qa zpar.engine /proc/$p/cmdline" in stop_script([12, 13], "d", 1)


def test_ssh_engines_run_jobs_and_stop(sshd, tmp_path):
    remote = tmp_path / "remote"
    c = zpar.Cluster(
        n=3,
        engines="ssh",
        ssh_hosts={sshd.spec: 3},
        ssh_args=sshd.client_args,
        ssh_python=sys.executable,
        ssh_remote_dir=str(remote),
        timeout=90,
    )
    with c as rc:
        pids = rc[:].apply_sync(os.getpid)
        assert len(set(pids)) == 3
        for pid in pids:  # started by sshd, not by us
            assert psutil.Process(pid).ppid() != os.getpid()
        d = remote / c.cluster_id
        f = d / "zpar-engine.json"
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
        assert zpar.cluster.connection.read_connection_file(f).key  # the key went over, kept 0600
        assert sorted(rc.load_balanced_view().map_sync(lambda x: x * 2, range(6))) == [
            0, 2, 4, 6, 8, 10,
        ]  # fmt: skip
    gone = psutil.wait_procs([psutil.Process(p) for p in pids if psutil.pid_exists(p)], 20)[1]
    assert not gone
    assert not (remote / c.cluster_id).exists()


def test_ssh_unreachable_host_is_one_clear_error(tmp_path):
    import pytest
    from sshd import free_port

    c = zpar.Cluster(
        n=1,
        engines="ssh",
        ssh_hosts={f"127.0.0.1:{free_port()}": 1},
        ssh_args=["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"],
        ssh_remote_dir=str(tmp_path / "r"),
        timeout=30,
    )
    with pytest.raises(
        zpar.cluster.launcher.LaunchError, match=r"ssh 127\.0\.0\.1:\d+: starting 1"
    ):
        c.start()
