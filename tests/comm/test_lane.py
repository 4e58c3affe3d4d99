"""The same-host lane, compiled and twin alike (the `lane_impl` fixture runs each test on
both): packing into a mailbox slot, matching and copying into a buffer, the futex sleep
and its wake-ups, the announcement of socket packets, and the two writing the same bytes."""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest

from tests.clusters import wait_until
from zpar.comm import lanepy, mailbox
from zpar.comm.mailbox import Mailbox
from zpar.comm.peerwire import HEADER, Kind, PeerSigner

try:
    from zpar.comm import _lane as compiled
except ImportError:  # no C compiler at install: the twin alone
    compiled = None

IMPLS = {"compiled": compiled, "twin": lanepy}
EAGER = int(Kind.EAGER)
pytestmark = pytest.mark.skipif(not mailbox.SUPPORTED, reason="mailboxes are x86-64 only")


@pytest.fixture(params=["compiled", "twin"])
def lane_impl(request):
    mod = IMPLS[request.param]
    if mod is None:
        pytest.skip("the compiled lane was not built (no C compiler at install)")
    return mod


def _pair(sender_mod, receiver_mod, slots=4, slot_size=mailbox.SLOT_SIZE):
    """Rank 1 (sender_mod's lane) writes to rank 0 (receiver_mod's lane) through one box."""
    out = Mailbox.create(slots, slot_size)
    inn = Mailbox.attach(out.path, slots, slot_size)
    tx, rx = sender_mod.Lane(2), receiver_mod.Lane(2)
    tx.set_out(0, out.mapping, slots, slot_size)
    rx.set_in(1, inn.mapping, slots, slot_size)
    return tx, rx, (out, inn)


def _close(tx, rx, boxes):
    tx.close()
    rx.close()
    for b in boxes:
        b.close()


def test_the_compiled_layout_is_the_mailbox_modules():
    if compiled is None:
        pytest.skip("the compiled lane was not built (no C compiler at install)")
    assert compiled.LAYOUT == {
        "head": mailbox.HEAD,
        "header": HEADER.size,
        "eager": EAGER,
        "state": mailbox.O_STATE,
        "sent": mailbox.O_SENT,
        "bell": mailbox.O_BELL,
    }


def test_an_eager_message_lands_in_the_posted_buffer_numbered_and_matched(lane_impl):
    tx, rx, boxes = _pair(lane_impl, lane_impl)
    try:
        a = np.arange(3, dtype=np.float64)
        assert tx.send(0, EAGER, 0, 0, 0, 1, 7, 1, 999, a) == 2  # receiver on its sockets
        assert list(tx.send_seq) == [1, 0]
        got = np.zeros(3)
        assert rx.take_eager(1, 1, 7, got) == -2  # another context: the general path's
        assert rx.take_eager(1, 0, 8, got) == -2  # another tag
        assert rx.take_eager(1, 0, -1, np.zeros(2)) == -4  # does not fit: truncation
        assert rx.take_eager(1, 0, -1, got) == 24
        assert (got == a).all() and rx.last_tag == 7 and rx.last_enc == 0
        assert list(rx.recv_seq) == [0, 1]
        assert rx.take_eager(1, 0, -1, got) == -1  # empty
        tx.send(0, EAGER, 0, 1, 3, 1, 9, 2, 0, b"pickled")
        assert rx.take_eager(1, 0, 9, None) == 7
        assert rx.last_payload == b"pickled" and rx.last_enc == 1 and rx.last_acks == 3
    finally:
        _close(tx, rx, boxes)


def test_a_general_packet_is_taken_whole_and_decodes_as_the_socket_would(lane_impl):
    tx, rx, boxes = _pair(lane_impl, lane_impl)
    try:
        tx.send(0, int(Kind.ACK), 0, 0, 0, 1, 0, 0, 4, None)
        tx.send(0, int(Kind.DATA), 1, 1, 2, 1, 5, 77, 3, b"abc")
        assert rx.peek(1) == (HEADER.size, 0)
        assert rx.take_eager(1, 0, -1, None) == -2  # not EAGER: left for the general path
        s = PeerSigner(b"")
        ack = s.unpack([rx.take(1)], signed=False)
        data = s.unpack([rx.take(1)], signed=False)
        assert (ack.kind, ack.arg, ack.seq) == (Kind.ACK, 4, 0)
        assert (data.kind, data.ctx, data.enc, data.acks, data.tag, data.msgid) == (
            Kind.DATA, 1, 1, 2, 5, 77,
        )  # fmt: skip
        assert bytes(data.payload) == b"abc" and data.seq == 1
        assert rx.take(1) is None
    finally:
        _close(tx, rx, boxes)


