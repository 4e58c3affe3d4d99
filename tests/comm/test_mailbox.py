"""The shared-memory mailbox on its own: one sender and one receiver mapping, order, room,
the spinning flag, refusals; and cross-memory attach reads."""

import os

import numpy as np
import pytest

from zpar.comm import cma
from zpar.comm.mailbox import Mailbox

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm here")


def _pair(slots=4, slot_size=64):
    out = Mailbox.create(slots, slot_size)
    inn = Mailbox.attach(out.path, slots, slot_size)
    return out, inn


def test_packets_come_out_in_order_and_the_file_is_gone_once_mapped():
    out, inn = _pair()
    try:
        assert not os.path.exists(out.path)  # the receiver unlinked it
        assert inn.peek() is None and not inn.ready()
        for p in (b"one", b"two", b""):
            assert out.put(p)
        got = []
        while inn.ready():
            view = inn.peek()
            got.append(bytes(view))
            view.release()
            inn.consume()
        assert got == [b"one", b"two", b""]
        assert out.unread == 0
    finally:
        out.close()
        inn.close()


def test_a_full_mailbox_or_a_too_big_packet_is_refused_not_overwritten():
    out, inn = _pair(slots=2, slot_size=16)
    try:
        assert not out.put(b"x" * 13)  # 4-byte length + 13 > 16
        assert out.put(b"a") and out.put(b"b")
        assert out.unread == 2
        assert not out.put(b"c")  # full: the sender falls back to the socket
        view = inn.peek()
        assert bytes(view) == b"a"
        view.release()
        inn.consume()
        assert out.put(b"c")  # the slot came free
        rest = []
        while inn.ready():
            view = inn.peek()
            rest.append(bytes(view))
            view.release()
            inn.consume()
        assert rest == [b"b", b"c"]
    finally:
        out.close()
        inn.close()


def test_the_spinning_flag_is_seen_by_the_sender():
    out, inn = _pair()
    try:
        assert not out.receiver_spinning
        inn.set_spinning(True)
        assert out.receiver_spinning
        inn.set_spinning(False)
        assert not out.receiver_spinning
    finally:
        out.close()
        inn.close()


def test_attach_refuses_foreign_paths_and_wrong_sizes(tmp_path):
    with pytest.raises(ValueError, match="refusing mailbox path"):
        Mailbox.attach(str(tmp_path / "zpar-mbox-x"))
    with pytest.raises(ValueError, match="refusing mailbox path"):
        Mailbox.attach("/dev/shm/zpar-mbox-../../etc/passwd")
    out = Mailbox.create(4, 64)
    try:
        with pytest.raises(ValueError, match="is not"):
            Mailbox.attach(out.path, 8, 64)
    finally:
        out.close()


@pytest.mark.skipif(not cma.SUPPORTED, reason="process_vm_readv is Linux's")
def test_cma_reads_a_described_buffer_and_refuses_a_gone_process():
    src = np.arange(100_000, dtype=np.float64)
    dst = np.zeros_like(src)
    desc = cma.describe(os.getpid(), memoryview(src).cast("B"))
    assert cma.read(desc, memoryview(dst).cast("B"))
    assert np.array_equal(src, dst)
    gone = cma.DESC.pack(2**22 + 12345, cma.address(memoryview(src).cast("B")))  # no such pid
    assert not cma.read(gone, memoryview(dst).cast("B"))


@pytest.mark.skipif(not cma.SUPPORTED, reason="process_vm_readv is Linux's")
def test_a_long_cma_read_is_split_across_threads_and_arrives_whole(monkeypatch):
    """A read of several parts (forced here: 64 KiB parts, four of them, whatever the CPUs
    and the load)
    lands every byte where it belongs, an odd length included; a refusal of any part
    fails the whole read."""
    monkeypatch.setattr(cma, "PART_MIN", 64 << 10)
    monkeypatch.setattr(cma, "_cpus", lambda: 4)
    monkeypatch.setattr(cma, "_room", lambda: True)  # a CPU for each part, whatever the load
    src = np.random.default_rng(1).integers(0, 255, (1 << 20) + 12345, dtype=np.uint8)
    dst = np.zeros_like(src)
    desc = cma.describe(os.getpid(), memoryview(src))
    assert cma.read(desc, memoryview(dst))
    assert np.array_equal(src, dst)
    calls = []
    real = cma._read_part

    base = cma.DESC.unpack_from(desc)[1]
    step = -(-len(src) // 4) + 4095 & ~4095  # cma.read's page-aligned parts

    def flaky(pid, local, remote, n):
        calls.append(n)
        # the third part refused (by its address: the parts run on threads in any order)
        return real(pid, local, remote, n) and remote != base + 2 * step

    monkeypatch.setattr(cma, "_read_part", flaky)
    assert not cma.read(desc, memoryview(dst))
    assert len(calls) == 4 and sum(calls) == len(src)


@pytest.mark.skipif(not cma.SUPPORTED, reason="process_vm_readv is Linux's")
def test_a_long_cma_read_on_a_busy_host_is_one_part(monkeypatch):
    monkeypatch.setattr(cma, "PART_MIN", 64 << 10)
    monkeypatch.setattr(cma, "_cpus", lambda: 4)
    monkeypatch.setattr(cma, "_room", lambda: False)
    calls = []
    monkeypatch.setattr(cma, "_read_part", lambda pid, local, remote, n: calls.append(n) or True)
    src = np.zeros(1 << 20, dtype=np.uint8)
    assert cma.read(cma.describe(os.getpid(), memoryview(src)), memoryview(src.copy()))
    assert calls == [1 << 20]
