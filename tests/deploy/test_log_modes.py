"""The launcher's own log and every log it writes are 0600, as docs/security.md promises,
whatever the user's umask (issue 26): `zpar cluster start --daemon` wrote its launcher log
0644 under umask 022."""

from __future__ import annotations

import os
import stat

import pytest

from tests.deploy.test_lifecycle import cluster_processes, run

pytestmark = pytest.mark.cluster


def test_daemon_launcher_and_process_logs_are_private(zpar_dir):
    old = os.umask(0o022)
    try:
        started = run(["cluster", "start", "-n", "1", "--daemon"])
        added = run(["cluster", "engines", "-n", "1", "--daemon"])
    finally:
        os.umask(old)
    try:
        assert started.returncode == 0, started.stderr
        assert added.returncode == 0, added.stderr
        logs = sorted((zpar_dir / "profile_default" / "log").glob("*.log*"))
        names = [p.name for p in logs]
        assert any(n.endswith("-launcher.log") for n in names), names
        assert any(n.endswith("-engines-launcher.log") for n in names), names
        assert any(n.endswith("-controller.log") for n in names), names  # positive control
        modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in logs}
        assert all(m == "0o600" for m in modes.values()), modes
    finally:
        run(["cluster", "stop"])
        procs = cluster_processes(zpar_dir)
        for p in procs:  # only if stop failed: never leave daemons behind
            p.kill()
        assert not procs