def test_a_packet_numbered_ahead_waits_for_the_socket(lane_impl):
    tx, rx, boxes = _pair(lane_impl, lane_impl)
    try:
        tx.send_seq[0] = 1  # packet 0 went through the socket
        tx.send(0, EAGER, 0, 0, 0, 1, 0, 0, 0, b"x")
        assert rx.take(1) is None and rx.take_eager(1, 0, -1, None) == -2
        rx.recv_seq[1] = 1  # the socket's packet 0 was taken
        assert rx.take_eager(1, 0, -1, None) == 1
    finally:
        _close(tx, rx, boxes)


def test_a_full_mailbox_or_an_oversized_packet_is_refused_unnumbered(lane_impl):
    tx, rx, boxes = _pair(lane_impl, lane_impl, slots=2, slot_size=64)
    try:
        assert tx.send(0, EAGER, 0, 0, 0, 1, 0, 0, 0, b"x" * 40) == 0  # 4 + 36 + 40 > 64
        assert tx.send(0, EAGER, 0, 0, 0, 1, 0, 0, 0, b"a")
        assert tx.send(0, EAGER, 0, 0, 0, 1, 0, 0, 0, b"b")
        assert tx.send(0, EAGER, 0, 0, 0, 1, 0, 0, 0, b"c") == 0
        assert list(tx.send_seq) == [2, 0] and tx.unread_out(0) == 2
    finally:
        _close(tx, rx, boxes)


@pytest.mark.parametrize("direction", ["compiled->twin", "twin->compiled"])
def test_compiled_and_twin_write_the_same_bytes(direction):
    if compiled is None:
        pytest.skip("the compiled lane was not built (no C compiler at install)")
    a, b = (compiled, lanepy) if direction == "compiled->twin" else (lanepy, compiled)
    tx, rx, boxes = _pair(a, b)
    try:
        tx.send(0, EAGER, 1, 0, 0, 1, 3, 5, 0, np.array([1.5]))
        tx.send(0, int(Kind.FIN), 0, 0, 0, 1, 0, 0, 0, None)
        got = np.zeros(1)
        assert rx.take_eager(1, 1, 3, got) == 8 and got[0] == 1.5
        assert PeerSigner(b"").unpack([rx.take(1)], signed=False).kind == Kind.FIN
    finally:
        _close(tx, rx, boxes)


def test_a_wait_times_out_asleep_and_a_send_wakes_it(lane_impl):
    tx, rx, boxes = _pair(lane_impl, lane_impl)
    try:
        rx.set_state(mailbox.ST_BUSY)
        assert rx.wait(0, 50_000_000) == 0 and rx.last_slept
        woke = []

        def sender():
            # once the reader is seen asleep on its bell, however the host schedules us
            wait_until(lambda: boxes[0].receiver_state == mailbox.ST_SLEEPING, "the reader asleep")
            woke.append(tx.send(0, EAGER, 0, 0, 0, 1, 0, 0, 0, b"ping"))

        th = threading.Thread(target=sender)
        th.start()
        assert rx.wait(1000, 20_000_000_000) == 1  # asleep until the send rang its bell
        th.join()
        assert woke == [1] and rx.last_slept  # BUSY / SLEEPING: no wake-up frame needed
        assert rx.take_eager(1, 0, -1, None) == 4
    finally:
        _close(tx, rx, boxes)


