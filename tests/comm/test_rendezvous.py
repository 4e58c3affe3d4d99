"""The rendezvous state machine, without sockets (seeds 003 and 004)."""

from __future__ import annotations

import itertools

import pytest

from zpar.comm.rendezvous import (
    AUTH_HMAC,
    AUTH_KEY,
    AUTH_NONE,
    AuthChoice,
    CollReply,
    DoneReply,
    Failed,
    Finished,
    RefuseMember,
    Rendezvous,
    RendezvousTable,
    SizeReply,
    hmac_proof,
    impi_key_value,
)

KEY = b"5678"
_counter = itertools.count()


def token(n: int) -> bytes:
    """Deterministic challenges: tests can tell one from the next."""
    return next(_counter).to_bytes(n, "big")


def make(size: int | None = 3, methods=(AUTH_NONE,), timeout: float = 10.0) -> Rendezvous:
    return Rendezvous(
        "c", size=size, methods=methods, key=KEY, timeout=timeout, now=0.0, token=token
    )


def joined(size: int = 3) -> Rendezvous:
    r = make(size)
    for rank in range(size):
        assert isinstance(r.auth_offer(f"p{rank}", AUTH_NONE.bit)[0], AuthChoice)
        out = r.impi(f"p{rank}", rank)
    assert out == [SizeReply(f"p{i}", size) for i in range(size)]
    return r


def colls(out: list) -> dict[str, CollReply]:
    assert all(isinstance(i, CollReply) for i in out), out
    return {i.peer: i for i in out}


# -- AUTH -----------------------------------------------------------------------------------------


def test_auth_none_chosen_without_proof() -> None:
    r = make(methods=(AUTH_HMAC, AUTH_NONE))
    assert r.auth_offer("a", AUTH_NONE.bit) == [AuthChoice("a", 0, b"")]
    assert r.impi("a", 0) == []  # authenticated: IMPI accepted (waits for the others)


def test_auth_key_by_hmac_challenge_never_the_key() -> None:
    r = make(methods=(AUTH_HMAC, AUTH_NONE))
    (choice,) = r.auth_offer("a", AUTH_HMAC.bit | AUTH_NONE.bit)  # strongest is chosen
    assert choice.which == AUTH_HMAC.which and len(choice.challenge) == 32
    proof = hmac_proof(KEY, choice.challenge)
    assert KEY not in proof
    assert r.auth_proof("a", proof) == []
    assert r.impi("a", 0) == []


def test_auth_each_member_gets_its_own_challenge() -> None:
    r = make(methods=(AUTH_HMAC,))
    (a,) = r.auth_offer("a", AUTH_HMAC.bit)
    (b,) = r.auth_offer("b", AUTH_HMAC.bit)
    assert a.challenge != b.challenge
    # a's proof replayed by b fails
    (refused,) = r.auth_proof("b", hmac_proof(KEY, a.challenge))
    assert isinstance(refused, RefuseMember) and "wrong key" in refused.reason


def test_auth_wrong_key_refused() -> None:
    r = make(methods=(AUTH_HMAC,))
    (choice,) = r.auth_offer("a", AUTH_HMAC.bit)
    (refused,) = r.auth_proof("a", hmac_proof(b"1234", choice.challenge))
    assert refused == RefuseMember("a", refused.reason) and "wrong key" in refused.reason
    # a refused peer is no member: its IMPI is refused too
    assert isinstance(r.impi("a", 0)[0], RefuseMember)


def test_auth_spec_key_is_the_64_bit_key() -> None:
    r = make(methods=(AUTH_KEY,))
    assert r.auth_offer("a", 0x2) == [AuthChoice("a", 1, b"")]
    assert impi_key_value(b"5678") == (5678).to_bytes(8, "big")
    assert r.auth_proof("a", (5678).to_bytes(8, "big")) == []
    (choice,) = r.auth_offer("b", 0x2)
    (refused,) = r.auth_proof("b", (1234).to_bytes(8, "big"))
    assert isinstance(refused, RefuseMember)


