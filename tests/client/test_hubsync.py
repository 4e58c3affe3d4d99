"""HubCatchUp (client/hubsync.py): a query of the store first waits until the hub has heard
of what this client saw answered; sans-IO, with a hub that hears late."""

from __future__ import annotations

import collections

from zpar.client import hubsync
from zpar.client.hubsync import HubCatchUp
from zpar.errors import HubRefused


class FakeIO:
    def __init__(self, pending=()):
        self.pending = set(pending)

    def request(self, msg_id):
        return object() if msg_id in self.pending else None


class LateHub:
    """Answers result_request statusonly: unknown for ``late`` asks, then completed."""

    def __init__(self, late=2, never=()):
        self.late = late
        self.never = set(never)
        self.asked: list[list[str]] = []

    def query(self, msg_type, content):
        ids = list(content["msg_ids"])
        self.asked.append(ids)
        if len(self.asked) <= self.late or self.never & set(ids):
            unknown = [m for m in ids if m in self.never] or ids
            raise HubRefused("no such task", {"unknown": unknown})

        class Reply:
            pass

        r = Reply()
        r.content = {"pending": [], "completed": ids}
        return r


def test_a_query_waits_for_what_was_answered_here(monkeypatch):
    monkeypatch.setattr(hubsync, "POLL_START", 0.0)
    history = collections.deque(["a", "b", "c"])
    hub = LateHub(late=2)
    sync = HubCatchUp(hub, FakeIO(pending={"c"}), history)
    sync.wait()
    assert len(hub.asked) == 3 and hub.asked[-1] == ["b", "a"]  # not "c": still running
    sync.wait()  # "c" still running: nothing confirmed, asked again
    assert hub.asked[-1] == ["b", "a"]


def test_once_confirmed_the_next_query_asks_only_for_newer(monkeypatch):
    monkeypatch.setattr(hubsync, "POLL_START", 0.0)
    history = collections.deque(["a", "b"])
    hub = LateHub(late=0)
    sync = HubCatchUp(hub, FakeIO(), history)
    sync.wait()
    history.append("c")
    sync.wait()
    assert hub.asked == [["b", "a"], ["c"]]
    sync.wait()  # nothing new: no question
    assert len(hub.asked) == 2


def test_an_id_the_hub_never_hears_of_is_given_up_after_the_grace(monkeypatch):
    monkeypatch.setattr(hubsync, "POLL_START", 0.0)
    monkeypatch.setattr(hubsync, "POLL_MAX", 0.0)
    monkeypatch.setattr(hubsync, "SYNC_GRACE", 0.05)
    history = collections.deque(["lost", "b"])
    hub = LateHub(late=0, never={"lost"})
    sync = HubCatchUp(hub, FakeIO(), history)
    sync.wait()
    n = len(hub.asked)
    assert n > 1
    history.append("c")
    sync.wait()  # the lost one is not waited for again
    assert hub.asked[n:] == [["c", "b"]]
