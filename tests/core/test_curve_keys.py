"""zpar.wire.curve without a cluster: keys, socket roles, and the ZAP handler's verdicts."""

from __future__ import annotations

import json
import os
import stat

import pytest
import zmq

from zpar.cluster.connection import ConnectionInfo, read_connection_file, write_connection_file
from zpar.wire.curve import ZAP_VERSION, CurveKeys, ZapAuthenticator, keys_of, secure


def test_keys_for_peers_never_hold_the_server_secret(tmp_path):
    keys = CurveKeys.generate()
    assert keys.server_secret and len(keys.server_public) == 40
    assert keys.for_peers().server_secret == ""
    path = keys.write(tmp_path / "curve")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert CurveKeys.read(path) == keys


def test_connection_file_carries_the_peer_keys(tmp_path):
    keys = CurveKeys.generate()
    info = ConnectionInfo(
        "tcp://127.0.0.1:1",
        "k",
        curve_server_key=keys.server_public,
        curve_public_key=keys.client_public,
        curve_secret_key=keys.client_secret,
    )
    back = read_connection_file(write_connection_file(tmp_path / "c.json", info))
    assert keys_of(back) == keys.for_peers()
    assert keys.server_secret not in json.dumps(json.loads((tmp_path / "c.json").read_text()))
    assert keys_of(ConnectionInfo("tcp://127.0.0.1:1", "k")) is None


def test_server_role_needs_the_secret():
    ctx = zmq.Context()
    s = ctx.socket(zmq.ROUTER)
    try:
        with pytest.raises(ValueError, match="secret"):
            secure(s, CurveKeys.generate().for_peers(), server=True)
        assert secure(s, None, server=True) is s  # no Curve: left alone
        assert s.getsockopt(zmq.CURVE_SERVER) == 0
    finally:
        s.close(0)
        ctx.term()


def test_judge_admits_only_the_cluster_key():
    keys = CurveKeys.generate()
    other = CurveKeys.generate()
    ctx = zmq.Context()
    zap = ZapAuthenticator(ctx, {keys.client_public})
    try:
        from zmq.utils import z85

        def request(mech, *creds):
            return [ZAP_VERSION, b"7", b"zpar", b"10.0.0.9", b"", mech, *creds]

        good = z85.decode(keys.client_public.encode())
        bad = z85.decode(other.client_public.encode())
        assert zap.judge(request(b"CURVE", good))[2] == b"200"
        assert zap.judge(request(b"CURVE", bad))[2] == b"400"
        assert zap.judge(request(b"PLAIN", b"u", b"p"))[2] == b"400"
        assert zap.judge(request(b"NULL"))[2] == b"200"
        assert zap.judge([b"0.9", b"8", b"", b"", b"", b"CURVE", good])[2] == b"400"
        assert zap.judge([b"x"])[2] == b"400"
        assert zap.refused["10.0.0.9"] == 2
    finally:
        zap.stop()
        ctx.term()


def _handshake(ctx, server_addr, keys, *, as_client):
    """True when a DEALER with ``as_client`` keys gets an echo through the Curve server."""
    c = ctx.socket(zmq.DEALER)
    c.setsockopt(zmq.LINGER, 0)
    if as_client is not None:
        secure(c, as_client)
    c.connect(server_addr)
    try:
        c.send(b"hello")
        return bool(c.poll(1500))
    finally:
        c.close(0)


def test_only_the_cluster_keys_complete_a_handshake():
    keys = CurveKeys.generate()
    ctx = zmq.Context()
    zap = ZapAuthenticator(ctx, {keys.client_public})
    server = secure(ctx.socket(zmq.ROUTER), keys, server=True)
    server.setsockopt(zmq.LINGER, 0)
    port = server.bind_to_random_port("tcp://127.0.0.1")
    addr = f"tcp://127.0.0.1:{port}"
    stop = False

    import threading

    def echo():
        while not stop:
            if server.poll(50):
                server.send_multipart(server.recv_multipart())

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    try:
        assert _handshake(ctx, addr, keys.for_peers(), as_client=keys.for_peers())
        # another key pair that knows the server's public key: refused by ZAP
        stranger = CurveKeys.generate()
        knows_server = CurveKeys(keys.server_public, stranger.client_public, stranger.client_secret)
        assert not _handshake(ctx, addr, keys, as_client=knows_server)
        assert not _handshake(ctx, addr, keys, as_client=None)  # plain: no handshake
        assert sum(zap.refused.values()) >= 1
    finally:
        stop = True
        t.join(2)
        server.close(0)
        zap.stop()
        ctx.term()
