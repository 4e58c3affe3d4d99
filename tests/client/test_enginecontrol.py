"""EngineControl.abort, in memory: an element id of a load-balanced map names that element
alone (abort_request ``positions``, to the task scheduler only), a task's id names the task
(to the engines and the scheduler); elements already answered are left out."""

from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace

from zpar.client.enginecontrol import EngineControl
from zpar.wire.messages import MsgType


class FakeParts:
    def __init__(self, n, answered=()):
        self.n = n
        self.answered = set(answered)

    def done(self, pos):
        return pos in self.answered


class FakeSender:
    def __init__(self):
        self.sent = []

    def resolve_targets(self, targets):
        return [0, 1] if targets is None else list(targets)

    def send(self, channel, msg_type, content, engine_id=None):
        fut = concurrent.futures.Future()
        fut.set_result(None)
        self.sent.append((channel, msg_type, content, engine_id))
        return SimpleNamespace(msg_id=f"abort-{len(self.sent)}", future=fut)


class FakeIO:
    def __init__(self, requests):
        self.requests = requests
        self.held_aborted = []

    def request(self, msg_id):
        return self.requests.get(msg_id)

    def abort_held(self, msg_ids):
        self.held_aborted.append(msg_ids)
        return []

    def has_channel(self, name):
        return name == "task"


def control(requests):
    sender, io = FakeSender(), FakeIO(requests)
    return EngineControl(sender, io, owner=None), sender, io


def test_element_ids_name_their_elements_to_the_scheduler_alone():
    ec, sender, io = control({"m": SimpleNamespace(parts=FakeParts(8, answered={0}))})
    ec.abort(["m#4", "m#2", "m#0", "m#4"], block=False)
    ((channel, msg_type, content, _),) = sender.sent
    assert channel == "task" and msg_type == MsgType.ABORT_REQUEST
    assert content == {"msg_ids": [], "positions": {"m": [2, 4]}}  # 0 answered: left out
    assert io.held_aborted == []  # nothing withdrawn whole from the window


def test_a_tasks_id_goes_to_the_engines_and_the_scheduler():
    ec, sender, io = control({"m": SimpleNamespace(parts=FakeParts(3))})
    ec.abort(["t1", "m#1"], block=False)
    channels = [(c, e) for c, _, _, e in sender.sent]
    assert channels == [("control", 0), ("control", 1), ("task", None)]
    assert {str(c["msg_ids"]) for _, _, c, _ in sender.sent} == {"['t1']"}
    assert sender.sent[-1][2]["positions"] == {"m": [1]}
    assert io.held_aborted == [["t1"]]


def test_elements_of_a_finished_map_abort_nothing():
    ec, sender, _ = control({})
    ec.abort("gone#3", block=False)
    ((channel, _, content, _),) = sender.sent
    assert channel == "task" and content == {"msg_ids": []}


def test_elements_of_another_clients_map_are_named_whatever_their_state():
    ec, sender, _ = control({})
    ec.abort(["theirs#3", "theirs#1"], block=False, foreign={"theirs#3", "theirs#1"})
    ((channel, _, content, _),) = sender.sent
    assert channel == "task" and content == {"msg_ids": [], "positions": {"theirs": [1, 3]}}


def test_no_jobs_aborts_everything_queued():
    ec, sender, io = control({})
    ec.abort(None, block=False)
    assert [c for _, _, c, _ in sender.sent] == [{"msg_ids": None}] * 3
    assert io.held_aborted == [None]
