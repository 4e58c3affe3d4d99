"""Aborts of single elements of a load-balanced map in the task book, in memory
(schedulers/elements.py ``abort_elements`` / ``cut``): each element is a task of its own, as
ipyparallel's chunksize=1 map, so an abort naming some aborts just those; the others run.
"""

from __future__ import annotations

import pytest

from tests.schedulers.bookrig import BookRig
from tests.schedulers.test_elements import A, B, Clock, book_of, part, request, sends, take
from zpar.schedulers.book import QUEUED, WAITING
from zpar.schedulers.elements import EARLY_ABORTS, runs_of
from zpar.schedulers.events import ClientGone
from zpar.schedulers.instructions import (
    AnswerAbort,
    FailTask,
    Refuse,
    RevokeTasks,
)
from zpar.wire.messages import AbortRequest, ReplyStatus, abort_positions


def abort(book: BookRig, client: bytes = b"client", msg_ids=(), **positions) -> AnswerAbort:
    content = AbortRequest(list(msg_ids), {k: list(v) for k, v in positions.items()} or None)
    book.abort(client, {"msg_id": "ab"}, content.as_dict())
    (answer,) = [i for i in book.out if isinstance(i, AnswerAbort)]
    book.out.remove(answer)
    return answer


def fails(book: BookRig) -> list[tuple[str, list[int] | None, str]]:
    """The FailTasks out (taken), the other instructions left for the test."""
    out = [f for f in book.out if isinstance(f, FailTask)]
    for f in out:
        book.out.remove(f)
    return [(f.header["msg_id"], f.elements, f.status) for f in out]


def busy(book: BookRig) -> None:
    """Both engines of ``book`` (hwm=1) busy with a task of their own."""
    book.submission(b"client", request("x", 1))
    book.submission(b"client", request("y", 1))
    sends(book)


def test_runs_of_cuts_a_range_at_the_positions_named():
    assert runs_of(0, 6, {2, 3}) == [(0, 2, False), (2, 4, True), (4, 6, False)]
    assert runs_of(0, 3, {0, 2}) == [(0, 1, True), (1, 2, False), (2, 3, True)]
    assert runs_of(4, 6, {1, 9}) == [(4, 6, False)]  # none within: one run, kept
    assert runs_of(0, 4, None) == [(0, 4, True)]  # the whole map aborted
    assert runs_of(3, 3, {3}) == [] and runs_of(3, 3, None) == []


def test_a_queued_map_loses_just_the_elements_named_and_the_rest_runs():
    book = book_of(Clock(), hwm=1)
    busy(book)
    book.submission(b"client", request("m", 6))
    assert book.live["m"].state == QUEUED
    answer = abort(book, m=[2, 3])
    assert answer.aborted == ["m#2", "m#3"]
    ((msg_id, elements, status),) = fails(book)
    assert elements == [2, 4] and status == ReplyStatus.ABORTED
    assert msg_id == "m"  # answered under its request's header, as every part
    assert "m" not in book.live
    queued = sorted(t.elements for t in book.live.values() if t.msg_id.startswith("m#"))
    assert queued == [[0, 2], [4, 6]]  # still queued, each a part of its own
    # the engines come free: the two runs are placed and answered, the map ends
    book.reply(A, b"client", part("x", 0, 1, final=True))
    book.reply(B, b"client", part("y", 0, 1, final=True))
    placed = {m: (e, el) for m, e, el in sends(book)}
    assert sorted(el for _, el in placed.values()) == [[0, 2], [4, 6]]
    for msg_id, (engine, (lo, hi)) in placed.items():
        book.reply(engine, b"client", part(msg_id, lo, hi, final=True))
    assert not book.live and not book.elements.placements and not book.elements.aborting


def test_elements_on_an_engine_are_asked_back_and_only_those_named_fail():
    book = book_of(Clock(), hwm=2)
    book.submission(b"client", request("m", 8, targets=None))
    sends(book)
    book.reply(A, b"client", part("m", 0, 2))  # 0, 1 done; 2 runs
    take(book)
    answer = abort(book, m=[5])
    assert answer.aborted == []  # on an engine: answered when it gives them back
    (revoke,) = take(book, RevokeTasks)
    assert revoke.tails == {"m": 0} and revoke.msg_ids == ["m"]
    book.revoked(A, [], {"m": [3, 8]})  # 2 ran on; 3..7 given back
    assert [e for _, e, _ in fails(book)] == [[5, 6]]
    again = sorted(t.elements for t in book.live.values() if t.msg_id != "m")
    assert again == [[3, 5], [6, 8]]
    book.reply(A, b"client", part("m", 2, 3, final=True))
    placed = sends(book)
    assert sorted(el for _, _, el in placed) == [[3, 5], [6, 8]]
    for msg_id, engine, (lo, hi) in placed:
        book.reply(engine, b"client", part(msg_id, lo, hi, final=True))
    assert not book.live and not book.elements.placements and not book.elements.aborting


def test_an_element_never_started_on_its_engine_comes_back_cut():
    book = book_of(Clock(), hwm=2)
    book.submission(b"client", request("first", 1, targets=None))
    book.submission(b"client", request("second", 1, targets=None))
    book.submission(b"client", request("m", 4, targets=None))  # prefetched behind one
    sends(book)
    on = book.live["m"].engine.uuid
    take(book)
    abort(book, m=[0])
    (revoke,) = take(book, RevokeTasks)
    assert revoke.msg_ids == ["m"]
    book.revoked(on, ["m"], {})  # never started there: all of it back
    assert [e for _, e, _ in fails(book)] == [[0, 1]]
    assert sorted(t.elements for t in book.live.values() if t.msg_id.startswith("m#")) == [[1, 4]]


