"""ClientLink on real loopback sockets: what libzmq 4.3 does that the ledger relies on
(EAGAIN at SNDHWM under ROUTER_MANDATORY + NOBLOCK, EHOSTUNREACH for a gone identity,
ZMQ_SRCFD = the monitor events' fd, no ROUTER_NOTIFY without the draft API), then a stopped
reader's replies parked and delivered in order, and a closed client reported gone."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
import zmq

from tests.clusters import wait_until
from zpar.schedulers.clientlink import SRCFD, ClientLink
from zpar.wire.sockets import recv_monitor_event, socket_identity

#: sockets a test opened, closed after it (an unclosed socket's warning is an error)
_OPEN: list[zmq.Socket] = []


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    for s in _OPEN:
        s.close(linger=0)
    _OPEN.clear()
    c.term()


def _router(ctx, hwm=None, link=None):
    """A ROUTER bound on loopback; ``hwm`` (with ROUTER_MANDATORY) or ``link`` (a ClientLink
    factory) set before binding: a listener copies the socket's options when it binds."""
    r = ctx.socket(zmq.ROUTER)
    _OPEN.append(r)
    r.setsockopt(zmq.LINGER, 0)
    r.setsockopt(zmq.SNDBUF, 4096)  # a small kernel buffer fills within a few replies
    if hwm is not None:
        r.setsockopt(zmq.SNDHWM, hwm)
        r.setsockopt(zmq.ROUTER_MANDATORY, 1)
    if link is not None:
        link = link(r)
    port = r.bind_to_random_port("tcp://127.0.0.1")
    return (r if link is None else link), f"tcp://127.0.0.1:{port}"


def _dealer(ctx, addr, rcvhwm=1):
    d = ctx.socket(zmq.DEALER)
    _OPEN.append(d)
    d.setsockopt(zmq.LINGER, 0)
    d.setsockopt(zmq.RCVHWM, rcvhwm)
    d.setsockopt(zmq.RCVBUF, 4096)
    d.connect(addr)
    return d


def _linked(link, dealer) -> bytes:
    """The identity of ``dealer`` once its first message came through ``link``."""
    dealer.send(b"hello")
    assert link.sock.poll(10_000)
    return link.recv()[0]


def _hello(router, dealer):
    dealer.send(b"hello")
    assert router.poll(10_000)
    return router.recv_multipart(copy=False)


def test_libzmq_eagain_at_sndhwm_and_ehostunreach_once_gone(ctx):
    router, addr = _router(ctx, hwm=4)
    dealer = _dealer(ctx, addr)
    ident = _hello(router, dealer)[0].bytes
    payload = b"x" * 65536
    sent = 0
    with pytest.raises(zmq.Again):
        for _ in range(10_000):  # the dealer never reads: pipe + kernel buffers fill
            router.send(ident, zmq.SNDMORE | zmq.NOBLOCK)
            router.send(payload)
            sent += 1
    assert 4 <= sent < 100  # SNDHWM messages, and what the small kernel buffers took
    dealer.close(linger=0)

    def unreachable():
        try:
            router.send(ident, zmq.SNDMORE | zmq.NOBLOCK)
        except zmq.Again:
            return False
        except zmq.ZMQError as e:
            assert e.errno == zmq.EHOSTUNREACH
            return True
        router.send(b"")  # routable after all: finish the message
        return False

    # polling the ROUTER (as the scheduler's loop does) lets it retire the closed pipe;
    # until then a full pipe answers EAGAIN (the monitor's close event names it sooner)
    wait_until(unreachable, "EHOSTUNREACH for a closed peer", tick=lambda: router.poll(0))


