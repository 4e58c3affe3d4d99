"""The dashboard: a thread of the controller that serves the page and pushes its state.

::

    controller main thread (hub loop)            dashboard thread (asyncio, aiohttp)
      Hub / TaskTable ──append──► feed deque ──popleft──► DashboardState ──► WebSockets
      hub.engines, counts, refusals ◄──────── read (HubView) every TICK
      registration ROUTER ◄── db_request / shutdown (HubLine, as any client) ── task table

It never sits between a client and an engine: the hub appends each task event to a
bounded deque and goes on; everything else the dashboard reads in place or asks the hub
over its query socket, as a client does. Its listening socket is bound by the controller
before the thread starts, so a taken port is an error at start-up, not a log line.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import secrets
import select
import socket
import threading
import time
from pathlib import Path
from typing import Any

from zpar.cluster.names import split_address
from zpar.errors import ZparError

from .hubview import HubView
from .state import DashboardState

log = logging.getLogger(__name__)

#: Seconds between two pushes to the open pages (the issue asks for at least one a second).
TICK = 0.5
#: Seconds between two drains of the hub's feed: its finished tasks' records stay alive
#: until drained, so at 10,000 tasks a second a drain each TICK held ~7 MB of them.
DRAIN = 0.1
#: Connections the dashboard's socket holds at once (pages, API calls, `zpar top`); more are
#: closed as they are accepted, so a flood costs a bounded number of descriptors.
MAX_CONNECTIONS = 64
#: Open pages (WebSockets) at once.
MAX_SOCKETS = 32
#: Seconds an idle HTTP keep-alive connection is kept.
KEEPALIVE = 5.0
#: Seconds the dashboard's stop waits for its open pages and requests: the controller's
#: own stop (store flush, connection files) must not wait on a browser.
STOP_TIMEOUT = 1.0
#: Seconds between two attempts to start the web server when one failed (out of
#: descriptors while a flood holds the controller's, it cannot load its modules).
START_RETRY = 1.0
#: The default address: loopback, a port of its own chosen by the OS.
DEFAULT_ADDRESS = "127.0.0.1:0"


def parse_address(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ValueError naming what is wrong."""
    return split_address(addr)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_hex(24)


