"""HubResultFetcher: a task the hub has not heard of yet is asked again, a wrong id fails.

The hub learns of tasks from copies sent in batches (an engine's direct calls at most every
10 ms), so a result fetched by another client right after its owner got it can still be
unknown there for a moment (tests/compat/test_asyncresult.py's hub-result case hit it)."""

from __future__ import annotations

import types
from concurrent.futures import Future

import pytest

from zpar.client import hubresult
from zpar.client.hubresult import HubResultFetcher
from zpar.errors import HubRefused


class _Hub:
    """Answers result_request: 'unknown' until the msg_id is known, then completed."""

    def __init__(self, known_after: int) -> None:
        self.asked = 0
        self.known_after = known_after
        self.closed = False

    def query(self, msg_type, content):
        self.asked += 1
        ids = content["msg_ids"]
        if self.asked <= self.known_after:
            raise HubRefused("hub refused result_request: no such task", {"unknown": ids})
        reply = types.SimpleNamespace(
            content={"completed": ids, "results": {m: {} for m in ids}}, buffers=[]
        )
        return reply


def _fetch(hub, msg_id, history=()):
    client = types.SimpleNamespace(sender=hub, history=list(history))
    fut: Future = Future()
    fetcher = HubResultFetcher(client, [(msg_id, fut)])
    fetcher.start()
    fetcher.join(timeout=30)
    assert not fetcher.is_alive()
    return fut


@pytest.fixture(autouse=True)
def _quick_polls(monkeypatch):
    monkeypatch.setattr(hubresult, "POLL_START", 0.001)


def test_another_clients_task_unknown_for_a_moment_is_fetched():
    hub = _Hub(known_after=2)
    fut = _fetch(hub, "m-other")
    assert fut.exception() is None and hub.asked == 3


def test_own_task_unknown_for_a_moment_is_fetched():
    hub = _Hub(known_after=3)
    fut = _fetch(hub, "m-mine", history=["m-mine"])
    assert fut.exception() is None and hub.asked == 4


def test_an_id_the_hub_never_hears_of_fails_naming_it(monkeypatch):
    monkeypatch.setattr(hubresult, "FOREIGN_GRACE", 0.05)
    hub = _Hub(known_after=10**9)
    fut = _fetch(hub, "m-wrong")
    err = fut.exception()
    assert isinstance(err, HubRefused) and err.content["unknown"] == ["m-wrong"]