def test_libzmq_srcfd_is_the_fd_of_the_monitor_events(ctx):
    router, addr = _router(ctx)
    mon = router.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
    _OPEN.append(mon)
    try:
        dealer = _dealer(ctx, addr)
        frames = _hello(router, dealer)
        fd = frames[0].get(SRCFD)
        assert fd == frames[1].get(SRCFD) and fd > 0
        accepted = recv_monitor_event(mon)
        assert accepted["event"] == zmq.EVENT_ACCEPTED and accepted["value"] == fd
        dealer.close(linger=0)
        assert mon.poll(10_000)
        closed = recv_monitor_event(mon)
        assert closed["event"] == zmq.EVENT_DISCONNECTED and closed["value"] == fd
    finally:
        router.disable_monitor()
        mon.close(linger=0)


def test_libzmq_refuses_router_notify_without_the_draft_api(ctx):
    if zmq.has("draft"):
        pytest.skip("this libzmq has the draft API: ROUTER_NOTIFY would work")
    router, _ = _router(ctx)
    with pytest.raises(zmq.ZMQError):
        router.setsockopt(zmq.ROUTER_NOTIFY, 3)


def test_a_stopped_reader_gets_every_reply_in_order_once_it_reads(ctx):
    gone = []
    link, addr = _router(ctx, link=lambda r: ClientLink(r, gone.append, 2))
    try:
        dealer = _dealer(ctx, addr)
        client = _linked(link, dealer)
        payload = b"y" * 65536
        n = 40
        for i in range(n):
            link.send(client, [i.to_bytes(4, "big"), payload])
        assert link.busy  # the dealer has not read: replies are parked here
        assert not link.ledger.admit(client)  # its tasks wait
        got, caught_up = [], []
        while len(got) < n:
            if dealer.poll(10):
                got.append(int.from_bytes(dealer.recv_multipart()[0], "big"))
            caught_up += link.flush()
        assert got == list(range(n))
        wait_until(lambda: not link.busy, "parked replies flushed", tick=link.flush)
        assert link.ledger.admit(client) and client in caught_up + link.flush()
        assert gone == []
    finally:
        link.close()


def test_a_closed_client_is_reported_gone_once(ctx):
    gone = []
    link, addr = _router(ctx, link=lambda r: ClientLink(r, gone.append, 1))
    try:
        dealer = _dealer(ctx, addr)
        client = _linked(link, dealer)
        for _ in range(20):
            link.send(client, [b"r", b"z" * 65536])
        assert not link.ledger.admit(client)
        dealer.close(linger=0)

        def reported():
            if link.monitor.poll(0):
                link.poll_closed()
            return bool(gone)

        wait_until(reported, "the closed client reported")
        assert gone == [client]
        assert not link.busy and link.is_gone(client) and not link.ledger.admit(client)
        link.send(client, [b"late"])  # dropped, not parked, not reported twice
        assert not link.busy and len(gone) == 1
    finally:
        link.close()


def test_a_new_client_on_a_reused_fd_is_not_taken_for_the_dead_one(ctx):
    gone = []
    link, addr = _router(ctx, link=lambda r: ClientLink(r, gone.append))
    router = link.sock
    try:
        first = _dealer(ctx, addr)
        first.send(b"hello")
        assert router.poll(10_000)
        a = link.recv()[0]
        first.close(linger=0)
        second = _dealer(ctx, addr)  # the OS usually hands it the fd just closed
        second.send(b"hello")
        assert router.poll(10_000)
        # on the same fd the first's close is noted before this message (an fd is reused
        # only after its close was reported); on another fd it may come later
        b = link.recv()[0]

        def reported(n):
            def check():
                if link.monitor.poll(0):
                    link.poll_closed()
                return len(gone) >= n

            return check

        wait_until(reported(1), "the first client's close reported")
        assert gone == [a] and not link.is_gone(b)
        second.close(linger=0)
        wait_until(reported(2), "the second client's close reported")
        assert gone == [a, b]
    finally:
        link.close()


