"""Peer links: the dance order, signed and numbered packets, refusals."""

import threading
import time
import uuid

import pytest
import zmq

from zpar.comm.links import LinkError, PeerLinks
from zpar.comm.peerwire import ENC_PICKLE, ENC_RAW, HEADER, INLINE, Kind, Packet, PeerSigner
from zpar.errors import RemoteProtocolError

KEY = b"k" * 32


def _open(n, key=KEY, ids=None, timeout=10, mailboxes=True):
    ids = ids or [uuid.uuid4().hex] * n
    links = [PeerLinks(r, n, ids[r], key) for r in range(n)]
    for lk in links:
        lk.use_mailboxes = mailboxes
    table = [lk.bind() for lk in links]
    errors = []

    def dance(lk):
        try:
            lk.dance(table, timeout)
        except Exception as e:  # noqa: BLE001 - checked by the test
            errors.append(e)

    threads = [threading.Thread(target=dance, args=(lk,)) for lk in links]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return links, errors


def test_dance_higher_rank_connects_to_each_lower_one():
    links, errors = _open(4)
    try:
        assert errors == []
        for lk in links:
            # a DEALER toward every lower rank only; higher ranks come in on the ROUTER
            assert sorted(lk.dealers) == list(range(lk.rank))
            for d in lk.dealers.values():
                assert d.getsockopt_string(zmq.LAST_ENDPOINT).startswith("ipc://")
                assert d.getsockopt(zmq.ROUTING_ID) == b"r%d" % lk.rank
    finally:
        for lk in links:
            lk.close()


def test_dance_refuses_a_hello_for_another_communicator():
    links, errors = _open(2, ids=["alpha", "beta"], timeout=2)
    try:
        assert any(isinstance(e, LinkError) and "another communicator" in str(e) for e in errors)
    finally:
        for lk in links:
            lk.close()


def test_packets_are_signed_and_small_payloads_inline():
    s = PeerSigner(KEY)
    small = Packet(Kind.DATA, 0, ENC_PICKLE, 1, 7, 0, 3, 5, b"hello")
    frames = s.pack(small)
    assert len(frames) == 1
    back = s.unpack(frames)
    assert (back.src, back.tag, back.msgid, bytes(back.payload)) == (1, 7, 3, b"hello")
    big = Packet(Kind.DATA, 0, ENC_RAW, 1, 7, 0, 3, 5, b"x" * (INLINE + 1))
    assert len(s.pack(big)) == 2
    tampered = bytearray(frames[0])
    tampered[-1] ^= 1  # the pickle payload is signed
    with pytest.raises(RemoteProtocolError, match="bad-signature"):
        s.unpack([bytes(tampered)])
    with pytest.raises(RemoteProtocolError, match="bad-signature"):
        PeerSigner(b"other key").unpack(frames)
    with pytest.raises(RemoteProtocolError, match="bad-packet"):
        s.unpack([b"short"])


def test_mailbox_packets_carry_no_signature_socket_packets_do():
    """Same host, mailbox: no HMAC (design.md, "Same-host data plane"); the same packet
    through the socket is signed, and an unsigned one there is refused."""
    links, errors = _open(2)
    try:
        assert errors == []
        lo, hi = links
        hi.send(0, Packet(Kind.DATA, 0, ENC_PICKLE, 1, 9, 0, 1, 0, b"obj"))
        view = lo._inbox[1].peek()  # the raw slot the lane wrote
        assert view is not None and len(view) == HEADER.size + 3  # header and payload only
        view.release()
        got = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            got.extend(lo.poll(100))
        assert [(p.tag, bytes(p.payload)) for _, p in got] == [(9, b"obj")]
        s = PeerSigner(KEY)
        pkt = Packet(Kind.DATA, 0, ENC_PICKLE, 1, 9, 0, 1, 0, b"obj")
        assert len(s.pack(pkt)[0]) == HEADER.size + s.siglen + 3
        with pytest.raises(RemoteProtocolError, match="bad-signature"):
            s.unpack([s.pack(pkt, signed=False)[0] + b"x" * 32])  # unsigned on a socket
    finally:
        for lk in links:
            lk.close()


