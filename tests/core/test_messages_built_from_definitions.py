"""Every message a process sends is built from its definition in zpar/wire/messages/.

The scan (tests/core/message_sites.py) reads the processes' code: a send given a message
type literally must be given ``Cls(...).as_dict()`` (or a name bound to one) as content, and
no dict literal anywhere may carry exactly one defined type's fields. The scan's own tests
below show it catches a hand-built message and leaves a built one alone.
"""

from __future__ import annotations

import functools
import textwrap

import pytest

from tests.core.message_sites import CONTENT, hand_built, scan, scan_source, table


@functools.cache
def _scan():
    """The product's scan, once for this module's tests."""
    return scan()


def _hand(source: str) -> list[tuple[int, str, str]]:
    sites, shaped, _ = scan_source(textwrap.dedent(source))
    return [(s.line, s.msg_type, s.how) for s in hand_built(sites, shaped)]


def test_no_process_builds_a_defined_message_by_hand():
    sites, shaped, built = _scan()
    hand = hand_built(sites, shaped)
    assert not hand, "built by hand, not from zpar.wire.messages:\n" + table(sites, shaped, built)


def test_every_definition_is_built_by_some_process():
    """A definition no process builds describes nothing that travels: it goes (with its
    docs/protocol.md entry), or a process builds the message from it."""
    _, _, built = _scan()
    unused = sorted(CONTENT[t].__name__ for t in CONTENT if not any(s.msg_type == t for s in built))
    assert not unused, f"never built by product code: {unused}"


def test_the_element_names_are_fields_of_their_definitions():
    """zpar.elements names the keys every process reads; the definitions that carry them
    must spell them the same."""
    import dataclasses

    from zpar.elements import ELEMENTS, ERRORS, FINAL, TAILS
    from zpar.wire.messages import ApplyReply, ErrorContent, RevokeReply, RevokeRequest

    def names(cls):
        return {f.name for f in dataclasses.fields(cls)}

    assert {ELEMENTS, ERRORS, FINAL} <= names(ApplyReply)
    assert {ELEMENTS, FINAL} <= names(ErrorContent)
    assert TAILS in names(RevokeRequest) & names(RevokeReply)


def test_error_content_is_its_definition():
    from zpar.errors import EngineError, error_content
    from zpar.wire.messages import ErrorContent

    assert error_content(EngineError, "gone", engine_info={"engine_id": 1}) == (
        ErrorContent("error", "EngineError", "gone", engine_info={"engine_id": 1}).as_dict()
    )
    assert error_content(KeyError, "x", unknown=[], zpar_error=True) == {
        "status": "error",
        "ename": "KeyError",
        "evalue": "x",
        "zpar_error": True,
        "unknown": [],
    }
    with pytest.raises(TypeError, match="spam"):
        error_content(KeyError, "x", spam=1)


def test_the_scan_reads_the_whole_product():
    sites, _, built = _scan()
    paths = {s.path.split("/")[0] for s in sites + built}
    assert {"client", "hub", "engine", "schedulers", "communicator", "typed", "zpar"} <= paths
    assert len(built) > 60


# -- the scan itself -----------------------------------------------------------------------


def test_a_dict_literal_sent_with_a_literal_type_is_caught():
    assert _hand(
        """
        def announce(session, sock, a, b, c):
            session.send(sock, MsgType.SCHEDULER_READY, {"client": a, "engine": b, "events": c})
        """
    ) == [(3, "scheduler_ready", "hand"), (3, "scheduler_ready", "shaped")]


def test_a_name_bound_to_a_dict_is_caught_and_so_is_an_empty_one():
    assert _hand(
        """
        def revoke(session, sock, ids):
            content = {"msg_ids": ids}
            session.send(sock, MsgType.REVOKE_REQUEST, content, idents=[b"x"])

        def connect(sender):
            sender.query("connection_request", {})
        """
    ) == [(4, "revoke_request", "hand"), (7, "connection_request", "hand")]


def test_a_definitions_map_extended_by_hand_is_caught():
    assert _hand(
        """
        def revoke(session, sock, ids, tails):
            content = RevokeRequest(ids).as_dict()
            content["extra"] = tails
            session.send(sock, MsgType.REVOKE_REQUEST, content)
        """
    ) == [(5, "revoke_request", "extended")]


def test_a_definition_sent_under_another_type_is_caught():
    assert _hand(
        """
        def f(session, sock):
            session.send(sock, MsgType.CLEAR_REQUEST, ConnectionRequest().as_dict())
        """
    ) == [(3, "clear_request", "hand")]


def test_a_content_shaped_dict_is_caught_wherever_it_goes():
    """Built in one place, sent from another: the dict's keys give it away."""
    assert _hand(
        """
        def report(counts):
            return {"refused": counts}

        _BUSY = {"execution_state": "busy"}

        def purged(n):
            return dict(status="ok", purged=n)
        """
    ) == [(3, "refused_report", "shaped"), (5, "status", "shaped"), (8, "purge_reply", "shaped")]


def test_a_dict_call_with_a_spread_or_a_positional_is_left_to_the_send_scan():
    """``dict(**x)`` and ``dict(pairs)`` spell no keys; sent with a type, they are hand."""
    assert (
        _hand(
            """
        def f(x, pairs):
            a = dict(**x, purged=1)
            b = dict(pairs)
        """
        )
        == []
    )


def test_contents_built_from_their_definitions_pass():
    assert (
        _hand(
            """
        _BUSY = StatusMessage("busy").as_dict()

        def announce(self, session, sock):
            session.send(sock, MsgType.SCHEDULER_READY, SchedulerReady("a", "b", "c").as_dict())
            request = QueueRequest(targets=[])
            session.send(sock, MsgType.QUEUE_REQUEST, request.as_dict())
            content = _OK[t](ReplyStatus.OK).as_dict()
            session.send(sock, MsgType.CLEAR_REPLY, content)
            publish(MsgType.STATUS, _BUSY, parent)
            shown = DisplayData(d) if x else UpdateDisplayData(d)
            self.send(MsgType.UPDATE_DISPLAY_DATA if x else MsgType.DISPLAY_DATA, content)
        """
        )
        == []
    )


def test_what_is_not_a_message_is_left_alone():
    """Keys of one word shared by every reply, metadata, a type compared or looked up."""
    assert (
        _hand(
            """
        def f(msg, d):
            ok = {"status": "ok"}
            md = {"targets": [1], "retries": 2}
            if msg.msg_type == MsgType.APPLY_REQUEST:
                d.get("status", {})
            REPLY_TYPE.get(msg.msg_type, MsgType.APPLY_REPLY)
            self._wait(MsgType.RENDEZVOUS_IMPI_REPLY)
        """
        )
        == []
    )