def test_auth_no_common_method_refused() -> None:
    r = make(methods=(AUTH_HMAC,))
    (refused,) = r.auth_offer("a", AUTH_NONE.bit)
    assert isinstance(refused, RefuseMember)
    assert "no common authentication method" in refused.reason and "0x1" in refused.reason


def test_auth_bad_mask_and_commands_before_auth_refused() -> None:
    r = make()
    assert isinstance(r.auth_offer("a", -1)[0], RefuseMember)
    assert isinstance(r.impi("b", 0)[0], RefuseMember)
    assert "before authentication" in r.impi("b", 0)[0].reason
    r.auth_offer("c", AUTH_NONE.bit)
    assert isinstance(r.auth_offer("c", AUTH_NONE.bit)[0], RefuseMember)


# -- IMPI -----------------------------------------------------------------------------------------


def test_impi_size_answered_once_every_rank_is_in() -> None:
    r = make(3)
    for p in "abc":
        r.auth_offer(p, 1)
    assert r.impi("b", 1) == []
    assert r.impi("a", 0) == []
    assert r.impi("c", 2) == [SizeReply("a", 3), SizeReply("b", 3), SizeReply("c", 3)]


@pytest.mark.parametrize("rank", [3, -1, "0", True, 1.0])
def test_impi_rank_out_of_range_refused(rank: object) -> None:
    r = make(3)
    r.auth_offer("a", 1)
    (refused,) = r.impi("a", rank)  # type: ignore[arg-type]
    assert isinstance(refused, RefuseMember) and "out of range" in refused.reason


def test_impi_duplicate_rank_refused_and_rendezvous_goes_on() -> None:
    r = make(2)
    for p in "abc":
        r.auth_offer(p, 1)
    assert r.impi("a", 0) == []
    (refused,) = r.impi("b", 0)
    assert refused.peer == "b" and "already taken" in refused.reason
    assert r.impi("c", 1) == [SizeReply("a", 2), SizeReply("c", 2)]


def test_impi_size_from_first_member_and_mismatch_refused() -> None:
    r = make(None)
    for p in "abc":
        r.auth_offer(p, 1)
    assert r.impi("a", 0, size=2) == []
    (refused,) = r.impi("b", 1, size=3)
    assert "differs" in refused.reason
    assert r.impi("c", 1, size=2) == [SizeReply("a", 2), SizeReply("c", 2)]


def test_impi_twice_refused_and_fails_the_others() -> None:
    r = make(2)
    r.auth_offer("a", 1)
    r.auth_offer("b", 1)
    r.impi("a", 0)
    out = r.impi("a", 0)
    assert isinstance(out[0], RefuseMember) and "twice" in out[0].reason


# -- COLL -----------------------------------------------------------------------------------------


def test_coll_seed_004_nhosts_mask_0x7_ascending_ranks() -> None:
    r = joined(3)
    nhosts = 0x1100
    # arrival order 2, 0, 1: the answer is still in ascending rank order
    assert r.coll("p2", nhosts, (2).to_bytes(4, "big")) == []
    assert r.coll("p0", nhosts, (3).to_bytes(4, "big")) == []
    out = colls(r.coll("p1", nhosts, (2).to_bytes(4, "big")))
    assert set(out) == {"p0", "p1", "p2"}
    for reply in out.values():
        assert reply.label == nhosts and reply.mask == 0x7
        assert b"".join(reply.payloads) == bytes.fromhex("000000030000000200000002")