def test_out_of_sequence_packet_is_refused_on_the_socket():
    links, errors = _open(2, mailboxes=False)
    try:
        assert errors == []
        lo, hi = links
        lo.send(1, Packet(Kind.PING, 0, 0, 0, 0, 0, 0, 0))
        lo._send_seq[1] += 5  # as if packets were dropped or replayed out of order
        lo.send(1, Packet(Kind.PING, 0, 0, 0, 0, 0, 0, 0))
        got = []
        with pytest.raises(RemoteProtocolError, match="out-of-sequence"):
            for _ in range(50):
                got.extend(hi.poll(100))
        assert [p.kind for _, p in got] == [Kind.PING]
    finally:
        for lk in links:
            lk.close()


def test_a_gap_in_the_mailbox_is_refused_once_the_socket_stays_quiet(monkeypatch):
    """A mailbox packet numbered ahead waits for the earlier ones from the socket; when
    none comes for MAILBOX_GAP_S the link is refused, not left waiting forever."""
    from zpar.comm import links as links_mod

    monkeypatch.setattr(links_mod, "MAILBOX_GAP_S", 0.2)
    links, errors = _open(2)
    try:
        assert errors == []
        lo, hi = links
        assert 1 in lo._outbox and 0 in hi._inbox  # same host: the mailbox path
        lo.send(1, Packet(Kind.PING, 0, 0, 0, 0, 0, 0, 0))
        lo._send_seq[1] += 5
        lo.send(1, Packet(Kind.PING, 0, 0, 0, 0, 0, 0, 0))
        got = []
        deadline = time.monotonic() + 30
        with pytest.raises(LinkError, match="out-of-sequence"):
            while time.monotonic() < deadline:
                got.extend(hi.poll(50))
                hi.check_peers()
        assert [p.kind for _, p in got] == [Kind.PING]
    finally:
        for lk in links:
            lk.close()


def test_mailbox_and_socket_packets_merge_in_sending_order():
    """Small packets take the mailbox, large ones the socket: the receiver gets them in the
    order sent, whatever path each took."""
    links, errors = _open(2)
    try:
        assert errors == []
        lo, hi = links
        sizes = [10, INLINE + 100, 5, 7, INLINE * 3, 1, INLINE + 1, 3] * 10
        for i, n in enumerate(sizes):
            hi.send(0, Packet(Kind.DATA, 0, ENC_RAW, 1, i, 0, i, 0, b"x" * n))
        got = []
        deadline = time.monotonic() + 30
        while len(got) < len(sizes) and time.monotonic() < deadline:
            got.extend(lo.poll(100))
        assert [p.tag for _, p in got] == list(range(len(sizes)))
        assert [len(bytes(p.payload)) for _, p in got] == sizes
    finally:
        for lk in links:
            lk.close()


def test_a_full_mailbox_overflows_to_the_socket_in_order():
    """A receiver that reads nothing for a while: the first packets fill its mailbox, the
    rest take the socket, and it still gets all of them in sending order."""
    from zpar.comm.mailbox import SLOTS

    links, errors = _open(2)
    try:
        assert errors == []
        lo, hi = links
        n = SLOTS * 3
        for i in range(n):
            hi.send(0, Packet(Kind.DATA, 0, ENC_RAW, 1, i, 0, i, 0, b"%d" % i))
        assert hi._outbox[0].unread == SLOTS  # full; the others went through the socket
        got = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got.extend(lo.poll(100))
        assert [p.tag for _, p in got] == list(range(n))
        assert [bytes(p.payload) for _, p in got] == [b"%d" % i for i in range(n)]
    finally:
        for lk in links:
            lk.close()


def test_ranks_on_different_hosts_link_over_tcp():
    """Hostnames differ: the higher rank connects over tcp, and long messages stay on the
    socket (no shared memory between hosts)."""
    import numpy as np

    from zpar.comm.communicator import Communicator

    n = 3
    cid = uuid.uuid4().hex
    links = [PeerLinks(r, n, cid, KEY) for r in range(n)]
    table = [dict(lk.bind(), hostname=f"host{r}") for r, lk in enumerate(links)]
    out = [None] * n

    def rank(r):
        lk = links[r]
        lk.dance(table, 10)
        c = Communicator(lk, [e["hostname"] for e in table], maxdatalen=4096, timeout=30)
        a = np.arange(20_000.0) * (r + 1)
        b = np.empty_like(a)
        c.Allreduce(a, b)
        schemes = [d.getsockopt_string(zmq.LAST_ENDPOINT)[:6] for d in lk.dealers.values()]
        out[r] = (b[-1], schemes, dict(c._p2p._rings_out))
        c.Free()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for r, (last, schemes, rings) in enumerate(out):
        assert last == 19_999.0 * 6
        assert schemes == ["tcp://"] * r
        assert rings == {}
