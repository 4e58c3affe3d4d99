"""client.request.PendingTable: the requests a client awaits, sans sockets. A request leaves
the table when its last reply comes, its engine dies, the controller is lost, or it is
withdrawn unsent; leaving lets its window send the next held one."""

from __future__ import annotations

import pytest

from zpar.client.request import PendingRequest, PendingTable
from zpar.client.window import Windows
from zpar.errors import ControllerLost, EngineError, RemoteError, SchedulerLost, TaskAborted
from zpar.wire import Session

KEY = b"request-test-key"
SESSION = Session(KEY)


def _request(channel="task", uuid=None, windowed=False, broadcast=None, resend=False):
    header, frames = SESSION.serialize("apply_request", {}, buffers=[b"call"])
    return PendingRequest(
        header["msg_id"],
        channel,
        frames,
        engine_uuid=uuid,
        windowed=windowed,
        broadcast=broadcast,
        resend=resend,
    )


def test_a_reply_answers_a_request_and_forgets_it():
    table = PendingTable(Windows())
    r = _request("mux", uuid="e1")
    table.add(r)
    assert table.get(r.msg_id) is r and table.owed_by("e1")
    table.answered(r, r.future)
    assert table.get(r.msg_id) is None and not table.owed_by("e1") and r.frames is None


def test_a_broadcast_stays_until_every_engine_replied():
    table = PendingTable(Windows())
    r = _request(broadcast=["e1", "e2"])
    table.add(r)
    table.answered(r, r.replies["e1"])
    assert table.get(r.msg_id) is r and table.owed_by("e2") and not table.owed_by("e1")
    table.answered(r, r.replies["e2"])
    assert table.get(r.msg_id) is None


def test_an_element_part_is_matched_to_its_request():
    table = PendingTable(Windows())
    r = _request()
    table.add(r)
    from zpar.elements import PART_SEP

    assert table.of_reply(f"{r.msg_id}{PART_SEP}3") is r
    assert table.of_reply("unknown") is None


def test_outstanding_msg_ids_name_an_element_requests_unanswered_elements():
    """ipyparallel's Client.outstanding holds a default map's tasks, one per element: the
    table names an element request's (zpar.elements) elements by element id, each until a
    part answers it; other requests by their msg_id."""
    from types import SimpleNamespace

    from zpar.elements import ELEMENTS, element_id

    table = PendingTable(Windows())
    header, frames = SESSION.serialize("apply_request", {}, buffers=[b"call"])
    m = header["msg_id"]
    r = PendingRequest(m, "task", frames, elements=4)
    other = _request("mux", uuid="e1")
    table.add(r)
    table.add(other)
    assert table.msg_ids() == {other.msg_id, *(element_id(m, i) for i in range(4))}
    r.parts.add(SimpleNamespace(content={"status": "ok", ELEMENTS: [1, 3]}, metadata={}))
    assert table.msg_ids() == {other.msg_id, element_id(m, 0), element_id(m, 3)}
    table.answered(other, other.future)
    assert table.msg_ids() == {element_id(m, 0), element_id(m, 3)}


def test_an_engine_death_fails_what_it_owed_and_names_the_outcomes_to_report():
    table = PendingTable(Windows())
    mine, other, watched = _request("mux", "e1"), _request("mux", "e2"), _request("mux", "e1")
    watched.report_outcome = True
    for r in (mine, other, watched):
        table.add(r)
    assert table.engine_died(1, "e1", "killed") == [watched.msg_id]
    error = mine.future.exception()
    assert isinstance(error, EngineError) and isinstance(error, RemoteError)
    assert "engine 1 (e1) died" in str(error) and "killed" in str(error)
    assert table.get(mine.msg_id) is None and table.get(other.msg_id) is other


def test_answering_lets_the_window_send_the_next_held_request():
    table = PendingTable(Windows(limit=1))
    first, second = _request(windowed=True), _request(windowed=True)
    for r in (first, second):
        table.add(r)
    assert table.windows.offer(first) and not table.windows.offer(second)
    table.answered(first, first.future)
    assert list(table.admitted) == [second]


def test_withdrawn_requests_fail_as_aborted_and_are_never_sent():
    table = PendingTable(Windows(limit=1))
    first, held = _request(windowed=True), _request(windowed=True)
    for r in (first, held):
        table.add(r)
        table.windows.offer(r)
    assert table.withdraw(None) == [held.msg_id]
    with pytest.raises(TaskAborted):
        held.future.result(0)
    assert table.get(held.msg_id) is None and table.get(first.msg_id) is first


def test_a_restarted_scheduler_gets_the_tasks_with_retries_the_others_fail():
    table = PendingTable(Windows())
    retried, plain, queued = _request(resend=True), _request(), _request()
    for r in (retried, plain, queued):
        table.add(r)
    retried.sent = plain.sent = 1.0  # queued is not sent yet: it goes to the new one
    resend, failed = table.scheduler_restarted("the task scheduler died")
    assert resend == [retried] and failed == 1
    assert isinstance(plain.future.exception(), SchedulerLost)
    assert table.get(queued.msg_id) is queued and table.get(retried.msg_id) is retried


def test_a_lost_controller_fails_everything_held_ones_too():
    table = PendingTable(Windows(limit=1))
    sent, held = _request(windowed=True), _request(windowed=True)
    for r in (sent, held):
        table.add(r)
        table.windows.offer(r)
    table.fail_all(ControllerLost("gone"))
    assert all(isinstance(r.future.exception(), ControllerLost) for r in (sent, held))
    assert not table.requests and table.windows.held() == 0