def test_a_wait_spins_with_room_yields_without_then_sleeps(lane_impl):
    """The phase of a wait before the futex: the pause-spin while the host's runnable tasks
    fit its CPUs (host_cpus as large as can be: always room), else the sched_yield calls,
    else straight to sleep; each bounded, each counted."""
    tx, rx, boxes = _pair(lane_impl, lane_impl)
    ROOM, YIELD = 2, 3  # Lane.last_phase (_lane.pyx's PH_*)
    try:
        rx.set_state(mailbox.ST_BUSY)
        rx.spin_room_ns, rx.host_cpus, rx.yield_ns = 5_000_000, 1 << 30, 1_000_000
        t = time.monotonic()
        assert rx.wait(0, 1_000_000) == 0  # 5 ms spin, then 1 ms asleep
        assert time.monotonic() - t >= 0.005
        assert rx.last_phase == ROOM and rx.last_slept
        assert rx.room_waits == 1 and rx.yield_waits == 0 and rx.sleeps == 1
        assert rx.running_tasks() >= 1  # this process is running: /proc/loadavg says so

        rx.host_cpus = 0  # no CPU for anyone: no room, so it yields
        assert rx.wait(0, 1_000_000) == 0
        assert rx.last_phase == YIELD and rx.yield_waits == 1 and rx.sleeps == 2

        def sender():
            time.sleep(0.05)  # the wait has begun (its spin: 2 s), unless the host stalled us
            tx.send(0, EAGER, 0, 0, 0, 1, 0, 0, 0, b"ping")

        rx.host_cpus, rx.yield_ns = 1 << 30, 0
        rx.spin_room_ns = 2_000_000_000  # the packet comes during the spin: no sleep
        for _ in range(5):  # a wait that began after the packet came never spun: again
            th = threading.Thread(target=sender)
            th.start()
            assert rx.wait(0, 10_000_000_000) == 1 and not rx.last_slept
            th.join()
            assert rx.take_eager(1, 0, -1, None) == 4
            if rx.last_phase == ROOM:
                break
        assert rx.last_phase == ROOM and rx.sleeps == 2

        rooms = rx.room_waits
        rx.spin_room_ns = rx.yield_ns = 0  # neither: asleep at once
        assert rx.wait(0, 1_000_000) == 0 and rx.last_slept and rx.last_phase == 0
        assert rx.room_waits == rooms and rx.yield_waits == 1 and rx.sleeps == 3
    finally:
        _close(tx, rx, boxes)


def test_a_long_wait_sleeps_at_once_whatever_the_room(lane_impl):
    """wait(-1, ...): a long message's sender waiting for its reader neither spins nor
    yields, even with room, so a split read has the CPUs; a packet is still seen."""
    tx, rx, boxes = _pair(lane_impl, lane_impl)
    try:
        rx.set_state(mailbox.ST_BUSY)
        rx.spin_room_ns, rx.host_cpus, rx.yield_ns = 5_000_000_000, 1 << 30, 1_000_000_000
        assert rx.wait(-1, 1_000_000) == 0  # not 5 s of spin: asleep at once, 1 ms
        assert rx.last_slept and rx.last_phase == 0
        assert rx.room_waits == rx.yield_waits == 0 and rx.sleeps == 1
        tx.send(0, EAGER, 0, 0, 0, 1, 0, 0, 0, b"done")
        assert rx.wait(-1, 1_000_000) == 1 and not rx.last_slept
        assert rx.take_eager(1, 0, -1, None) == 4
    finally:
        _close(tx, rx, boxes)


def test_a_packet_sent_through_the_socket_is_announced(lane_impl):
    tx, rx, boxes = _pair(lane_impl, lane_impl)
    try:
        rx.set_state(mailbox.ST_BUSY)
        assert rx.wait(0, 0) == 0
        tx.send_seq[0] += 1  # what PeerLinks.send does for a packet too big for a slot
        tx.note_socket_send(0)
        assert rx.wait(0, 1_000_000_000) == 2 and not rx.last_slept
        rx.recv_seq[1] = 1  # taken from the socket
        assert rx.wait(0, 0) == 0
    finally:
        _close(tx, rx, boxes)


def test_a_wait_for_one_peer_ignores_the_others(lane_impl):
    out2 = Mailbox.create()
    in2 = Mailbox.attach(out2.path)
    tx, rx, boxes = _pair(lane_impl, lane_impl)
    other = lane_impl.Lane(3)
    rx3 = lane_impl.Lane(3)
    try:
        rx3.set_in(1, boxes[1].mapping, mailbox.SLOTS, mailbox.SLOT_SIZE)
        rx3.set_in(2, in2.mapping, mailbox.SLOTS, mailbox.SLOT_SIZE)
        other.set_out(0, out2.mapping, mailbox.SLOTS, mailbox.SLOT_SIZE)
        other.send(0, EAGER, 0, 0, 0, 2, 0, 0, 0, b"from 2")
        assert rx3.wait(0, 0) == 1
        assert rx3.wait(0, 20_000_000, 1) == 0  # only rank 1's mailbox counts
        assert rx3.take_eager(2, 0, -1, None) == 6 and rx3.last_src == 2
    finally:
        other.close()
        rx3.close()
        _close(tx, rx, boxes)
        out2.close()
        in2.close()


