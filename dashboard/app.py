"""The dashboard's HTTP routes: the page, its assets, the JSON API and the WebSocket.

Every request, the assets' included, carries the dashboard's token (``?token=``, an
``Authorization: token …`` header, or the cookie the page sets when opened with it), as
Jupyter's server asks: loopback is not private on a shared login node. A request without
it gets 403 and a body that names nothing of the cluster. Reading needs the token alone;
acting (abort, shutdown) needs the cluster key in the request's body as well.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

log = logging.getLogger(__name__)

#: Where the page and its assets live in the package (every asset ships: no CDN).
STATIC = Path(__file__).parent / "static"
#: Bytes of a request body the dashboard reads at most (its POSTs carry a key and ids).
MAX_BODY = 64 * 1024
#: Bytes of a WebSocket message from a browser (it sends none of any size).
MAX_WS_MESSAGE = 4 * 1024
#: The cookie that carries the token for the page's own requests (assets, WebSocket).
COOKIE = "zpar-dashboard-token"

FORBIDDEN = "403: Forbidden. Open the dashboard with the link that holds its token."

CONTENT_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}


class OverLimit(asyncio.Protocol):
    """A connection over the dashboard's limit (service.MAX_CONNECTIONS): closed as soon as
    it is accepted, so a flood holds a bounded number of descriptors."""

    def connection_made(self, transport: Any) -> None:
        transport.close()


def token_of(request: web.Request) -> str:
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("token "):
        return auth[6:].strip()
    return request.query.get("token") or request.cookies.get(COOKIE, "")


class Routes:
    """The handlers; ``backend`` is the Dashboard (zpar.dashboard.service) they ask."""

    def __init__(self, backend: Any, token: str, key: str) -> None:
        self.backend = backend
        self.token = token
        self.key = key

    @web.middleware
    async def guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        given = token_of(request)
        if not given or not hmac.compare_digest(given.encode(), self.token.encode()):
            log.warning("dashboard: %s %s refused: no valid token", request.method, request.path)
            return web.Response(status=403, text=FORBIDDEN)
        response = await handler(request)
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    async def page(self, request: web.Request) -> web.StreamResponse:
        response = web.FileResponse(STATIC / "index.html")
        if request.query.get("token"):  # the page's assets and socket carry it from here
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", path="/")
        return response

    async def asset(self, request: web.Request) -> web.StreamResponse:
        path = (STATIC / request.match_info["name"]).resolve()
        if STATIC.resolve() not in path.parents or not path.is_file():
            raise web.HTTPNotFound()
        kind = CONTENT_TYPES.get(path.suffix)
        return web.FileResponse(path, headers={"Content-Type": kind} if kind else None)

    async def state(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(self.backend.view(), dumps=_dumps)

    async def tasks(self, request: web.Request) -> web.StreamResponse:
        q = {k: request.query.get(k, "") for k in ("msg_id", "func", "label", "status", "engine")}
        return web.json_response(await self.backend.search(q), dumps=_dumps)

    async def task(self, request: web.Request) -> web.StreamResponse:
        row = await self.backend.task(request.match_info["msg_id"])
        if row is None:
            raise web.HTTPNotFound(text="no such task")
        return web.json_response(row, dumps=_dumps)

    async def act(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "the body must be JSON"}, status=400)
        given = body.get("key") if isinstance(body, dict) else None
        if not isinstance(given, str) or not self.key or not hmac.compare_digest(given, self.key):
            return web.json_response({"error": "acting needs the cluster key"}, status=403)
        try:
            done = await self.backend.act(request.match_info["action"], body)
        except ValueError as e:
            return web.json_response({"error": str(e)}, status=400)
        return web.json_response(done)

    async def socket(self, request: web.Request) -> web.StreamResponse:
        backend = self.backend
        if not backend.admit_socket():
            return web.Response(status=503, text="503: too many dashboard pages open")
        # no permessage-deflate: compressing each push costs the controller's CPU for
        # bytes that mostly cross loopback; a close waits 1 s for the browser's answer
        ws = web.WebSocketResponse(
            heartbeat=30, max_msg_size=MAX_WS_MESSAGE, compress=False, timeout=1.0
        )
        await ws.prepare(request)
        backend.sockets.add(ws)
        try:
            seq, payload = backend.state.seq, _dumps(backend.view(since=None))
            await ws.send_str(payload)
            backend.sent[ws] = seq  # the bars made while it was written come next push
            async for msg in ws:  # the page sends nothing; a close ends the loop
                if msg.type == WSMsgType.ERROR:
                    break
        finally:
            backend.sockets.discard(ws)
            backend.sent.pop(ws, None)
        return ws


def make_app(backend: Any, token: str, key: str) -> web.Application:
    r = Routes(backend, token, key)
    app = web.Application(middlewares=[r.guard], client_max_size=MAX_BODY)
    app.router.add_get("/", r.page)
    app.router.add_get("/static/{name:.+}", r.asset)
    app.router.add_get("/api/state", r.state)
    app.router.add_get("/api/tasks", r.tasks)
    app.router.add_get("/api/task/{msg_id}", r.task)
    app.router.add_post("/api/{action:abort|shutdown}", r.act)
    app.router.add_get("/ws", r.socket)
    return app


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), default=str)
