"""The dashboard's server in this process, on a hub stand-in: tokens, actions, limits.

No process is started: the Dashboard thread serves a real TaskTable and RefusalBook on a
loopback port the OS picks.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from collections import deque
from types import SimpleNamespace

import aiohttp
import pytest

from zpar.dashboard import Dashboard
from zpar.dashboard.service import MAX_CONNECTIONS
from zpar.hub.records import TaskTable
from zpar.hub.status import RefusalBook

KEY = "k" * 64
SECRET_FUNC = "confidential_model_fit"


class StandInHub:
    """What zpar.dashboard.hubview reads of zpar.hub.Hub."""

    def __init__(self) -> None:
        self.tasks = TaskTable()
        self.engines: dict[int, SimpleNamespace] = {}
        self.refusals = RefusalBook()
        self.services: list = []

    feed: deque | None = None

    def attach_feed(self, maxlen: int) -> deque:
        self.feed = self.tasks.feed = deque(maxlen=maxlen)
        return self.feed


@pytest.fixture
def served():
    hub = StandInHub()
    hub.engines[0] = SimpleNamespace(
        id=0, uuid="u0", hostname="here", pid=4242, registered=time.time(), cpu=12.0, rss=1 << 20
    )
    dash = Dashboard(hub, "127.0.0.1:0", key=KEY)
    hub.tasks.submitted({"msg_id": "m-ok", "msg_type": "apply_request", "date": time.time()},
                        "task", b"c1", "u0")  # fmt: skip
    hub.tasks.finished("m-ok", "u0", {"func": SECRET_FUNC, "started": time.time()}, "ok", {})
    dash.start()
    assert dash._ready.wait(30), "the dashboard did not start"
    yield dash
    dash.stop()


def get(url: str, headers: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_for(cond, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met")


PATHS = ["", "static/app.js", "static/vendor/chart.umd.min.js", "api/state",
         "api/tasks?func=confidential", "api/task/m-ok", "ws"]  # fmt: skip


@pytest.mark.parametrize("path", PATHS)
def test_every_route_refuses_a_request_without_the_token(served, path):
    status, body = get(served.url + path)
    assert status == 403
    assert SECRET_FUNC not in body and "m-ok" not in body
    status, body = get(served.url + path + ("&" if "?" in path else "?") + "token=wrong")
    assert status == 403
    status, _ = get(served.url + path, {"Authorization": "token nope"})
    assert status == 403


def test_the_token_opens_the_page_its_assets_and_the_api(served):
    tok = f"?token={served.token}"
    status, page = get(served.url + tok)
    assert status == 200 and '<canvas id="stream">' in page
    assert "http://" not in page.replace("http://www.w3.org", "")  # no CDN: assets are ours
    status, js = get(served.url + "static/vendor/chart.umd.min.js" + tok)
    assert status == 200 and "Chart.js v4" in js
    status, body = get(served.url + "api/state", {"Authorization": f"token {served.token}"})
    assert status == 200
    state = json.loads(body)
    assert state["engine_count"] == 1 and state["engines"][0]["pid"] == 4242
    status, body = get(served.url + "api/tasks" + tok + "&func=confidential")
    assert [r["msg_id"] for r in json.loads(body)] == ["m-ok"]


def test_the_websocket_pushes_state_and_needs_the_token(served):
    async def follow(headers):
        async with aiohttp.ClientSession(headers=headers) as s:
            async with s.ws_connect(served.url.replace("http", "ws") + "ws") as ws:
                first = json.loads((await ws.receive(timeout=10)).data)
                second = json.loads((await ws.receive(timeout=10)).data)
                return first, second

    first, second = asyncio.run(follow({"Authorization": f"token {served.token}"}))
    assert first["engine_count"] == 1
    assert second["now"] > first["now"]  # pushed again, not asked
    with pytest.raises(aiohttp.WSServerHandshakeError) as e:
        asyncio.run(follow({}))
    assert e.value.status == 403


def test_actions_need_the_cluster_key(served):
    auth = {"Authorization": f"token {served.token}", "Content-Type": "application/json"}
    for body in ({}, {"key": "wrong"}, {"key": KEY[:-1]}):
        req = urllib.request.Request(
            served.url + "api/shutdown", data=json.dumps(body).encode(), headers=auth
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 403
    req = urllib.request.Request(
        served.url + "api/abort", data=json.dumps({"key": KEY}).encode(), headers=auth
    )
    with pytest.raises(urllib.error.HTTPError) as e:  # the key, but no msg_ids: named
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400 and "msg_ids" in e.value.read().decode()


def test_connections_past_the_limit_are_closed_and_the_dashboard_serves_on(served):
    host, port = served.sock.getsockname()[:2]
    held = []
    try:
        for _ in range(MAX_CONNECTIONS + 16):
            held.append(socket.create_connection((host, port), timeout=10))

        def closed_ones() -> int:  # the server closed those over the limit at once
            n = 0
            for s in held:
                s.setblocking(False)
                try:
                    n += s.recv(1) == b""
                except BlockingIOError:
                    pass
                except OSError:
                    n += 1
            return n

        assert wait_for(lambda: closed_ones() >= 16)
    finally:
        for s in held:
            s.close()

    def answered() -> int | None:  # refused while the server still counts the closed ones
        try:
            return get(served.url + "api/state?token=" + served.token)[0]
        except OSError:
            return None

    assert wait_for(answered) == 200
    assert served._open <= 1  # the flood's connections are all let go


def test_a_bad_address_is_named():
    with pytest.raises(ValueError, match="HOST:PORT"):
        Dashboard(StandInHub(), "localhost", key=KEY)


def test_a_stopped_dashboard_leaves_the_hub_no_feed():
    hub = StandInHub()
    dash = Dashboard(hub, "127.0.0.1:0", key=KEY)
    assert hub.tasks.feed is not None
    dash.start()
    assert dash._ready.wait(30)
    dash.stop()
    assert hub.feed is None and hub.tasks.feed is None  # no record is held for nobody