def test_bad_buffers_are_refused_before_anything_is_sent(lane_impl):
    tx, rx, boxes = _pair(lane_impl, lane_impl)
    try:
        with pytest.raises((TypeError, ValueError, BufferError)):
            tx.send(0, EAGER, 0, 0, 0, 1, 0, 0, 0, np.zeros((4, 4))[:, 1])  # not contiguous
        assert list(tx.send_seq) == [0, 0] and tx.unread_out(0) == 0
        tx.send(0, EAGER, 0, 0, 0, 1, 0, 0, 0, b"12345678")
        ro = np.zeros(1)
        ro.flags.writeable = False
        with pytest.raises((TypeError, ValueError, BufferError)):
            rx.take_eager(1, 0, -1, ro)
        assert rx.take_eager(1, 0, -1, np.zeros(1)) == 8  # still there
    finally:
        _close(tx, rx, boxes)


def test_recv_object_unpickles_or_says_why_not(lane_impl):
    import pickle

    tx, rx, boxes = _pair(lane_impl, lane_impl)
    try:
        rx.futex_mode = True
        tx.send(0, EAGER, 0, 1, 0, 1, 3, 0, 0, pickle.dumps({"x": 1}))
        tx.send(0, EAGER, 0, 0, 0, 1, 3, 0, 0, b"raw bytes")
        assert rx.recv_object(1, 4, 0, 0) is lane_impl.NOT_TAKEN  # another tag
        assert rx.recv_object(1, 3, 0, 0) == {"x": 1} and rx.last_n > 0
        assert rx.recv_object(1, 3, 0, 0) is lane_impl.RAW and rx.last_n == 9
        assert rx.recv_object(1, 3, 0, 1_000_000) is lane_impl.NOT_TAKEN  # nothing came
        assert rx.recv_object(0, 3, 0, 0) is lane_impl.NOT_TAKEN  # no mailbox from rank 0
    finally:
        _close(tx, rx, boxes)


def test_the_compiled_combine_is_numpys():
    """Lane.allreduce's C combine gives numpy's ufunc results bit for bit: NaNs win MAX and
    MIN, ties of signed zeros go to the higher operand, integers wrap."""
    if compiled is None:
        pytest.skip("the compiled lane was not built (no C compiler at install)")
    ufuncs = {"SUM": np.add, "PROD": np.multiply, "MAX": np.maximum, "MIN": np.minimum}
    for op, k in lanepy.COMBINE_OPS.items():
        for dt, d in lanepy.COMBINE_DTYPES.items():
            rng = np.random.default_rng(k * 8 + d)
            lo = (rng.standard_normal(11) * 1e8).astype(dt)
            hi = (rng.standard_normal(11) * 1e8).astype(dt)
            if lo.dtype.kind == "f":
                lo[:4], hi[:4] = [np.nan, 1.0, -0.0, 0.0], [1.0, np.nan, 0.0, -0.0]
            else:
                info = np.iinfo(lo.dtype)
                lo[:2], hi[:2] = [info.max, info.min], [info.max, -1]  # wrap both ways
            out = np.empty_like(lo)
            compiled.combine(k * 8 + d, lo, hi, out)
            with np.errstate(over="ignore"):
                want = ufuncs[op](lo, hi)
            assert out.tobytes() == want.tobytes(), (op, dt)
    assert compiled.COMBINE_OPS == lanepy.COMBINE_OPS
    assert compiled.COMBINE_DTYPES == lanepy.COMBINE_DTYPES
    with pytest.raises(ValueError, match="combine"):
        compiled.combine(8 + 1, np.zeros(2), np.zeros(3), np.zeros(2))


def _ring_of_two(mod0, mod1):
    """Ranks 0 and 1 (lanes of mod0 and mod1), a mailbox each way, waiting on futexes."""
    a, b = Mailbox.create(), Mailbox.create()  # a: 0 -> 1, b: 1 -> 0
    a_in, b_in = Mailbox.attach(a.path), Mailbox.attach(b.path)
    l0, l1 = mod0.Lane(2), mod1.Lane(2)
    l0.rank, l1.rank = 0, 1
    l0.set_out(1, a.mapping, mailbox.SLOTS, mailbox.SLOT_SIZE)
    l1.set_in(0, a_in.mapping, mailbox.SLOTS, mailbox.SLOT_SIZE)
    l1.set_out(0, b.mapping, mailbox.SLOTS, mailbox.SLOT_SIZE)
    l0.set_in(1, b_in.mapping, mailbox.SLOTS, mailbox.SLOT_SIZE)
    for lane in (l0, l1):
        lane.futex_mode = True
        lane.set_state(mailbox.ST_BUSY)
    return l0, l1, (a, b, a_in, b_in)


