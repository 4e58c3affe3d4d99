"""A --curve cluster end to end: it works over tcp, strangers cannot connect, and a loopback
capture of a push holds no plaintext of the value (while the same capture of a plain
cluster does: the capture is proven to see it). Needs root (tests/loopcapture.py)."""

from __future__ import annotations

import dataclasses
import os
import secrets

import pytest
import zmq

import zpar
from tests.e2e.conftest import FAST_HB, wait_until
from tests.loopcapture import LoopbackCapture
from zpar.cluster.connection import read_connection_file, write_connection_file
from zpar.wire.curve import CurveKeys


@pytest.fixture
def tcp_only(monkeypatch, tmp_path):
    """Every peer on tcp (no ipc twins): the traffic a network would carry."""
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    monkeypatch.setenv("ZPAR_TRANSPORT", "tcp")


def _ports(rc) -> list[int]:
    """The controller ports this client's sockets connect to."""
    ports = []
    for s in rc._io._sockets.values():
        ep = s.getsockopt_string(zmq.LAST_ENDPOINT)
        if ep.startswith("tcp://"):
            ports.append(int(ep.rsplit(":", 1)[1]))
    return sorted(set(ports))


def _push_and_capture(rc, tmp_path, name):
    marker = "ZPAR-PLAINTEXT-" + secrets.token_hex(8)
    cap = LoopbackCapture(_ports(rc), tmp_path / f"{name}.pcap")
    try:
        rc[:].push({"secret": marker}, block=True)
        assert rc[:].pull("secret", block=True) == [marker, marker]
        view = rc.load_balanced_view()
        assert view.apply_sync(lambda s: s.lower(), marker) == marker.lower()
        cap.settle()  # every packet of those round trips is in the file
    finally:
        cap.stop()
    data = cap.read()
    assert len(data) > 1000, "the capture saw no traffic"
    return data, marker


def test_curve_cluster_runs_and_hides_pushed_values(tcp_only, tmp_path):
    with zpar.Cluster(n=2, curve=True, controller_args=FAST_HB, timeout=60) as rc:
        info = read_connection_file(rc.url_file)
        assert info.curve_server_key and info.curve_secret_key
        assert os.stat(rc.url_file).st_mode & 0o077 == 0
        data, marker = _push_and_capture(rc, tmp_path, "curve")
        assert marker.encode() not in data
        assert marker.lower().encode() not in data
        # output of a task still reaches its client over the encrypted IOPub
        ar = rc.load_balanced_view().apply_async(lambda: print("seen") or 3)
        assert ar.get(30) == 3 and "seen" in ar.stdout


def test_plain_cluster_capture_shows_the_value(tcp_only, tmp_path):
    """The control: without --curve the same capture holds the value in clear."""
    with zpar.Cluster(n=2, controller_args=FAST_HB, timeout=60) as rc:
        data, marker = _push_and_capture(rc, tmp_path, "plain")
        assert marker.encode() in data


def test_peer_without_the_cluster_keys_cannot_connect(tcp_only, tmp_path):
    c = zpar.Cluster(n=1, curve=True, controller_args=FAST_HB, timeout=60)
    rc = c.start()
    try:
        info = read_connection_file(rc.url_file)
        stranger = CurveKeys.generate()
        forged = dataclasses.replace(
            info, curve_public_key=stranger.client_public, curve_secret_key=stranger.client_secret
        )
        path = write_connection_file(tmp_path / "stranger.json", forged)
        with pytest.raises(zpar.WrongKey):
            zpar.Client(url_file=path, timeout=3)
        plain = dataclasses.replace(info, curve_server_key="")
        with pytest.raises(zpar.WrongKey):
            zpar.Client(url_file=write_connection_file(tmp_path / "plain.json", plain), timeout=3)
        log = c.launcher.log_dir / f"{c.cluster_id}-controller.log"
        wait_until(lambda: "not this cluster's client key" in log.read_text(), "ZAP refusal logged")
        assert rc[:].apply_sync(lambda: 7) == [7]  # the cluster still serves its own
    finally:
        c.stop()
