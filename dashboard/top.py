"""``zpar top [--profile P] [--cluster-id C]``: the dashboard in a terminal, refreshed in place.

It reads the dashboard's address and token from the cluster's connection file, follows the
same WebSocket the page follows, and draws engines, queues, throughput and failures with
rich (``render`` is pure: the tests drive it with a state). For people on a login node
over ssh, where a browser is one tunnel away.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from zpar.cluster.argparsing import Parser, checked
from zpar.cluster.names import cluster_id, profile_name
from zpar.constants import DEFAULT_PROFILE
from zpar.errors import ZparError

#: Exit codes, as the zpar command's.
RET_OK, RET_ERROR, RET_NOT_FOUND = 0, 1, 3

STATE_STYLE = {"idle": "green", "busy": "yellow", "dead": "bold red", "replaced": "dim"}
#: Finished tasks that are failures (every outcome but ok).
NOT_FAILURES = ("ok", "submitted", "retried")


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _uptime(s: float) -> str:
    s = int(s)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def render(state: dict[str, Any], title: str = "zpar") -> Group:
    """One frame: a header line, the engine table, queues and clients, recent failures."""
    totals = state.get("totals", {})
    failed = sum(n for k, n in totals.items() if k not in NOT_FAILURES)
    series = state.get("series", {}).get("rate") or [0]
    queues = state.get("queues", {})
    in_hand = sum(queues.get("engines", {}).values())
    head = Text.assemble(
        (f"{title}  ", "bold"),
        f"engines {state.get('engine_count', 0)}  busy {state.get('busy', 0)}  ",
        f"tasks/s {series[-1]}  queued {in_hand + queues.get('unassigned', 0)}  ",
        f"done {sum(n for k, n in totals.items() if k not in ('submitted', 'retried'))}  ",
        (f"failed {failed}", "bold red" if failed else ""),
    )
    engines = Table(expand=True, box=None, header_style="bold cyan")
    for col in ("id", "host", "pid", "state", "in hand", "CPU", "memory", "done", "failed"):
        engines.add_column(col, justify="right" if col not in ("host", "state") else "left")
    engines.add_column("uptime", justify="right")
    for e in state.get("engines", []):
        cpu = "-" if e.get("cpu") is None else f"{e['cpu']:.0f}%"
        engines.add_row(
            str(e["id"]),
            e["host"],
            str(e["pid"]),
            Text(e["state"], style=STATE_STYLE.get(e["state"], "")),
            str(e["in_hand"]),
            cpu,
            _bytes(e.get("rss")),
            str(e["done"]),
            str(e["failed"]),
            _uptime(e.get("uptime", 0)),
        )
    clients = Table(expand=True, box=None, header_style="bold cyan")
    for col in ("client", "done", "of", "failed", "pending"):
        clients.add_column(col, justify="left" if col == "client" else "right")
    for c in state.get("clients", []):
        clients.add_row(
            c["client"][:10], str(c["finished"]), str(c["submitted"]), str(c["failed"]),
            str(c["pending"]),
        )  # fmt: skip
    memory = state.get("memory", {})
    side = Text(
        f"unassigned {queues.get('unassigned', 0)}   hub {_bytes(memory.get('controller'))}"
        f"   scheduler {_bytes(memory.get('scheduler'))}"
    )
    refused = [
        f"{proc}: {reason} {n}"
        for proc, reasons in state.get("refusals", {}).items()
        for reason, n in reasons.items()
    ]
    parts: list[Any] = [
        head,
        Panel(engines, title="engines", border_style="blue"),
        Panel(Group(side, clients), title="queues and clients", border_style="blue"),
    ]
    if refused:
        parts.append(Panel(Text("\n".join(refused)), title="refused", border_style="red"))
    return Group(*parts)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="zpar top", description="A running cluster's dashboard, in this terminal.")
    p.add_argument("--profile", default=DEFAULT_PROFILE, type=checked(profile_name))
    p.add_argument("--cluster-id", default="", type=checked(cluster_id))
    p.add_argument("--once", action="store_true", help="print one frame and exit")
    return p


def _link(profile: str, cid: str) -> tuple[str, str]:
    """(dashboard URL, token) from the cluster's client connection file."""
    from zpar.cluster.connection import read_connection_file
    from zpar.cluster.registry import url_dir

    cid = cid or "default"
    info = read_connection_file(url_dir(profile, cid) / "zpar-client.json")
    if not info.dashboard:
        raise ZparError(f"cluster {cid!r} runs without a dashboard (--no-dashboard)")
    return info.dashboard, info.dashboard_token


async def _follow(url: str, token: str, console: Console, once: bool, title: str) -> None:
    import aiohttp

    ws_url = url.replace("http", "ws", 1) + "ws"
    headers = {"Authorization": f"token {token}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.ws_connect(ws_url, max_msg_size=256 * 1024 * 1024) as ws:
            state: dict[str, Any] = {}
            with Live(console=console, auto_refresh=False, screen=False) as live:
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    state = json.loads(msg.data)
                    live.update(render(state, f"{title}  {time.strftime('%H:%M:%S')}"))
                    live.refresh()
                    if once:
                        return


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        url, token = _link(args.profile, args.cluster_id)
    except ZparError as e:
        sys.stderr.write(f"zpar top: {e}\n")
        return RET_NOT_FOUND
    title = f"zpar top · {args.cluster_id or 'default'} · {url}"
    try:
        asyncio.run(_follow(url, token, Console(), args.once, title))
    except KeyboardInterrupt:
        return RET_OK
    except OSError as e:  # aiohttp's connection errors are OSErrors
        sys.stderr.write(f"zpar top: cannot reach the dashboard at {url}: {e}\n")
        return RET_ERROR
    return RET_OK


if __name__ == "__main__":
    sys.exit(main())