@pytest.mark.parametrize("pair", ["compiled", "twin", "mixed"])
def test_an_allreduce_in_one_call_each_side_across_lanes(pair):
    """Two ranks' Lane.allreduce (compiled, twin, or one of each) exchange and combine in
    one call each, the lower rank's operand first; a blocked peer stops it before its
    send (round 0, nothing sent) for the Python rounds to go on."""
    if compiled is None and pair != "twin":
        pytest.skip("the compiled lane was not built (no C compiler at install)")
    mods = {"compiled": (compiled, compiled), "twin": (lanepy, lanepy), "mixed": (compiled, lanepy)}
    l0, l1, boxes = _ring_of_two(*mods[pair])
    sum_f8 = lanepy.COMBINE_OPS["SUM"] * 8 + lanepy.COMBINE_DTYPES["<f8"]
    max_i4 = lanepy.COMBINE_OPS["MAX"] * 8 + lanepy.COMBINE_DTYPES["<i4"]
    try:
        for code, x0, x1, want in (
            (
                sum_f8,
                np.array([0.1, 2.0]),
                np.array([0.2, -1.0]),
                np.array([0.1, 2.0]) + [0.2, -1.0],
            ),
            (max_i4, np.array([5, -7], np.int32), np.array([3, 9], np.int32), [5, 9]),
        ):
            got0, out = np.empty_like(x0), {}

            def rank0(x0=x0, got0=got0, code=code, out=out):
                out[0] = l0.allreduce(x0, got0, 2, 7, 1, code, 10_000_000_000)

            th = threading.Thread(target=rank0)
            th.start()
            assert l1.allreduce(x1, np.empty_like(x1), 2, 7, 1, code, 10_000_000_000) == -1
            th.join()
            assert out[0] == -1
            assert x0.tobytes() == x1.tobytes() == np.asarray(want, x0.dtype).tobytes()
        l0.block(1, True)
        assert l0.allreduce(np.ones(1), np.ones(1), 2, 8, 1, sum_f8, 0) == 0
        assert l1.unread_out(0) == 0 and l0.unread_out(1) == 0  # nothing sent
        assert l0.allreduce(np.ones(1), np.ones(2), 2, 8, 1, sum_f8, 0) == 0  # sizes differ
    finally:
        l0.close()
        l1.close()
        for b in boxes:
            b.close()


class _Float(float):
    """A float subclass: pickled by pickle itself, never by the lane's own writer."""


#: what send_object pickles itself (its exact types), their edges, and what it leaves to pickle
OBJECTS = [
    None,
    True,
    False,
    0,
    1,
    255,
    256,
    65535,
    65536,
    -1,
    2**31 - 1,
    -(2**31),
    2**31,
    -(2**31) - 1,
    2**70,
    1.0,
    -0.0,
    0.1,
    float("inf"),
    float("-inf"),
    1e308,
    5e-324,
    _Float(2.5),
    "text",
    b"bytes",
    (1, 2.0),
    {"x": [1]},
    np.float64(3.0),
]


def _same(a, b):
    if isinstance(a, float) and a != a:
        return isinstance(b, float) and b != b
    return type(a) is type(b) and a == b and repr(a) == repr(b)  # -0.0 and 0.0 differ


@pytest.mark.parametrize("pair", ["compiled", "twin", "compiled->twin", "twin->compiled"])
def test_send_object_writes_pickles_bytes_and_recv_object_reads_them_back(pair):
    """send_object's packet holds exactly pickle.dumps(obj, 5) (the lane's own writer for
    None, bools, floats and 32-bit ints is pickle's bytes), and recv_object gives back the
    object pickle.loads gives, its type and sign included, from either lane."""
    if compiled is None and pair != "twin":
        pytest.skip("the compiled lane was not built (no C compiler at install)")
    mods = {
        "compiled": (compiled, compiled),
        "twin": (lanepy, lanepy),
        "compiled->twin": (compiled, lanepy),
        "twin->compiled": (lanepy, compiled),
    }[pair]
    tx, rx, boxes = _pair(*mods)
    tx.rank = 1
    rx.futex_mode = True
    rx.set_state(mailbox.ST_BUSY)
    try:
        for obj in OBJECTS + [float("nan")]:
            assert tx.send_object(0, obj, 7, 0) == 1 and tx.last_pickle is None
            n, _ = rx.peek(1)
            raw = rx.take(1)
            assert raw[HEADER.size :] == pickle.dumps(obj, 5), obj
            assert len(raw) == n
            assert tx.send_object(0, obj, 7, 0) == 1
            got = rx.recv_object(1, 7, 0, 0)
            assert _same(got, pickle.loads(pickle.dumps(obj, 5))), (obj, got)
            assert rx.last_tag == 7 and rx.last_n == len(pickle.dumps(obj, 5))
    finally:
        _close(tx, rx, boxes)