class Dashboard:
    def __init__(
        self,
        hub: Any,
        address: str,
        *,
        key: str,
        url_file: Path | None = None,
        scheduler_pid: Any = None,
        token: str | None = None,
    ) -> None:
        host, port = parse_address(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as e:
            sock.close()
            raise ZparError(f"the dashboard cannot listen on {address}: {e}") from None
        sock.listen(128)
        sock.setblocking(False)
        self.sock = sock
        bound = sock.getsockname()
        if bound[0] in ("0.0.0.0", "::"):  # every interface: a name other hosts can use
            shown = socket.gethostname()
        else:
            shown = f"[{bound[0]}]" if family == socket.AF_INET6 else bound[0]
        #: the page's address (without its token)
        self.url = f"http://{shown}:{bound[1]}/"
        self.token = token or new_token()
        self.key = key
        self.url_file = url_file
        self.view_of = HubView(hub, scheduler_pid)
        self.state = DashboardState()
        self.sockets: set[Any] = set()
        self.sent: dict[Any, int] = {}  # WebSocket -> newest bar sequence it was sent
        self._sending: set[Any] = set()  # WebSockets a push is being written to
        self._tasks: set[Any] = set()  # those pushes (asyncio tasks), kept referenced
        self._line: Any = None  # zpar.cluster.launchers.hubquery.HubLine, made on first use
        self._client: Any = None  # a zpar.Client for abort, made on first use
        self._loop: Any = None  # the asyncio loop, once a first connection came
        self._stopped: Any = None  # its asyncio.Event
        self._stopping = False
        self._last_failure = ""
        self._open = 0  # connections the web server holds
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def link(self) -> str:
        return f"{self.url}?token={self.token}"

    # -- life cycle (called by the controller) ----------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="zpar-dashboard", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        loop, stopped = self._loop, self._stopped
        if loop is not None and stopped is not None:
            try:
                loop.call_soon_threadsafe(stopped.set)
            except RuntimeError:  # the loop is closed already
                pass
        if self._thread is not None:
            self._thread.join(timeout)
        for closer in (self._line, self._client):
            if closer is not None:
                try:
                    closer.close()
                except Exception:
                    log.debug("dashboard: closing its hub line failed", exc_info=True)
        self.sock.close()
        self._wake_r.close()
        self._wake_w.close()

    def _run(self) -> None:
        try:
            while self._watch():
                try:
                    import asyncio

                    asyncio.run(self._serve())
                    return
                except Exception as e:
                    # out of descriptors (a flood on the controller's ports) while loading
                    # the web server or making its loop: the first page waits, and the
                    # dashboard tries again once descriptors may be free
                    if self._stopping:
                        return
                    self._starting_failed(e)
        except Exception:
            log.exception("the dashboard stopped on an error; the cluster runs on without it")
        finally:
            self.view_of.detach()

    def _starting_failed(self, e: Exception) -> None:
        """Log why the web server could not start (once per kind of failure), then keep
        the state up to date for START_RETRY seconds before the next attempt."""
        kind = f"{type(e).__name__}: {e}"
        if kind != self._last_failure:
            log.warning(
                "dashboard: its web server could not start (%s); trying again every %g s",
                kind,
                START_RETRY,
            )
        self._safe(self.tick)
        self._last_failure = kind
        select.select([self._wake_r], [], [], START_RETRY)

    def _watch(self) -> bool:
        """Keep the state up to date until the first connection arrives (True) or the
        dashboard is stopped (False). Until someone looks, neither asyncio nor aiohttp is
        imported: a dashboard nobody opened costs the controller its state and a thread
        (~1 MB), not the ~12 MB of the web server's modules."""
        self._ready.set()
        next_tick = 0.0
        while not self._stopping:
            readable, _, _ = select.select([self.sock, self._wake_r], [], [], DRAIN)
            if self._stopping:
                return False
            if time.monotonic() >= next_tick or self.sock in readable:
                self._safe(self.tick)
                next_tick = time.monotonic() + TICK
            else:
                self._safe(self.drain)
            if self.sock in readable:
                return True
        return False

    async def _serve(self) -> None:
        import asyncio

        from aiohttp import web

        from .app import OverLimit, make_app

        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        runner = web.AppRunner(
            make_app(self, self.token, self.key),
            access_log=None,
            keepalive_timeout=KEEPALIVE,
            shutdown_timeout=STOP_TIMEOUT,  # aiohttp's default waits 60 s for open requests
        )
        await runner.setup()
        server = runner.server
        assert server is not None

        # counted here, not by len(server.connections): asyncio calls the factory for a
        # whole burst of accepted sockets before the first handler registers itself
        manager_lost = server.connection_lost

        def lost(handler: Any, exc: BaseException | None) -> None:
            self._open -= 1
            manager_lost(handler, exc)

        server.connection_lost = lost  # type: ignore[method-assign,assignment]

        def factory() -> asyncio.Protocol:
            if self._open >= MAX_CONNECTIONS:
                return OverLimit()
            self._open += 1
            return server()

        # on EMFILE (descriptors exhausted) asyncio's accept loop logs and retries after a
        # second instead of failing: the dashboard serves again once descriptors are free
        listener = await self._loop.create_server(factory, sock=self.sock)
        log.info("dashboard at %s", self.url)
        try:
            next_tick = 0.0
            while not self._stopped.is_set() and not self._stopping:
                if time.monotonic() >= next_tick:
                    self._safe(self.tick)
                    self._push()
                    next_tick = time.monotonic() + TICK
                else:
                    self._safe(self.drain)
                try:
                    await asyncio.wait_for(self._stopped.wait(), DRAIN)
                except TimeoutError:  # asyncio's, an alias of the builtin since 3.11
                    pass
        finally:
            listener.close()
            for ws in list(self.sockets):
                try:
                    await asyncio.wait_for(ws.close(), STOP_TIMEOUT)
                except (TimeoutError, ConnectionError):
                    pass
            await runner.cleanup()

    # -- state ------------------------------------------------------------------------------

    def _safe(self, step: Any) -> None:
        """A tick or drain that fails (descriptors exhausted while psutil reads /proc, …)
        is logged once per kind of failure and skipped: the next one tries again."""
        try:
            step()
        except Exception as e:
            kind = f"{type(e).__name__}: {e}"
            if kind != self._last_failure:
                log.warning("dashboard: reading the hub's state failed: %s", kind)
            self._last_failure = kind
        else:
            self._last_failure = ""

    def drain(self) -> None:
        """Take the hub's events since the last drain into the state."""
        events, overflowed = self.view_of.drain()
        self.state.apply(events, time.time())
        self.state.dropped_events += overflowed

    def tick(self) -> None:
        """Read the hub's news and state into the dashboard's (this thread only)."""
        view, state = self.view_of, self.state
        now = time.time()
        self.drain()
        state.live_engines(view.engines())
        state.totals, state.unassigned = view.totals()
        state.refusals = view.refusals()
        state.memory = view.memory()
        state.extras = view.extras()
        state.trim(now)

    def view(self, since: int | None = None) -> dict[str, Any]:
        out = self.state.view(time.time(), since)
        out["url"] = self.url
        return out

    def _push(self) -> None:
        """Send each open page what changed. A page still taking the last push is skipped
        (its next one carries every bar since): a slow browser never holds up the drains
        of the hub's feed, whose records would pile up meanwhile."""
        import asyncio

        for ws in list(self.sockets):
            since = self.sent.get(ws)
            if since is None or ws in self._sending:
                continue  # its first full state, or its last push, is still on its way
            self._sending.add(ws)
            payload = json.dumps(self.view(since), separators=(",", ":"))
            task = asyncio.ensure_future(self._send(ws, payload, self.state.seq))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, ws: Any, payload: str, seq: int) -> None:
        try:
            await ws.send_str(payload)
            self.sent[ws] = seq
        except (ConnectionError, RuntimeError):
            self.sockets.discard(ws)
        finally:
            self._sending.discard(ws)

    def admit_socket(self) -> bool:
        return len(self.sockets) < MAX_SOCKETS

    # -- the task table ---------------------------------------------------------------------

    async def search(self, q: dict[str, str]) -> list[dict[str, Any]]:
        """Recent tasks first; a msg_id the dashboard has not seen is asked of the store."""
        rows = self.state.search(q)
        if rows or not q.get("msg_id"):
            return rows
        found = await self._store_task(q["msg_id"])
        return [] if found is None else [{k: v for k, v in found.items() if k != "traceback"}]

    async def task(self, msg_id: str) -> dict[str, Any] | None:
        row = self.state.recent.get(msg_id)
        return row if row is not None else await self._store_task(msg_id)

    async def _store_task(self, msg_id: str) -> dict[str, Any] | None:
        from zpar.wire.messages import DbRequest, MsgType

        if len(msg_id) > 200:
            return None
        content = DbRequest({"msg_id": msg_id}, None).as_dict()
        try:
            reply = await self._ask(MsgType.DB_REQUEST, content)
        except ZparError as e:
            log.warning("dashboard: the store did not answer for %s: %s", msg_id, e)
            return None
        records = reply.get("records") or []
        return _store_row(records[0], self.state) if records else None

    async def _ask(self, msg_type: str, content: dict[str, Any]) -> dict[str, Any]:
        if self.url_file is None:
            raise ZparError("the dashboard has no connection file to reach the hub")
        if self._line is None:
            from zpar.cluster.launchers.hubquery import HubLine

            self._line = HubLine(self.url_file)
        loop = self._loop
        return await loop.run_in_executor(None, self._line.request, msg_type, content)

    # -- actions (the cluster key checked by the route) -------------------------------------

    async def act(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        from zpar.wire.messages import MsgType, ShutdownHubRequest

        if action == "shutdown":
            log.warning("dashboard: shutdown asked with the cluster key")
            await self._ask(MsgType.SHUTDOWN_HUB_REQUEST, ShutdownHubRequest().as_dict())
            return {"status": "ok", "done": "shutdown"}
        ids = body.get("msg_ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(m, str) for m in ids):
            raise ValueError("abort needs msg_ids: a list of task ids")
        await self._loop.run_in_executor(None, self._abort, ids)
        return {"status": "ok", "done": "abort", "msg_ids": ids}

    def _abort(self, ids: list[str]) -> None:
        if self._client is None:
            from zpar.client import Client

            self._client = Client(url_file=self.url_file)
        self._client.abort(ids)


def _store_row(rec: dict[str, Any], state: DashboardState) -> dict[str, Any]:
    """A store record as the task table shows it."""
    md = rec.get("metadata") or {}
    content = rec.get("result_content") or {}
    engine = state.by_uuid.get(rec.get("engine_uuid") or "")
    row = {
        "msg_id": rec.get("msg_id"),
        "func": md.get("func") or rec.get("msg_type") or "?",
        "label": md.get("label") or "",
        "status": rec.get("status"),
        "engine": engine.id if engine is not None else md.get("engine_id"),
        "client": rec.get("client") or "",
        "submitted": rec.get("submitted"),
        "started": rec.get("started"),
        "completed": rec.get("completed"),
    }
    if rec.get("status") not in (None, "ok"):
        row["error"] = f"{content.get('ename', '')}: {content.get('evalue', '')}"
        row["traceback"] = "\n".join(map(str, content.get("traceback") or []))
    return row
