"""What reaches the task scheduler, checked and made the book's events
(schedulers/intake.py), without sockets: signed frames in, events out, refusals counted."""

from __future__ import annotations

from zpar.constants import REVOKE_SUFFIX
from zpar.elements import TAILS
from zpar.schedulers.events import (
    ClientGone,
    EngineJoined,
    EngineLeft,
    QuotaRefused,
    Replied,
    Revoked,
    Submitted,
)
from zpar.schedulers.intake import Intake
from zpar.schedulers.quota import OVER_WINDOW, QueueQuota
from zpar.wire import Session
from zpar.wire.messages import MsgType

KEY = b"intake-test-key"
CLIENT, ENGINE = b"client-1", b"engine-1"


def _intake(gone: set[bytes] | None = None, per_client: int = 100, live: dict | None = None):
    counted: list[int] = []
    session = Session(KEY)
    intake = Intake(
        session,
        QueueQuota(per_client=per_client, per_client_bytes=10**9, budget=10**12, task_cost=0),
        {} if live is None else live,
        is_gone=lambda c: c in (gone or set()),
        counted=lambda: counted.append(1),
    )
    return intake, session, counted


def _request(sender: Session, msg_type: str = MsgType.APPLY_REQUEST, dest: str = "task"):
    header, frames = sender.serialize(msg_type, {}, dest=dest)
    return header, [CLIENT, *frames]


def test_a_signed_request_is_submitted_and_charged_to_its_client():
    intake, _, _ = _intake()
    header, frames = _request(Session(KEY))
    [event] = intake.submissions(frames)
    assert isinstance(event, Submitted) and event.client == CLIENT
    assert event.msg.header["msg_id"] == header["msg_id"]
    assert intake.quota.holds(header["msg_id"])


def test_a_request_past_the_client_limit_is_refused_and_counted():
    intake, session, _ = _intake(per_client=1)
    sender = Session(KEY)
    first = intake.submissions(_request(sender)[1])
    second = intake.submissions(_request(sender)[1])
    assert isinstance(first[0], Submitted)
    assert isinstance(second[0], QuotaRefused) and "the limit per client is 1" in second[0].why
    assert session.refused[OVER_WINDOW] == 1


def test_duplicates_misrouted_and_other_messages_are_the_books_to_refuse_uncharged():
    live: dict = {}
    intake, session, _ = _intake(per_client=1, live=live)
    sender = Session(KEY)
    header, frames = _request(sender)
    live[header["msg_id"]] = object()  # a live task under this id: the book refuses it
    assert isinstance(intake.submissions(frames)[0], Submitted)
    assert isinstance(intake.submissions(_request(sender, dest="elsewhere")[1])[0], Submitted)
    outcomes = _request(sender, MsgType.TASK_OUTCOMES)[1]
    assert isinstance(intake.submissions(outcomes)[0], Submitted)
    assert intake.quota.of(CLIENT) == (0, 0) and not session.refused


def test_a_forged_request_is_refused_and_makes_no_event():
    intake, session, _ = _intake()
    _, frames = _request(Session(b"another key"))
    assert intake.submissions(frames) == []
    assert sum(session.refused.values()) == 1


def test_a_request_sent_just_before_its_client_closed_is_followed_by_client_gone():
    intake, _, _ = _intake(gone={CLIENT})
    events = intake.submissions(_request(Session(KEY))[1])
    assert [type(e) for e in events] == [Submitted, ClientGone] and events[1].client == CLIENT


def test_an_engine_reply_is_replied_and_counted():
    intake, _, counted = _intake()
    _, reply = Session(KEY).serialize(MsgType.APPLY_REPLY, {"status": "ok"})
    [event] = intake.replies([ENGINE, CLIENT, *reply])
    assert isinstance(event, Replied) and (event.engine, event.client) == (ENGINE, CLIENT)
    assert event.reply.msg_type == MsgType.APPLY_REPLY and counted == [1]


def test_a_reply_without_its_client_ident_is_refused_as_misframed():
    intake, session, counted = _intake()
    _, reply = Session(KEY).serialize(MsgType.APPLY_REPLY, {"status": "ok"})
    assert intake.replies([ENGINE, CLIENT, b"extra", *reply]) == []
    assert session.refused["misframed"] == 1 and counted == []


def test_a_revoke_reply_from_the_signal_socket_is_revoked_with_its_tails():
    intake, _, _ = _intake()
    content = {"revoked": ["a", "b"], TAILS: {"m": 3}}
    _, frames = Session(KEY).serialize(MsgType.REVOKE_REPLY, content)
    [event] = intake.replies([ENGINE + REVOKE_SUFFIX, *frames])
    assert event == Revoked(ENGINE, ["a", "b"], {"m": 3})


def test_a_malformed_revoke_reply_is_dropped():
    intake, _, _ = _intake()
    sender = Session(KEY)
    _, frames = sender.serialize(MsgType.REVOKE_REPLY, {"revoked": "a"})
    assert intake.revoke_replies([ENGINE + REVOKE_SUFFIX, *frames]) == []
    _, frames = sender.serialize(MsgType.REVOKE_REPLY, {"revoked": []})
    assert intake.revoke_replies([ENGINE, *frames]) == []  # not from a signal socket


def test_the_hubs_engine_events_become_joined_and_left():
    intake, _, _ = _intake()
    hub = Session(KEY)

    def event(what: str) -> list:
        _, frames = hub.serialize(MsgType.ENGINE_EVENT, {"event": what, "id": 3, "uuid": "e3"})
        return intake.engine_events(frames)

    assert event("registered") == [EngineJoined(3, b"e3")]
    assert event("unregistered") == [EngineLeft(b"e3", "it stopped heartbeating")]
    assert event("renamed") == []
