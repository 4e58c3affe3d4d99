"""The controller's status on a --curve cluster (issue 13 items 2 and 6): real processes on
127.0.0.1 over tcp with Curve; ``rc.controller_status()`` and ``zpar cluster status [--json]``
both answer, and a stranger's refused handshake shows in them under ``curve``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

import zpar
from tests.e2e.conftest import FAST_HB, wait_until
from zpar.cluster.connection import read_connection_file, write_connection_file
from zpar.cluster.launchers.hubquery import HubLine
from zpar.wire.curve import CurveKeys
from zpar.wire.messages import MsgType


@pytest.fixture
def curve_cluster(monkeypatch, tmp_path):
    """Two engines, every peer on tcp (no ipc twins) with Curve, in a ZPAR_DIR of its own."""
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    monkeypatch.setenv("ZPAR_TRANSPORT", "tcp")
    c = zpar.Cluster(n=2, curve=True, controller_args=FAST_HB, timeout=60)
    c.start()
    try:
        c.client.wait_for_engines(2, timeout=60)
        yield c
    finally:
        c.stop()


def _cli_status(c, *extra):
    launcher = c.launcher
    return subprocess.run(
        [sys.executable, "-m", "zpar", "cluster", "status", *extra]
        + ["--profile", launcher.profile, "--cluster-id", launcher.cluster_id],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )


def test_status_of_a_curve_cluster_from_the_client_and_the_cli(curve_cluster, tmp_path):
    c = curve_cluster
    rc = c.client
    info = read_connection_file(rc.url_file)
    assert info.curve_server_key and info.registration.startswith("tcp://127.0.0.1:")
    status = rc.controller_status()
    assert status["pid"] == c.launcher.controller.pid
    assert status["engines"] == [0, 1]

    # a stranger with a key pair of its own is refused at the handshake, and counted
    stranger = CurveKeys.generate()
    forged = dataclasses.replace(
        info, curve_public_key=stranger.client_public, curve_secret_key=stranger.client_secret
    )
    with pytest.raises(zpar.WrongKey):
        zpar.Client(url_file=write_connection_file(tmp_path / "stranger.json", forged), timeout=3)
    wait_until(
        lambda: rc.controller_status()["refused"].get("curve", {}).get("handshake", 0) > 0,
        "the refused handshake counted",
        30,
    )
    status = rc.controller_status()
    assert status["total_refused"] == sum(sum(n.values()) for n in status["refused"].values())

    out = _cli_status(c, "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    shown = json.loads(out.stdout)
    assert shown["pid"] == status["pid"] and shown["engines"] == [0, 1]
    assert shown["refused"]["curve"]["handshake"] >= status["refused"]["curve"]["handshake"]

    out = _cli_status(c)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"controller pid {status['pid']}, 2 engines" in out.stdout
    assert "curve" in out.stdout and "handshake" in out.stdout
    assert rc[:].apply_sync(lambda: 5) == [5, 5]  # the status line left the cluster serving

    # the right Curve keys but another signature key: told so, not "did not answer"
    other = write_connection_file(
        tmp_path / "other-key.json", dataclasses.replace(info, key="ab" * 32)
    )
    line = HubLine(other)
    try:
        with pytest.raises(zpar.WrongKey, match="refused the signature"):
            line.request(MsgType.CONTROLLER_STATUS_REQUEST, {})
    finally:
        line.close()
