"""HeartMonitor counts pings, not seconds: who is new, who is late, who is garbage."""

from __future__ import annotations

import struct

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


# -- a descriptor's number reused before its disconnect event is read ----------------------


class Frame:
    """A received frame: its bytes and the descriptor it came on (ZMQ_SRCFD)."""

    def __init__(self, data, fd):
        self.bytes = data
        self.fd = fd

    def get(self, option):
        assert option == zmq.SRCFD
        return self.fd


class FdRouter:
    def __init__(self):
        self.inbox = []

    def recv_multipart(self, flags=0, copy=True):
        if not self.inbox:
            raise zmq.Again()
        return self.inbox.pop(0)

    def echo(self, uuid, payload, fd):
        self.inbox.append([Frame(uuid, fd), Frame(payload, fd)])


class Events:
    """The pong socket's disconnect events as the listener guard forwards them."""

    def __init__(self):
        self.queue = []

    def recv_multipart(self, flags=0):
        if not self.queue:
            raise zmq.Again()
        return self.queue.pop(0)

    def disconnected(self, fd):
        self.queue.append([struct.pack("=hi", zmq.EVENT_DISCONNECTED, fd), b"tcp://127.0.0.1:1"])


class Sockets:
    """The process's descriptor table: number -> the socket it names now (an inode)."""

    def __init__(self):
        self.table = {}
        self.next = 100

    def accept(self, fd):
        self.next += 1
        self.table[fd] = self.next

    def close(self, fd):
        del self.table[fd]


def _fd_monitor(misses=100, grace=0.5, echoed_on=None):
    """A monitor on fake sockets; ``echoed_on``: e1 has echoed a first ping on that
    descriptor, a connection just accepted."""
    new, dead = [], []
    fds = Sockets()
    clock = [0.0]
    hm = HeartMonitor(
        FakePub(),
        FdRouter(),
        period=0.1,
        max_misses=misses,
        on_new_heart=lambda u: (new.append(u), hm.watch(u)),
        on_heart_failure=lambda u, reason: dead.append(u),
        suspect_grace=grace,
        identity=fds.table.get,
        clock=lambda: clock[0],
    )
    events = Events()
    hm.watch_connections(events)
    if echoed_on is not None:
        hm.beat()
        fds.accept(echoed_on)
        hm.pong.echo(b"e1", PING + b"1", fd=echoed_on)
        hm.handle_pong()
    return hm, fds, events, dead, clock


def test_a_late_disconnect_event_for_a_reused_descriptor_spares_the_new_engine():
    """e1 dies, its descriptor's number goes to e2's new connection, e2 echoes, and only
    then the listener guard's thread forwards e1's disconnect event: e2 stays, e1 goes."""
    hm, fds, events, dead, clock = _fd_monitor(echoed_on=7)
    fds.close(7)  # e1's process dies
    fds.accept(7)  # e2 connects: the OS gives it the number 7
    hm.pong.echo(b"e2", PING + b"1", fd=7)
    hm.handle_pong()
    events.disconnected(7)  # e1's close, read late
    clock[0] = 0.0
    hm.handle_events()
    assert b"e2" not in hm.suspects
    assert b"e1" in hm.suspects  # its echo's socket is gone: probed, not forgotten
    clock[0] = 10.0
    hm.check_suspects()  # long past the grace, neither answered a probe
    assert dead == [b"e1"] and b"e2" in hm.hearts and not hm.probing


def test_the_new_engines_own_close_on_the_reused_number_is_still_seen():
    hm, fds, events, dead, clock = _fd_monitor(echoed_on=7)
    fds.close(7)
    fds.accept(7)
    hm.pong.echo(b"e2", PING + b"1", fd=7)
    hm.handle_pong()
    events.disconnected(7)  # e1's
    clock[0] = 0.0
    hm.handle_events()
    clock[0] = 1.0
    hm.check_suspects()
    assert dead == [b"e1"]
    fds.close(7)  # now e2 dies too
    events.disconnected(7)
    clock[0] = 2.0
    hm.handle_events()
    assert b"e2" in hm.suspects
    clock[0] = 3.0
    hm.check_suspects()
    assert dead == [b"e1", b"e2"]