def test_the_link_bounds_the_pipe_and_keeps_tcp_alive_before_binding(ctx):
    """Options a listener copies when it binds: the link sets them on the socket it is
    given before the scheduler binds it."""
    from zpar.constants import CLIENT_KEEPALIVE, CLIENT_SNDHWM

    link, _ = _router(ctx, link=lambda r: ClientLink(r, lambda c: None))
    try:
        sock = link.sock
        assert sock.getsockopt(zmq.SNDHWM) == CLIENT_SNDHWM
        assert sock.getsockopt(zmq.TCP_KEEPALIVE) == 1
        assert (
            sock.getsockopt(zmq.TCP_KEEPALIVE_IDLE),
            sock.getsockopt(zmq.TCP_KEEPALIVE_INTVL),
            sock.getsockopt(zmq.TCP_KEEPALIVE_CNT),
        ) == CLIENT_KEEPALIVE
        other = ctx.socket(zmq.ROUTER)
        _OPEN.append(other)
        with pytest.raises(ValueError, match="high-water mark"):
            ClientLink(other, lambda c: None, hwm=0)
    finally:
        link.close()


#: a client in a process of its own (so that its end of the connection takes no number in
#: ours): connects a DEALER, says hello, and closes when its stdin does
_CLIENT = """
import sys, zmq
d = zmq.Context().socket(zmq.DEALER)
d.connect(sys.argv[1])
d.send(b"hello")
sys.stdin.read()
d.close(linger=0)
"""


@pytest.mark.cluster
def test_a_late_close_event_for_a_reused_descriptor_spares_the_new_client(ctx):
    """The close events come through the listener guard's thread: A's can be read after
    B, on A's reused descriptor number, was seen. B must not be made gone (its tasks would
    be cancelled); A is, its number now naming B's socket."""
    gone = []
    sockets = []

    def link(r):
        held = r.get_monitor_socket(zmq.EVENT_DISCONNECTED)  # the guard's copy, held back
        fwd = ctx.socket(zmq.PAIR)
        fwd.bind("inproc://late-events")
        mine = ctx.socket(zmq.PAIR)
        mine.connect("inproc://late-events")
        _OPEN.extend([held, fwd, mine])
        sockets.extend([held, fwd])
        return ClientLink(r, gone.append, monitor=mine)

    def client():
        p = subprocess.Popen([sys.executable, "-c", _CLIENT, addr], stdin=subprocess.PIPE)
        procs.append(p)
        assert link.sock.poll(30_000)
        return p, link.recv()[0]

    def closed(p):
        p.stdin.close()
        p.wait(30)
        assert held.poll(30_000)
        return held.recv_multipart()

    procs = []
    dummies = []
    link, addr = _router(ctx, link=link)
    held, fwd = sockets
    try:
        pa, a = client()
        a_closed = closed(pa)  # held back, as a busy guard thread would
        fd = recv_monitor_event_from(a_closed)
        wait_until(lambda: socket_identity(fd) is None, "libzmq closes A's descriptor")
        while (d := os.open(os.devnull, os.O_RDONLY)) != fd:  # A's number: the lowest free
            dummies.append(d)
        os.close(d)
        pb, b = client()
        assert link.ledger.owner(fd) == b, "the OS gave B's connection A's number"
        assert gone == [a]  # B's message on A's number, another socket: A's closed
        fwd.send_multipart(a_closed)
        assert link.monitor.poll(10_000)
        link.poll_closed()
        link.flush()
        assert gone == [a] and link.ledger.admit(b)
        fwd.send_multipart(closed(pb))  # B's own close still makes it gone
        assert link.monitor.poll(10_000)
        link.poll_closed()
        wait_until(lambda: gone == [a, b], "B gone", tick=link.flush)
    finally:
        link.sock.disable_monitor()
        for d in dummies:
            os.close(d)
        for p in procs:
            p.kill()
            p.wait(30)


def recv_monitor_event_from(frames):
    event, value = struct.unpack("=hi", frames[0][:6])
    assert event == zmq.EVENT_DISCONNECTED
    return value
