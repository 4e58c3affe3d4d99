"""Headless Chromium driven over the Chrome DevTools Protocol, for the dashboard's tests.

Debian's ``chromium`` (scripts/ensure_system_packages.sh chromium) is started on a fresh
profile with ``--remote-debugging-port=0``; the port it picked is read from the
DevToolsActivePort file it writes, and the page's target is driven through aiohttp's
WebSocket client (Runtime.evaluate, Page.captureScreenshot). No browser download.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[2]

#: Flags the issue asks for: headless, no GPU, no network of its own, a fresh profile;
#: --no-sandbox because tests run as root in CI.
FLAGS = (
    "--headless",
    "--disable-gpu",
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
)


def ensure_chromium() -> str:
    """The browser's path, installed by the project's script when missing."""
    exe = shutil.which("chromium")
    if exe is None:
        r = subprocess.run(
            [str(REPO / "scripts" / "ensure_system_packages.sh"), "chromium"],
            capture_output=True,
            text=True,
        )
        exe = shutil.which("chromium")
        if exe is None:
            raise RuntimeError(
                "could not install Chromium (scripts/ensure_system_packages.sh chromium): "
                f"{r.stderr.strip()[-300:]}"
            )
    return exe


class Browser:
    """One headless Chromium with one page; a context manager that kills it on exit."""

    def __init__(self, url: str = "about:blank", width: int = 1440, height: int = 1000) -> None:
        self.profile = tempfile.mkdtemp(prefix="zpar-chromium-")
        self.proc = subprocess.Popen(
            [
                ensure_chromium(),
                *FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.loop = asyncio.new_event_loop()
        self._ids = itertools.count(1)
        self.ws: Any = None
        self.session: Any = None
        try:
            self.loop.run_until_complete(self._attach())
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def _attach(self, timeout: float = 60.0) -> None:
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with code {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError("chromium did not open its DevTools port")
            await asyncio.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        self.session = aiohttp.ClientSession()
        while True:
            async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
                pages = [t for t in await r.json() if t.get("type") == "page"]
            if pages:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("chromium has no page target")
            await asyncio.sleep(0.05)
        self.ws = await self.session.ws_connect(
            pages[0]["webSocketDebuggerUrl"], max_msg_size=64 * 1024 * 1024
        )

    async def _call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        i = next(self._ids)
        await self.ws.send_str(json.dumps({"id": i, "method": method, "params": params or {}}))
        while True:
            msg = json.loads((await self.ws.receive(timeout=60)).data)
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.loop.run_until_complete(self._call(method, params))

    def goto(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})

    def eval(self, expression: str) -> Any:
        """The expression's value (JSON-able), awaited if it is a promise."""
        r = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression!r} raised: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """Poll ``expression`` until it is truthy; its value. A generous wait for a
        condition a person would see, not a timing assertion."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.eval(expression)
            except RuntimeError:
                last = None
            if last:
                return last
            time.sleep(0.1)
        raise AssertionError(f"not true within {timeout} s: {expression} (last: {last!r})")

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
            h = self.eval("document.documentElement.scrollHeight")
            w = self.eval("document.documentElement.scrollWidth")
            params["clip"] = {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}
        data = self.call("Page.captureScreenshot", params)["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def close(self) -> None:
        if self.ws is not None:
            self.loop.run_until_complete(self.ws.close())
        if self.session is not None:
            self.loop.run_until_complete(self.session.close())
        self.loop.close()
        try:  # the browser and its helpers (zygote, renderers) are one process group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)