def test_coll_missing_label_mask_without_that_bit() -> None:
    r = joined(3)
    datalen, tagub = 0x1300, 0x1400
    r.coll("p0", datalen, (8000).to_bytes(4, "big"))
    assert r.coll("p2", datalen, (4000).to_bytes(4, "big")) == []
    # p1 skips DATALEN: its higher label tells the server it moved past it
    out = r.coll("p1", tagub, (32767).to_bytes(4, "big"))
    replies = colls(out)
    assert len(out) == 3  # DATALEN answered to all three, TAGUB still waits
    for reply in replies.values():
        assert reply.label == datalen and reply.mask == 0x5
        assert reply.payloads == ((8000).to_bytes(4, "big"), (4000).to_bytes(4, "big"))
    # then TAGUB completes normally
    r.coll("p0", tagub, b"a")
    out = colls(r.coll("p2", tagub, b"c"))
    assert {x.mask for x in out.values()} == {0x7}
    assert out["p1"].payloads == (b"a", (32767).to_bytes(4, "big"), b"c")


def test_coll_label_answered_when_members_say_done() -> None:
    r = joined(2)
    assert r.coll("p0", 0x5A500100, b"x") == []
    out = r.done("p1")  # p1 sends no label at all: DONE moves it past every label
    assert [type(i) for i in out] == [CollReply, CollReply]
    assert out[0].mask == 0x1 and out[0].payloads == (b"x",)
    assert r.done("p0") == [DoneReply("p0"), DoneReply("p1")]


def test_coll_several_labels_answered_lowest_first() -> None:
    r = joined(2)
    r.coll("p0", 10, b"a")
    r.coll("p0", 20, b"b")
    # a label only p1 has: p0 moved past it, so it is answered at once
    out = r.coll("p1", 5, b"z")
    assert [(i.peer, i.label, i.mask, i.payloads) for i in out] == [
        ("p0", 5, 0x2, (b"z",)),
        ("p1", 5, 0x2, (b"z",)),
    ]
    out = r.coll("p1", 30, b"c")  # p1 skipped 10 and 20
    assert [(i.label, i.mask) for i in out if i.peer == "p0"] == [(10, 0x1), (20, 0x1)]
    out = r.coll("p0", 30, b"d")
    assert [(i.label, i.mask, i.payloads) for i in out if i.peer == "p1"] == [
        (30, 0x3, (b"d", b"c"))
    ]


def test_coll_labels_must_ascend() -> None:
    r = joined(3)
    r.coll("p0", 0x2000, b"")
    out = r.coll("p0", 0x1000, b"")
    assert out[0] == RefuseMember("p0", out[0].reason) and "ascend" in out[0].reason
    # the member is dropped: the others fail, naming it
    assert out[-1] == Finished("c", False)
    failed = [i for i in out if isinstance(i, Failed)]
    assert {f.peer for f in failed} == {"p1", "p2"}
    assert all(f.missing == (0,) and "rank 0" in f.reason for f in failed)


def test_coll_before_everyone_joined_refused() -> None:
    r = make(2)
    r.auth_offer("a", 1)
    r.impi("a", 0)
    assert isinstance(r.coll("a", 1, b"")[0], RefuseMember)


def test_coll_label_must_be_int32() -> None:
    r = joined(1)
    assert "32-bit" in r.coll("p0", 2**31, b"")[0].reason


# -- DONE / FINI ------------------------------------------------------------------------------------


def test_done_answered_to_all_after_the_last() -> None:
    r = joined(3)
    assert r.done("p2") == []
    assert r.done("p0") == []
    assert r.done("p1") == [DoneReply("p0"), DoneReply("p1"), DoneReply("p2")]
    assert r.complete


def test_fini_no_answer_then_finished() -> None:
    r = joined(2)
    r.done("p0")
    r.done("p1")
    assert r.fini("p1") == []
    assert r.fini("p0") == [Finished("c", True)]
    assert r.disconnect("p0") == []  # closing after FINI is no error


def test_member_dropping_before_fini_is_reported_to_the_others() -> None:
    r = joined(3)
    for p in ("p0", "p1", "p2"):
        r.done(p)
    r.fini("p0")
    out = r.disconnect("p2", "engine 7 died")
    # p0 already finished: not told
    assert out == [Failed("p1", out[0].reason, (2,)), Finished("c", False)]
    assert "rank 2" in out[0].reason and "engine 7 died" in out[0].reason
    assert r.disconnect("p1") == []