def test_elements_already_answered_or_running_are_left_alone():
    book = book_of(Clock(), hwm=2)
    book.submission(b"client", request("m", 8, targets=None))
    sends(book)
    book.reply(A, b"client", part("m", 0, 4))
    take(book)
    answer = abort(book, m=[1, 3])  # answered: nothing to ask back, nothing fails
    assert answer.aborted == [] and not take(book, RevokeTasks) and not fails(book)
    assert book.live["m"].elements == [4, 8]
    book.reply(A, b"client", part("m", 4, 8, final=True))
    assert not book.live and not book.elements.aborting


def test_an_abort_before_its_map_arrives_applies_when_it_comes():
    book = book_of(Clock(), hwm=1)
    busy(book)
    assert abort(book, m=[1]).aborted == []  # the request is still in its client's window
    book.submission(b"client", request("m", 3))
    assert [e for _, e, _ in fails(book)] == [[1, 2]]
    assert sorted(t.elements for t in book.live.values() if t.msg_id.startswith("m#")) == [
        [0, 1],
        [2, 3],
    ]
    assert not book.elements.early


def test_a_map_cut_on_arrival_is_placed_at_once():
    book = book_of(Clock(), hwm=1)
    abort(book, m=[0, 5])
    book.submission(b"client", request("m", 6, targets=None))
    assert sorted(e for _, e, _ in fails(book)) == [[0, 1], [5, 6]]
    assert sorted(el for _, _, el in sends(book)) == [[1, 5]]


def test_a_map_retried_after_its_engine_died_is_cut():
    book = book_of(Clock(), hwm=1)
    book.submission(b"client", request("m", 6, targets=None, retries=1))
    ((_, on, _),) = sends(book)
    book.reply(on, b"client", part("m", 0, 1))
    abort(book, m=[4])
    take(book, RevokeTasks)  # the engine dies before it gives the unstarted ones back
    book.engine_down(on, "gone")
    assert [e for _, e, _ in fails(book)] == [[4, 5]]
    assert sorted(t.elements for t in book.live.values()) == [[1, 4], [5, 6]]


def test_the_aborts_kept_for_maps_not_come_are_bounded():
    book = book_of(Clock(), hwm=1)
    for i in range(EARLY_ABORTS + 10):
        abort(book, **{f"gone{i}": [0]})
    assert len(book.elements.early) == EARLY_ABORTS
    assert (b"client", "gone0") not in book.elements.early


def test_a_gone_clients_names_for_maps_not_come_go_with_it():
    book = book_of(Clock(), hwm=1)
    abort(book, m=[1])
    abort(book, b"other", n=[0])
    book.feed(ClientGone(b"client"))
    assert list(book.elements.early) == [(b"other", "n")]


def test_another_clients_abort_names_elements_too():
    """As a whole task's abort (and ipyparallel's, and the dashboard's): any client may."""
    book = book_of(Clock(), hwm=1)
    busy(book)
    book.submission(b"client", request("m", 4))
    assert abort(book, b"other", m=[1]).aborted == ["m#1"]
    assert [e for _, e, _ in fails(book)] == [[1, 2]]
    assert sorted(t.elements for t in book.live.values() if t.msg_id.startswith("m#")) == [
        [0, 1],
        [2, 4],
    ]


def test_a_map_waiting_for_its_dependencies_is_cut_when_released():
    book = book_of(Clock(), hwm=1)
    book.submission(b"client", request("dep", 1))
    sends(book)
    book.submission(b"client", request("m", 4, after=["dep"]))
    assert book.live["m"].state == WAITING
    assert abort(book, m=[0, 3]).aborted == []  # answered when released
    book.reply(A, b"client", part("dep", 0, 1, final=True))
    assert sorted(e for _, e, _ in fails(book)) == [[0, 1], [3, 4]]
    assert [el for _, _, el in sends(book)] == [[1, 3]]


def test_a_whole_map_aborted_after_some_elements_aborts_all_its_unstarted():
    book = book_of(Clock(), hwm=1)
    busy(book)
    book.submission(b"client", request("m", 6))
    abort(book, m=[1])
    take(book)
    answer = abort(book, msg_ids=["m"])
    assert len(answer.aborted) == 2  # the parts left, by their ids
    assert sorted(e for _, e, _ in fails(book)) == [[0, 1], [2, 6]]
    assert not [t for t in book.live.values() if t.msg_id.startswith("m")]


def test_malformed_positions_are_refused_not_fatal():
    book = book_of(Clock(), hwm=1)
    book.abort(b"client", {"msg_id": "ab"}, {"msg_ids": [], "positions": {"m": ["1"]}})
    (refuse,) = take(book, Refuse)
    assert refuse.reason == "malformed" and "'1'" in refuse.detail


@pytest.mark.parametrize(
    "positions, words",
    [
        (["m"], "positions is list"),
        ({"m": 3}, "maps 'm' to int"),
        ({"m": [1, -1]}, "not positions"),
        ({"m": [True]}, "not positions"),
        ({7: [1]}, "maps 7"),
    ],
)
def test_abort_positions_names_what_is_wrong(positions, words):
    with pytest.raises(ValueError, match=words):
        abort_positions({"msg_ids": [], "positions": positions})


def test_abort_positions_reads_a_request():
    assert abort_positions({"msg_ids": None}) == {}
    assert abort_positions(AbortRequest([], {"m": [2, 0, 2]}).as_dict()) == {"m": {0, 2}}
