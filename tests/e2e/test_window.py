"""Submission windows (issue 13 item 3, credits): a client leaves at most a window of work in
the controller and holds the rest itself; the task scheduler refuses what a client sends
past its own per-client limit, and stops reading submissions above its queue budget."""

from __future__ import annotations

import os
import time

import pytest
import zmq

import zpar
from tests.clusters import FAST_HB, module_cluster, wait_until
from zpar.dependency import to_wire
from zpar.serialize import pack_apply
from zpar.wire import Session, recv_message
from zpar.wire.messages import MsgType

#: a window far smaller than the work submitted, so most of it waits in the client
WINDOW = 4
#: the scheduler's per-client limit in this module's cluster (a raw client goes past it)
CLIENT_QUEUE = 30


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from module_cluster(
        tmp_path_factory,
        "zpar-window",
        2,
        controller_args=[*FAST_HB, "--client-queue", str(CLIENT_QUEUE)],
        timeout=60,
        log_level="INFO",
        wait_timeout=60,
    )


@pytest.fixture
def small(cluster):
    """A client whose window is WINDOW requests per channel."""
    client = zpar.Client(url_file=cluster.url_file, window=WINDOW)
    client.wait_for_engines(2, timeout=30)
    yield client
    client.close()


def stamp(i, pause=0.0):
    import time

    start = time.time()
    time.sleep(pause)
    return i, start, time.time()


def wait_for(path, limit=60.0):
    import os
    import time

    deadline = time.monotonic() + limit
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.path.exists(path)


def test_a_chain_longer_than_the_window_runs_in_order(small, tmp_path):
    lv = small.load_balanced_view()
    gate = str(tmp_path / "go")
    n = 3 * WINDOW
    ars = [lv.apply_async(wait_for, gate)]
    for i in range(1, n):
        with lv.temp_flags(after=ars[-1]):
            ars.append(lv.apply_async(stamp, i, 0.01))
    # the chain's head waits for the gate: the scheduler has the window, the rest is here
    wait_until(lambda: small._io.windows.held("task") == n - WINDOW, "the chain's tail held")
    open(gate, "w").close()
    assert ars[0].get(timeout=60)
    results = [ar.get(timeout=60) for ar in ars[1:]]
    assert [r[0] for r in results] == list(range(1, n))
    for before, after in zip(results, results[1:], strict=False):
        assert after[1] >= before[2]  # each started after the one it depends on ended
    assert small._io.windows.held() == 0


def test_a_fan_in_over_more_tasks_than_the_window(small):
    lv = small.load_balanced_view()
    parts = [lv.apply_async(stamp, i, 0.01) for i in range(5 * WINDOW)]
    with lv.temp_flags(after=parts):
        total = lv.apply_async(stamp, "all")
    ends = [ar.get(timeout=60)[2] for ar in parts]
    name, start, _ = total.get(timeout=60)
    assert name == "all" and start >= max(ends)


def test_held_tasks_are_aborted_here_counted_unassigned_and_waited_on(small, tmp_path):
    lv = small.load_balanced_view()
    gate = str(tmp_path / "go")
    # fill both engines (2 x hwm 2) and the window with tasks waiting for the gate file
    blockers = [lv.apply_async(wait_for, gate) for _ in range(WINDOW)]
    held = [lv.apply_async(stamp, i) for i in range(3)]
    wait_until(lambda: small._io.windows.held("task") == 3, "three tasks held in the client")
    assert small.queue_status()["unassigned"] >= 3
    assert not held[0].sent and held[0].progress == 0  # still in this client
    assert not small.wait(held, timeout=0.2)  # wait() covers held tasks
    held[1].abort()
    with pytest.raises(zpar.TaskAborted, match=f"task {held[1].msg_ids[0]} was aborted before"):
        held[1].get(timeout=10)
    assert small._io.windows.held("task") == 2
    open(gate, "w").close()
    assert all(ar.get(timeout=60) for ar in blockers)
    assert [held[0].get(timeout=60)[0], held[2].get(timeout=60)[0]] == [0, 2]
    assert small.wait(timeout=30)
    assert not small.outstanding


def test_a_map_over_more_chunks_than_the_window_reports_progress(small):
    lv = small.load_balanced_view()
    ar = lv.map_async(stamp, range(6 * WINDOW), chunksize=1)
    assert [r[0] for r in ar.get(timeout=60)] == list(range(6 * WINDOW))
    assert ar.progress == 6 * WINDOW and ar.sent


