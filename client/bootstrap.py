"""A client's way into a cluster: its connection file found and read, then the hub asked
for the controller's addresses and its engines, the channels connected and the hub's
notifications subscribed to.

Client calls these once, from its constructor: ``connection_file`` before its I/O thread
exists, ``join`` once the thread runs with the hub's query socket connected.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from zpar.cluster.connection import (
    ConnectionInfo,
    check_controller_alive,
    default_url_file,
    profile_dir,
    wait_for_connection_file,
)
from zpar.errors import TimeoutError
from zpar.wire.messages import ConnectionRequest, MsgType
from zpar.wire.transport import choose, direct_dir

from .clientcompat import connection_file_of
from .ioloop import ClientIO
from .sender import RequestSender

log = logging.getLogger(__name__)

#: The channels a client connects to, as the hub's connection_reply names them.
CHANNELS = ("mux", "control", "task", "notification")


def cluster_url_file(profile: str, cluster_id: str | None, who: str = "client") -> Path:
    """Where a cluster's connection file lives: per cluster id, or the profile's default."""
    if not cluster_id:
        return default_url_file(profile, who)
    return profile_dir(profile) / "security" / f"cluster-{cluster_id}" / f"zpar-{who}.json"


def connection_file(
    connection_info: Any,
    url_file: str | Path | None,
    profile_dir: str | Path | None,
    cluster_id: str | None,
    profile: str,
    timeout: float,
) -> tuple[Path, ConnectionInfo]:
    """The connection file ipyparallel's Client arguments point at (else the profile's),
    and what it holds, once a starting controller has written it (``timeout`` s at most).
    A file left by a controller known to be dead is refused now, naming its pid, rather
    than after the timeout."""
    path = connection_file_of(connection_info, url_file, profile_dir, cluster_id)
    path = path or cluster_url_file(profile, cluster_id)
    info = wait_for_connection_file(path, timeout)
    check_controller_alive(path, info)
    return path, info


def join(sender: RequestSender, io: ClientIO, timeout: float) -> str:
    """Connect ``io``'s channels to the addresses the hub gives (its same-host twins when
    this client runs on the controller's host), wait for the notification subscription,
    then learn the engines registered; the task scheduler's scheme is returned."""
    reply = sender.query(MsgType.CONNECTION_REQUEST, ConnectionRequest().as_dict(), timeout)
    c = choose(reply.content, reply.content.get("local"))
    io.iopub_addr = c.get("iopub")
    io.direct_dir = direct_dir(c["mux"])
    io.add_channels({name: c[name] for name in CHANNELS})
    if not io.subscribed.wait(timeout):
        raise TimeoutError(f"no notification subscription from {c['notification']}")
    # engines registered before the subscription was live: asked again, now race-free
    reply = sender.query(MsgType.CONNECTION_REQUEST, ConnectionRequest().as_dict(), timeout)
    io.apply_snapshot({int(k): v for k, v in reply.content["engines"].items()})
    log.debug("client joined %s: engines %s", c.get("mux"), sorted(io.engines))
    return str(reply.content.get("task_scheme", ""))
