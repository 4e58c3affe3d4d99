"""Files and keys private: modes under the profile, wrong keys reported as wrong keys,
and --insecure refused beyond loopback."""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys

import pytest

import zpar
from tests.e2e.conftest import FAST_HB
from zpar.cluster.connection import read_connection_file, write_connection_file
from zpar.wire.curve import CurveKeys


def _modes(root):
    """(path, mode) of everything under root, root included."""
    out = [(root, stat.S_IMODE(os.stat(root).st_mode))]
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            out.append((p, stat.S_IMODE(os.lstat(p).st_mode)))
    return out


def test_store_logs_and_state_are_the_owners_only(monkeypatch, tmp_path):
    root = tmp_path / "zpar"
    monkeypatch.setenv("ZPAR_DIR", str(root))
    c = zpar.Cluster(n=1, controller_args=FAST_HB, timeout=60, log_level="INFO")
    rc = c.start()
    try:
        assert rc.load_balanced_view().apply_sync(lambda: print("out") or 5) == 5
        c.launcher.save_state()  # the pid file of `zpar cluster start --daemon`
        rc.db_query({"msg_id": {"$ne": ""}})  # the store exists and holds the task
        modes = _modes(root)
        names = {os.path.basename(p) for p, _ in modes}
        assert any(n.endswith(".db") for n in names), names  # the task store is here
        assert any(n.endswith(".log") for n in names), names
        open_to_others = [(p, oct(m)) for p, m in modes if m & 0o077]
        assert open_to_others == []
    finally:
        c.stop()


def test_a_wrong_key_is_reported_as_a_wrong_key(monkeypatch, tmp_path):
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    c = zpar.Cluster(n=1, controller_args=FAST_HB, timeout=60)
    rc = c.start()
    try:
        info = read_connection_file(rc.url_file)
        bad = write_connection_file(tmp_path / "old.json", dataclasses.replace(info, key="0" * 64))
        with pytest.raises(zpar.WrongKey, match="old.json"):
            zpar.Client(url_file=bad, timeout=30)
        # an engine with that file is told the same
        import zmq

        from zpar.engine.registration import register
        from zpar.wire import Session

        ctx = zmq.Context()
        try:
            with pytest.raises(zpar.WrongKey, match="engine's signature"):
                register(ctx, Session("0" * 64), info.registration, "stranger", timeout=30)
        finally:
            ctx.term()
        assert rc[:].apply_sync(lambda: 1) == [1]
    finally:
        c.stop()


def test_wrong_curve_keys_are_reported_as_wrong_keys(monkeypatch, tmp_path):
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    c = zpar.Cluster(n=1, curve=True, controller_args=FAST_HB, timeout=60)
    rc = c.start()
    try:
        info = read_connection_file(rc.url_file)
        stranger = CurveKeys.generate()
        for name, forged in {
            "stranger": dataclasses.replace(
                info,
                curve_public_key=stranger.client_public,
                curve_secret_key=stranger.client_secret,
            ),
            "plain": dataclasses.replace(info, curve_server_key=""),
        }.items():
            path = write_connection_file(tmp_path / f"{name}.json", forged)
            with pytest.raises(zpar.WrongKey, match=f"{name}.json"):
                zpar.Client(url_file=path, timeout=30)
        assert rc[:].apply_sync(lambda: 1) == [1]
    finally:
        c.stop()


def test_insecure_beyond_loopback_is_refused_unless_forced(tmp_path):
    env = {**os.environ, "ZPAR_DIR": str(tmp_path / "zpar")}
    p = subprocess.run(
        [sys.executable, "-m", "zpar.hub", "--ip", "0.0.0.0", "--insecure"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert p.returncode == 2
    assert "--insecure" in p.stderr and "--force" in p.stderr
