"""Peer links on a --curve cluster (issue 13 item 2, "the communicator's peer links"): the
links between ranks on different hosts are CurveZMQ, and a loopback capture of a bcast over
them holds no plaintext of the value (the same capture of plain links does)."""

from __future__ import annotations

import secrets
import threading
import uuid

import pytest
import zmq

from tests.loopcapture import LoopbackCapture
from zpar.comm.communicator import Communicator
from zpar.comm.links import LinkError, PeerLinks

pytestmark = pytest.mark.cluster

KEY = b"k" * 32


def _bcast_over_tcp(curve: bool, tmp_path, name: str) -> tuple[bytes, str, list]:
    """Three ranks on 'different hosts' (tcp links) bcast a marker; return the capture of
    their links' traffic, the marker and each rank's socket mechanisms. The capture is read
    once it holds every packet the ranks sent (LoopbackCapture.settle), plain or Curve."""
    n, cid = 3, uuid.uuid4().hex
    links = [PeerLinks(r, n, cid, KEY, curve=curve) for r in range(n)]
    table = [dict(lk.bind(), hostname=f"host{r}") for r, lk in enumerate(links)]
    ports = [int(e["tcp"].rsplit(":", 1)[1]) for e in table]
    marker = "ZPAR-PLAINTEXT-" + secrets.token_hex(8)
    cap = LoopbackCapture(ports, tmp_path / f"{name}.pcap")
    out: list = [None] * n

    def rank(r: int) -> None:
        lk = links[r]
        try:
            lk.dance(table, 30)
            c = Communicator(lk, [e["hostname"] for e in table], timeout=30)
            got = c.bcast(marker if r == 0 else None)
            mechanisms = [lk.router.getsockopt(zmq.MECHANISM)]
            mechanisms += [d.getsockopt(zmq.MECHANISM) for d in lk.dealers.values()]
            out[r] = (got, mechanisms)
            c.Free()
        except Exception as e:  # noqa: BLE001 - reported by the test
            out[r] = e

    try:
        threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        cap.settle()  # every rank has the value: every packet that carried it is in the file
    finally:
        cap.stop()
    for r, o in enumerate(out):
        assert isinstance(o, tuple), f"rank {r}: {o!r}"
        assert o[0] == marker
    return cap.read(), marker, [o[1] for o in out]


def test_curve_links_hide_what_a_communicator_sends_between_hosts(tmp_path):
    data, marker, mechanisms = _bcast_over_tcp(True, tmp_path, "curve")
    assert len(data) > 1000, "the capture saw no traffic"
    assert all(m == zmq.CURVE for ranks in mechanisms for m in ranks)
    assert marker.encode() not in data


def test_plain_links_show_it(tmp_path):
    """The control: the same capture of plain links holds the value."""
    data, marker, mechanisms = _bcast_over_tcp(False, tmp_path, "plain")
    assert all(m == zmq.NULL for ranks in mechanisms for m in ranks)
    assert marker.encode() in data


def test_a_rank_without_a_curve_key_is_refused_by_name():
    links = [PeerLinks(r, 2, "c", KEY, curve=(r == 1)) for r in range(2)]
    try:
        table = [dict(lk.bind(), hostname=f"host{r}") for r, lk in enumerate(links)]
        with pytest.raises(LinkError, match="rank 0 offers no Curve key"):
            links[1].dance(table, 5)
    finally:
        for lk in links:
            lk.close()
