"""The client's submission windows (client/window.py), without sockets: how many work
requests (and bytes) a client leaves in the controller, what it holds, in what order."""

from __future__ import annotations

import pytest

from zpar.client.window import Window, Windows, aborted_here, frames_nbytes
from zpar.errors import TaskAborted


class Req:
    """What a window reads of a client.request.PendingRequest."""

    def __init__(self, msg_id, nbytes=10, channel="task", windowed=True):
        self.msg_id = msg_id
        self.frames = [b"x" * nbytes]
        self.channel = channel
        self.windowed = windowed


def offer_all(window, requests):
    return [r.msg_id for r in requests if window.offer(r)]


def test_at_most_limit_requests_in_flight_the_rest_held_in_order():
    w = Window(limit=3, max_bytes=10**6)
    reqs = [Req(f"m{i}") for i in range(7)]
    assert offer_all(w, reqs) == ["m0", "m1", "m2"]
    assert (w.in_flight, w.held) == (3, 4)
    assert [r.msg_id for r in w.answered("m1")] == ["m3"]
    assert [r.msg_id for r in w.answered("m0")] == ["m4"]
    assert w.answered("m0") == []  # a second answer frees nothing
    assert w.answered("never-sent") == []
    assert (w.in_flight, w.held) == (3, 2)
    for m in ("m2", "m3", "m4"):
        w.answered(m)
    assert (w.in_flight, w.held) == (2, 0)


def test_a_new_request_waits_behind_held_ones_even_when_there_is_room():
    # FIFO: a task held here is always sent after every task it may depend on
    w = Window(limit=2, max_bytes=100)
    big, small = Req("big", 80), Req("small", 5)
    assert w.offer(Req("a", 30))
    assert not w.offer(big)  # 30 + 80 > 100
    assert not w.offer(small)  # would fit, but big is older
    assert [r.msg_id for r in w.answered("a")] == ["big", "small"]  # 85 bytes fit


def test_bytes_bound_but_always_at_least_one_request():
    w = Window(limit=100, max_bytes=50)
    assert w.offer(Req("huge", 10_000))  # alone in flight: it goes whatever its size
    assert not w.offer(Req("next", 1))
    assert w.in_flight_bytes == 10_000
    assert [r.msg_id for r in w.answered("huge")] == ["next"]
    assert w.in_flight_bytes == 1


def test_a_chain_longer_than_the_window_is_sent_in_submission_order():
    # task i depends on task i-1: FIFO order sends every task after the one it follows
    w = Window(limit=4, max_bytes=10**6)
    reqs = [Req(f"t{i}") for i in range(50)]
    sent = offer_all(w, reqs)
    while len(sent) < 50:
        sent += [r.msg_id for r in w.answered(sent[len(sent) - 4])]
    assert sent == [f"t{i}" for i in range(50)]


def test_withdraw_takes_held_requests_out_never_to_be_sent():
    w = Window(limit=1, max_bytes=10**6)
    reqs = [Req(f"m{i}") for i in range(5)]
    offer_all(w, reqs)
    assert w.is_held("m2")
    assert [r.msg_id for r in w.withdraw(["m2", "m0", "unknown"])] == ["m2"]  # m0 in flight
    assert not w.is_held("m2")
    assert [r.msg_id for r in w.answered("m0")] == ["m1"]
    assert [r.msg_id for r in w.withdraw(None)] == ["m3", "m4"]
    assert w.held == 0 and w.in_flight == 1


def test_a_held_request_answered_in_its_stead_is_withdrawn():
    # its engine died while it waited here: failed, never to be sent, frees nothing
    w = Window(limit=1, max_bytes=10**6)
    offer_all(w, [Req("a"), Req("b"), Req("c")])
    assert w.answered("b") == []
    assert [r.msg_id for r in w.answered("a")] == ["c"]


def test_reset_forgets_everything_and_returns_the_held():
    w = Window(limit=1, max_bytes=10**6)
    offer_all(w, [Req("a"), Req("b")])
    assert [r.msg_id for r in w.reset()] == ["b"]
    assert (w.in_flight, w.held, w.in_flight_bytes) == (0, 0, 0)
    assert w.offer(Req("c"))


@pytest.mark.parametrize(
    "limit, max_bytes, bad",
    [(0, 10, "window"), (-1, 10, "window"), (True, 10, "window"), (5, 0, "window_bytes")],
)
def test_bad_window_sizes_are_refused_naming_the_value(limit, max_bytes, bad):
    with pytest.raises(ValueError, match=rf"^{bad} must be"):
        Window(limit, max_bytes)


def test_windows_by_channel_and_unwindowed_requests_go_at_once():
    ws = Windows(limit=1, max_bytes=10**6)
    assert ws.offer(Req("t0", channel="task"))
    assert not ws.offer(Req("t1", channel="task"))
    assert ws.offer(Req("d0", channel="mux"))  # its own window
    assert not ws.offer(Req("d1", channel="mux"))
    assert ws.offer(Req("abort", channel="task", windowed=False))
    assert ws.offer(Req("q", channel="query"))
    assert (ws.held(), ws.held("task"), ws.held("mux")) == (2, 1, 1)
    assert [r.msg_id for r in ws.answered(Req("t0", channel="task"))] == ["t1"]
    assert ws.answered(Req("abort", channel="task", windowed=False)) == []
    assert [r.msg_id for r in ws.withdraw(["d1"])] == ["d1"]
    assert [r.msg_id for r in ws.reset()] == []


def test_frames_nbytes_counts_bytes_buffers_and_zmq_frames():
    import numpy as np
    import zmq

    arr = np.zeros(10, dtype="float64")
    assert frames_nbytes([b"abc", memoryview(arr), zmq.Frame(b"12345")]) == 3 + 80 + 5


def test_a_held_abort_reads_as_the_schedulers_abort():
    e = aborted_here("abc")
    assert isinstance(e, TaskAborted)
    assert str(e) == "task abc was aborted before it ran"  # TaskBook.abort's words
