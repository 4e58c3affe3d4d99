"""HeartMonitor counts pings, not seconds: who is new, who is late, who is garbage."""

from __future__ import annotations

import pytest
import zmq

from zpar.constants import PING
from zpar.hub.heartmonitor import PROBE, HeartMonitor


class FakePub:
    def __init__(self):
        self.sent = []

    def send(self, data):
        self.sent.append(data)


class FakeRouter:
    def __init__(self):
        self.inbox = []

    def recv_multipart(self, flags=0, copy=True):
        if not self.inbox:
            raise zmq.Again()
        return [zmq.Frame(f) for f in self.inbox.pop(0)]


def _monitor(misses=2):
    new, dead = [], []
    hm = HeartMonitor(
        FakePub(),
        FakeRouter(),
        period=0.1,
        max_misses=misses,
        on_new_heart=lambda u: (new.append(u), hm.watch(u)),
        on_heart_failure=lambda u, reason: dead.append(u),
    )
    return hm, new, dead


def test_first_echo_announces_a_new_heart():
    hm, new, dead = _monitor()
    hm.beat()
    assert hm.ping.sent == [PING + b"1"]
    hm.pong.inbox.append([b"e1", PING + b"1"])
    hm.handle_pong()
    assert new == [b"e1"] and not dead


def test_engine_is_dead_after_max_misses_and_not_before():
    hm, new, dead = _monitor(misses=2)
    hm.beat()
    hm.pong.inbox.append([b"e1", PING + b"1"])
    hm.handle_pong()
    # a ping counts as missed once the next one goes out unanswered
    hm.beat()  # ping 2 out
    hm.beat()  # ping 3 out: 2 missed
    hm.beat()  # ping 4 out: 2, 3 missed
    assert not dead
    hm.beat()  # ping 5 out: 2, 3, 4 missed > 2
    assert dead == [b"e1"]
    hm.beat()
    assert dead == [b"e1"], "declared dead once"


def test_late_echo_of_an_old_ping_still_counts_as_alive():
    hm, new, dead = _monitor(misses=2)
    hm.beat()
    hm.pong.inbox.append([b"e1", PING + b"1"])
    hm.handle_pong()
    hm.beat()
    hm.beat()
    hm.pong.inbox.append([b"e1", PING + b"3"])
    hm.handle_pong()
    hm.beat()
    hm.beat()
    assert not dead


@pytest.mark.parametrize(
    "frames",
    [[b"e1"], [b"e1", b"pong1"], [b"e1", PING + b"x"], [b"e1", PING + b"99"], [b"a", b"b", b"c"]],
)
def test_malformed_or_future_echoes_are_ignored(frames):
    hm, new, dead = _monitor()
    hm.beat()
    hm.pong.inbox.append(frames)
    hm.handle_pong()
    assert not new and not dead


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="period"):
        HeartMonitor(
            FakePub(),
            FakeRouter(),
            period=0,
            max_misses=1,
            on_new_heart=print,
            on_heart_failure=print,
        )


def test_probe_registers_new_hearts_without_counting_as_a_beat():

    hm, new, dead = _monitor(misses=1)
    hm.probe()
    assert hm.ping.sent == [PROBE + b"1"] and hm.counter == 0
    hm.pong.inbox.append([b"e1", PROBE + b"1"])
    hm.handle_pong()
    assert new == [b"e1"]
    hm.pong.inbox.append([b"e1", PROBE + b"1"])  # a known heart's probe echo changes nothing
    hm.handle_pong()
    assert new == [b"e1"] and not dead


def test_closed_connection_makes_a_suspect_that_dies_or_is_cleared():
    hm, new, dead = _monitor(misses=100)
    hm.beat()
    for u in (b"e1", b"e2"):
        hm.pong.inbox.append([u, PING + b"1"])
    hm.handle_pong()
    hm.suspects[b"e1"] = (hm.probes + 1, 10.0)  # as handle_events does on a disconnect
    hm.suspects[b"e2"] = (hm.probes + 1, 10.0)
    assert hm.probing
    hm.probe()
    hm.pong.inbox.append([b"e2", PROBE + b"1"])  # e2 reconnected and answered
    hm.handle_pong()
    hm.check_suspects(now=9.0)
    assert not dead and list(hm.suspects) == [b"e1"]
    hm.check_suspects(now=10.5)
    assert dead == [b"e1"] and not hm.probing and b"e1" not in hm.hearts