def test_fini_before_done_refused() -> None:
    r = joined(2)
    assert isinstance(r.fini("p0")[0], RefuseMember)


def test_member_vanishing_mid_rendezvous_fails_the_others() -> None:
    r = joined(3)
    r.coll("p0", 1, b"")
    out = r.disconnect("p1", "connection closed")
    assert out[-1] == Finished("c", False)
    assert {f.peer for f in out[:-1]} == {"p0", "p2"}
    assert all(isinstance(f, Failed) and f.missing == (1,) for f in out[:-1])
    # anything they send afterwards is refused with the failure
    assert "failed" in r.coll("p0", 2, b"")[0].reason


def test_disconnect_of_a_peer_without_rank_is_harmless() -> None:
    r = make(2)
    r.auth_offer("a", 1)
    assert r.disconnect("a") == []
    assert r.disconnect("nobody") == []


# -- timeouts -------------------------------------------------------------------------------------


def test_timeout_names_members_that_never_joined() -> None:
    r = make(3, timeout=5.0)
    for p, rank in (("a", 0), ("c", 2)):
        r.auth_offer(p, 1)
        r.impi(p, rank, who=f"engine {rank + 10}")
    assert r.tick(4.9) == []
    out = r.tick(5.0)
    assert {f.peer for f in out if isinstance(f, Failed)} == {"a", "c"}
    assert out[-1] == Finished("c", False)
    assert all(f.missing == (1,) for f in out if isinstance(f, Failed))
    assert "rank(s) 1" in out[0].reason and "5 s" in out[0].reason
    assert r.tick(6.0) == []  # failed once


def test_timeout_names_the_member_a_label_waits_for() -> None:
    r = make(3, timeout=5.0)
    for rank in range(3):
        r.auth_offer(f"p{rank}", 1)
        r.impi(f"p{rank}", rank, who=f"engine {rank}")
    r.coll("p0", 7, b"")
    r.coll("p2", 9, b"")  # moved past 7
    out = r.tick(5.0)
    assert all(isinstance(f, Failed) and f.missing == (1,) for f in out[:-1])
    assert len(out) == 4 and "1 (engine 1)" in out[0].reason


def test_no_timeout_once_complete() -> None:
    r = joined(1)
    r.done("p0")
    assert r.tick(1e9) == []


# -- several communicators ---------------------------------------------------------------------


def test_table_keeps_communicators_apart_and_forgets_finished() -> None:
    t = RendezvousTable(methods=(AUTH_NONE,), key=KEY, timeout=10.0)
    a, b = t.get("a", 0.0), t.get("b", 0.0)
    assert t.get("a", 1.0) is a
    for r in (a, b):
        r.auth_offer("x", 1)
        r.impi("x", 0, size=1)
    a.coll("x", 1, b"A")
    assert colls(b.coll("x", 1, b"B"))["x"].payloads == (b"B",)
    a.done("x")
    t.settle(a.fini("x"))
    assert set(t.comms) == {"b"}
    out = t.tick(20.0)
    assert [type(i) for i in out] == [Failed, Finished]
    assert t.comms == {}


def test_table_disconnect_reaches_every_communicator_of_the_peer() -> None:
    t = RendezvousTable(methods=(AUTH_NONE,), key=KEY, timeout=10.0)
    for cid in ("a", "b"):
        r = t.get(cid, 0.0)
        for rank, p in enumerate(("x", "y")):
            r.auth_offer(p, 1)
            r.impi(p, rank, size=2)
    out = t.disconnect(["y"], "engine died")
    assert sorted((f.peer, f.missing) for f in out if isinstance(f, Failed)) == [
        ("x", (1,)),
        ("x", (1,)),
    ]