def test_direct_requests_past_the_window_wait_in_the_client(small, tmp_path):
    dv = small[small.ids[0]]
    gate = str(tmp_path / "go")
    first = dv.apply_async(wait_for, gate)
    ars = [dv.apply_async(stamp, i) for i in range(5 * WINDOW)]
    # the engine runs one at a time: WINDOW requests are on their way, the rest wait here
    wait_until(
        lambda: small._io.windows.held("mux") == 5 * WINDOW + 1 - WINDOW, "held direct requests"
    )
    ars[-1].abort()  # held here: aborted here, as the engine aborts a queued one
    with pytest.raises(zpar.TaskAborted, match="was aborted before it ran"):
        ars[-1].get(timeout=10)
    open(gate, "w").close()
    assert first.get(timeout=60)
    assert [ar.get(timeout=60)[0] for ar in ars[:-1]] == list(range(5 * WINDOW - 1))
    assert small._io.windows.held() == 0


def test_a_client_ignoring_the_window_gets_one_refusal_per_task_naming_the_limit(cluster):
    """A raw DEALER sends CLIENT_QUEUE + 5 tasks that wait for a task that never comes:
    the scheduler takes CLIENT_QUEUE, refuses 5 (SubmissionRefused naming the limit,
    counted as over_window in the controller's status) and aborts the rest on request."""
    from zpar.cluster.connection import read_connection_file

    info = read_connection_file(cluster.url_file)
    session = Session(info.key)
    rc = cluster.client
    task_addr = rc._io._sockets["task"].getsockopt_string(zmq.LAST_ENDPOINT)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(task_addr)
    try:
        after = to_wire(["a-task-that-never-comes"])
        sent = []
        for _ in range(CLIENT_QUEUE + 5):
            header, frames = session.serialize(
                MsgType.APPLY_REQUEST,
                {},
                metadata={"after": after},
                buffers=pack_apply(stamp, (0,), {}),
                dest="task",
            )
            sock.send_multipart(frames)
            sent.append(header["msg_id"])
        replies = {}
        deadline = time.monotonic() + 60
        while len(replies) < 5 and time.monotonic() < deadline:
            if sock.poll(1000):
                msg = session.feed(recv_message(sock))
                replies[msg.parent_header["msg_id"]] = msg.content
        assert list(replies) == sent[-5:], "the tasks past the limit are the ones refused"
        for content in replies.values():
            assert content["ename"] == "SubmissionRefused"
            assert f"the limit per client is {CLIENT_QUEUE}" in content["evalue"]
        wait_until(
            lambda: rc.controller_status()["refused"].get("scheduler", {}).get("over_window") == 5,
            "5 over_window refusals in the controller's status",
            timeout=30,
        )
        # the tasks it holds are aborted on request: room again for this client
        session.send(sock, MsgType.ABORT_REQUEST, {"msg_ids": None})
        aborted = set()
        while len(aborted) < CLIENT_QUEUE and time.monotonic() < deadline:
            if sock.poll(1000):
                msg = session.feed(recv_message(sock))
                if msg.msg_type != MsgType.ABORT_REPLY:
                    aborted.add(msg.parent_header["msg_id"])
        assert aborted == set(sent[:CLIENT_QUEUE])
    finally:
        sock.close()


def test_above_the_queue_budget_the_scheduler_pauses_reading_and_still_answers(make_cluster):
    """A budget of ~20 tasks: a client submitting 300 at once gets every result (replies
    and engines flow while submissions wait in the client's socket)."""
    c = make_cluster(n=2, controller_args=[*FAST_HB, "--queue-budget", str(20 * 3500)])
    rc = c.client
    rc.wait_for_engines(2, timeout=60)
    lv = rc.load_balanced_view()
    ars = [lv.apply_async(stamp, i) for i in range(300)]
    assert [ar.get(timeout=90)[0] for ar in ars] == list(range(300))
    log = c.launcher._logs[c.launcher.controller.pid]
    wait_until(lambda: "paused reading submissions" in log.read_text(), "a pause logged")
    assert "resumed reading submissions" in log.read_text()
    assert os.path.exists(log)


def test_an_abort_from_a_done_callback_does_not_wait_for_its_own_thread(small, tmp_path):
    # done-callbacks run in the client's I/O thread: aborting the held tasks from one
    # must not wait for that thread to run the abort
    lv = small.load_balanced_view()
    gate = str(tmp_path / "go")
    first = lv.apply_async(stamp, "first")
    blockers = [lv.apply_async(wait_for, gate) for _ in range(WINDOW)]
    held = [lv.apply_async(stamp, i) for i in range(3)]
    aborted = []
    first.add_done_callback(lambda _: aborted.append(small.abort(held, block=False)))
    first.get(timeout=60)
    wait_until(lambda: aborted, "the callback's abort returned", timeout=30)
    open(gate, "w").close()
    for ar in held:
        with pytest.raises(zpar.TaskAborted):
            ar.get(timeout=60)
    assert all(ar.get(timeout=60) for ar in blockers)