def test_an_event_read_before_libzmq_closes_the_descriptor_is_looked_at_again():
    """libzmq emits EVENT_DISCONNECTED just before it closes the descriptor: an event
    whose number still names the heart's socket is looked at again, not dropped."""
    hm, fds, events, dead, clock = _fd_monitor(echoed_on=7)
    events.disconnected(7)
    clock[0] = 0.0
    hm.handle_events()
    assert not hm.suspects and hm.probing  # not yet: its socket is still open
    fds.close(7)
    clock[0] = 0.01
    hm.check_suspects()
    assert b"e1" in hm.suspects
    clock[0] = 1.0
    hm.check_suspects()
    assert dead == [b"e1"]


def test_a_stale_event_for_a_live_engine_is_forgotten_after_the_grace():
    hm, fds, events, dead, clock = _fd_monitor(echoed_on=7)
    events.disconnected(7)  # about an earlier connection on 7 that never echoed
    clock[0] = 0.0
    hm.handle_events()
    clock[0] = 1.0
    hm.check_suspects()
    assert not dead and not hm.probing and b"e1" in hm.hearts


def test_an_echo_queued_from_a_closed_connection_does_not_displace_the_live_one():
    """e0 echoed on 7 and closed; the number went to e1, whose echo was read first; e0's
    queued echo, read after, must not make 7 e0's (e1 would die of e0's events)."""
    hm, fds, events, dead, clock = _fd_monitor()
    hm.beat()
    fds.accept(7)  # e1's connection (e0's closed before)
    hm.pong.echo(b"e1", PING + b"1", fd=7)
    hm.pong.echo(b"e0", PING + b"1", fd=7)  # queued from e0's closed connection
    hm.handle_pong()
    assert not hm.suspects
    fds.close(7)  # e1 dies
    events.disconnected(7)
    clock[0] = 0.0
    hm.handle_events()
    assert list(hm.suspects) == [b"e1"]
    clock[0] = 1.0
    hm.check_suspects()
    assert dead == [b"e1"]


def test_a_heart_that_reconnects_on_a_new_descriptor_is_cleared_by_its_probe_answer():
    hm, fds, events, dead, clock = _fd_monitor(echoed_on=7)
    fds.close(7)
    fds.accept(9)  # the heart's DEALER reconnects
    events.disconnected(7)
    clock[0] = 0.0
    hm.handle_events()
    assert b"e1" in hm.suspects
    hm.probe()
    hm.pong.echo(b"e1", PROBE + b"1", fd=9)
    hm.handle_pong()
    clock[0] = 1.0
    hm.check_suspects()
    assert not dead and not hm.probing
    fds.close(9)  # its new connection is the one watched now
    events.disconnected(9)
    clock[0] = 2.0
    hm.handle_events()
    assert b"e1" in hm.suspects


def test_an_echo_read_after_its_connection_closed_makes_a_suspect():
    hm, fds, events, dead, clock = _fd_monitor()
    hm.beat()
    hm.pong.echo(b"e1", PING + b"1", fd=7)  # descriptor 7 is closed by the time it is read
    hm.handle_pong()
    assert list(hm.suspects) == [b"e1"]
    clock[0] = 1.0
    hm.check_suspects()
    assert dead == [b"e1"]


def test_echoes_queued_from_a_closed_connection_do_not_extend_the_grace():
    hm, fds, events, dead, clock = _fd_monitor()
    hm.beat()
    hm.pong.echo(b"e1", PING + b"1", fd=7)  # closed when read
    hm.handle_pong()
    clock[0] = 0.4
    hm.pong.echo(b"e1", PING + b"1", fd=7)  # another one queued before the close
    hm.handle_pong()
    clock[0] = 0.6
    hm.check_suspects()
    assert dead == [b"e1"]
