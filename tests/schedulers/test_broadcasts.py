"""Broadcast requests' copies in memory (schedulers/broadcasts.py): one per target engine,
each holding a slot of its engine until answered, lost with it, or found undeliverable."""

from __future__ import annotations

from zpar.schedulers.broadcasts import Broadcasts
from zpar.schedulers.instructions import SendTask
from zpar.schedulers.schemes import EngineSlot
from zpar.schedulers.state import RUNNING, Task

A, B, C = b"engine-a", b"engine-b", b"engine-c"


def _broadcasts():
    engines = {u: EngineSlot(i, u) for i, u in ((2, A), (0, B), (1, C))}
    out: list = []
    return Broadcasts(engines, out), engines, out


def test_a_copy_to_each_target_in_engine_id_order_each_holding_a_slot():
    bc, engines, out = _broadcasts()
    bc.place(Task("m", b"client", None, None), {A, B})
    assert [(type(i), i.engine.uuid) for i in out] == [(SendTask, B), (SendTask, A)]
    copy = out[0].task
    assert copy.broadcast and copy.state == RUNNING and copy.engine is engines[B]
    assert engines[A].load == engines[B].load == 1 and engines[C].load == 0
    assert engines[A].tasks == {"m"} and bc.holds("m") and not bc.holds("other")


def test_each_reply_gives_its_engine_back_and_a_second_or_stray_one_finds_no_copy():
    bc, engines, _ = _broadcasts()
    bc.place(Task("m", b"client", None, None), {A, B})
    assert bc.answered("m", A) is engines[A] and engines[A].load == 0 and not engines[A].tasks
    assert bc.holds("m")  # B's copy still waits
    assert bc.answered("m", A) is None and bc.answered("x", B) is None
    assert bc.answered("m", B) is engines[B] and not bc.copies and not bc.holds("m")


def test_a_gone_engine_loses_its_copies_and_an_undeliverable_one_is_taken_out():
    bc, engines, out = _broadcasts()
    bc.place(Task("m", b"client", None, None), {A, B})
    bc.place(Task("n", b"client", None, None), {A})
    [lost] = bc.lost(B, ["m", "n"])
    assert lost.msg_id == "m" and lost.engine is engines[B]
    assert set(bc.copies) == {("m", A), ("n", A)}
    bc.undeliverable(out[-1].task, engines[A])
    assert set(bc.copies) == {("m", A)} and engines[A].load == 1 and engines[A].tasks == {"m"}
