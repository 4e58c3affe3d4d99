"""Large arrays over a --curve cluster do not cost an engine its registration (issue 13
item 2): libzmq encrypts and decrypts in its I/O thread, which the heartbeat shared with the
relays and the engine's task sockets, so a 100 MB round trip held the pings and pongs back
past the hub's limit and the engine was declared dead mid-push ("missed 5 heartbeats",
found by the W5 bench over tcp with Curve). The heartbeat has I/O threads of its own now."""

from __future__ import annotations

import numpy as np

import zpar
from tests.e2e.conftest import FAST_HB

MB = 1 << 20


def _identity(x):
    return x


def test_100_mb_round_trips_over_curve_keep_the_engine_registered(monkeypatch, tmp_path):
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    monkeypatch.setenv("ZPAR_TRANSPORT", "tcp")  # every byte through Curve, as across hosts
    # fast heartbeats (dead after ~0.5 s of silence) make a stalled heartbeat show at once
    with zpar.Cluster(n=1, curve=True, controller_args=FAST_HB, timeout=60) as rc:
        rc.wait_for_engines(1, timeout=60)
        uuid = rc.sender.engine_uuid(0)
        a = np.random.default_rng(0).random(100 * MB // 8)
        dv = rc[0]
        for _ in range(3):
            back = dv.apply_sync(_identity, a)
            assert back.shape == a.shape and back[-1] == a[-1]
            del back
            dv.push({"a": a}, block=True)
            assert dv.pull("a", block=True)[-1] == a[-1]
        assert rc.ids == [0] and rc.sender.engine_uuid(0) == uuid  # never declared dead