def test_send_object_not_taken_leaves_its_pickle_for_the_general_path(lane_impl):
    tx, rx, boxes = _pair(lane_impl, lane_impl, slots=2, slot_size=64)
    tx.rank = 1
    rx.set_state(mailbox.ST_BUSY)
    try:
        assert tx.send_object(1, 1.0, 0, 0) == 0 and tx.last_pickle is None  # no mailbox
        big = "x" * 100  # 4 + 36 + its pickle > 64
        assert tx.send_object(0, big, 0, 0) == 0 and tx.last_pickle == pickle.dumps(big, 5)
        assert tx.send_object(0, 1.5, 0, 0) == 1 and tx.send_object(0, 7, 0, 0) == 1
        assert tx.send_object(0, 2.5, 0, 0) == 0  # full: the small writer's bytes, kept
        assert tx.last_pickle == pickle.dumps(2.5, 5)
        tx.block(0, True)
        assert tx.send_object(0, 1.0, 0, 0) == 0 and tx.last_pickle is None
        assert list(tx.send_seq) == [2, 0]
        with pytest.raises((pickle.PicklingError, TypeError, AttributeError)):
            tx.block(0, False)
            tx.send_object(0, lambda: 0, 0, 0)  # unpicklable: pickle's own error
    finally:
        _close(tx, rx, boxes)


def test_recv_object_consumes_a_bad_pickle_before_raising(lane_impl):
    """A pickle that fails to load raises from recv_object, and the packet is gone: the
    next receive gets the next message."""
    tx, rx, boxes = _pair(lane_impl, lane_impl)
    rx.futex_mode = True
    try:
        tx.send(0, EAGER, 0, 1, 0, 1, 3, 0, 0, b"\x80\x05\x95\xff")  # truncated
        tx.send(0, EAGER, 0, 1, 0, 1, 3, 0, 0, pickle.dumps(4.5, 5))
        with pytest.raises(Exception):  # noqa: B017 - pickle's own error, whichever it is
            rx.recv_object(1, 3, 0, 0)
        assert rx.recv_object(1, 3, 0, 0) == 4.5
        assert rx.recv_object(1, 3, 0, 0) is lane_impl.NOT_TAKEN  # nothing left
    finally:
        _close(tx, rx, boxes)


def test_the_compiled_small_pickles_are_pickles_own_both_ways():
    """The compiled writer and reader of small pickles: pickle.dumps(obj, 5)'s bytes for
    exactly None, bools, floats and 32-bit ints, read back without pickle (NaN's bits and
    -0.0's sign kept); anything else is left to pickle either way."""
    if compiled is None:
        pytest.skip("the compiled lane was not built (no C compiler at install)")
    import struct

    small = [None, True, False, 0, 1, 255, 256, 65535, 65536, -1, -256, 2**31 - 1, -(2**31)]
    small += [1.0, -0.0, 0.1, float("inf"), float("-inf"), 1e308, 5e-324, float("nan")]
    small += [struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000123))[0]]  # a NaN payload
    for obj in small:
        data = pickle.dumps(obj, 5)
        assert compiled.dumps_small(obj) == data, obj
        got = compiled.loads_small(data)
        assert type(got) is type(obj) and repr(got) == repr(obj), (obj, got)
        if isinstance(obj, float):
            assert struct.pack("<d", got) == struct.pack("<d", obj)
    for obj in [2**31, -(2**31) - 1, 2**70, _Float(2.5), np.float64(3.0), "x", b"", (1,), 1j]:
        assert compiled.dumps_small(obj) is None, obj
        assert compiled.loads_small(pickle.dumps(obj, 5)) is compiled.NOT_TAKEN, obj
    for bad in [
        b"",
        b"\x80\x05",
        b"\x80\x04K\x01.",
        b"\x80\x05K\x01",
        b"\x80\x05G.",
        pickle.dumps(1.0, 5)[:-1] + b"\x00",
        pickle.dumps(1.0, 4),
    ]:
        got = compiled.loads_small(bad)
        assert got is compiled.NOT_TAKEN or got == pickle.loads(bad), bad
