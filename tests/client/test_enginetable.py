"""client.enginetable.EngineTable: engines from the hub's notifications, their private
routes (decided once per engine), and direct calls failed when their engine goes."""

from __future__ import annotations

import os
from concurrent.futures import Future

import pytest

from zpar.client.enginetable import EngineTable
from zpar.errors import EngineError
from zpar.wire.messages import MsgType

REG, UNREG = MsgType.REGISTRATION_NOTIFICATION, MsgType.UNREGISTRATION_NOTIFICATION


def test_notifications_keep_the_table_and_a_death_is_returned():
    table = EngineTable()
    table.apply_snapshot({})
    before = table.engines
    assert table.notified(REG, {"id": 0, "uuid": "a"}) is None
    assert table.engines == {0: "a"} and before == {}  # replaced, never mutated
    assert table.notified(UNREG, {"id": 0, "uuid": "a", "reason": "killed"}) == (0, "a", "killed")
    assert table.engines == {}


def test_an_engine_restarted_under_its_old_id_survives_its_old_selfs_death():
    table = EngineTable()
    table.apply_snapshot({0: "old"})
    table.notified(REG, {"id": 0, "uuid": "new"})
    table.notified(UNREG, {"id": 0, "uuid": "old"})
    assert table.engines == {0: "new"}


def test_notifications_that_overtook_the_snapshot_are_kept():
    table = EngineTable()
    table.notified(REG, {"id": 2, "uuid": "c"})
    table.notified(UNREG, {"id": 0, "uuid": "a"})
    table.apply_snapshot({0: "a", 1: "b"})
    assert table.engines == {1: "b", 2: "c"}


def test_the_private_route_is_decided_once_per_engine(tmp_path):
    assert EngineTable().private_address("a") is None  # no run directory: another host
    table = EngineTable(str(tmp_path))
    sock = tmp_path / "engine-a"
    sock.touch(mode=0o600)
    addr = table.private_address("a")
    assert addr == f"ipc://{tmp_path}/engine-a"
    assert table.private_address("b") is None  # no socket of its own
    os.unlink(sock)
    assert table.private_address("a") == addr  # kept: the sender and the I/O thread agree
    table.apply_snapshot({0: "a"})
    table.notified(UNREG, {"id": 0, "uuid": "a"})
    assert table.private_address("a") is None  # forgotten with its engine


def test_a_direct_call_fails_when_its_engine_dies_or_the_client_closes():
    table = EngineTable()
    table.apply_snapshot({0: "a", 1: "b"})
    dies, closes = Future(), Future()
    table.watch_direct("a", dies)
    table.watch_direct("b", closes)
    table.notified(UNREG, {"id": 0, "uuid": "a", "reason": "killed"})
    with pytest.raises(EngineError, match="engine 0 .a. died before replying: killed"):
        dies.result(0)
    assert not closes.done()
    table.close("the client was closed")
    with pytest.raises(EngineError, match="closed"):
        closes.result(0)
    late = Future()
    table.watch_direct("b", late)
    assert late.done()


def test_a_call_watched_on_an_engine_not_registered_fails_at_once():
    table = EngineTable()
    fut = Future()
    table.watch_direct("ghost", fut)
    with pytest.raises(EngineError, match="not registered"):
        fut.result(0)
