"""A launcher's own line to the hub: tell it an engine exited, ask where engines run.

Launchers do not need a Client (its I/O thread, notifications, futures): one DEALER socket
and a Session keyed from the client connection file are enough for a request and its reply.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import zmq

from zpar.cluster.connection import read_connection_file
from zpar.constants import BAD_KEY
from zpar.errors import TimeoutError, WrongKey, ZparError
from zpar.wire import Session
from zpar.wire.curve import secure
from zpar.wire.messages import EngineExitedRequest, EngineInfoRequest, MsgType, ReplyStatus
from zpar.wire.sockets import configure

log = logging.getLogger(__name__)


class HubLine:
    """Requests to the hub of one connection file; thread-safe (calls are serialised).
    On a --curve cluster the line is a Curve client with the file's keys, as a Client's."""

    def __init__(self, url_file: str | Path) -> None:
        info = read_connection_file(url_file)
        self._info = info
        self.url_file = url_file
        self.address = info.registration
        self.session = Session(info.key or None, allow_insecure=not info.key)
        self._ctx = zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._lock = threading.Lock()

    def request(self, msg_type: str, content: dict[str, Any], timeout: float = 5.0) -> dict:
        """The reply's content; TimeoutError if the hub is silent, ZparError if it refuses.
        ``msg_type``: a MsgType, or a capability's query (hub.queryapi)."""
        with self._lock:
            if self._sock is None:
                self._sock = secure(configure(self._ctx.socket(zmq.DEALER)), self._info)
                self._sock.connect(self.address)
            sock = self._sock
            header = self.session.send(sock, msg_type, content)
            while True:
                if not sock.poll(int(timeout * 1000)):
                    # a reply that comes later would answer the next request: start afresh
                    sock.close(linger=0)
                    self._sock = None
                    raise TimeoutError(f"the hub at {self.address} did not answer {msg_type}")
                frames = sock.recv_multipart()
                if frames == [BAD_KEY]:
                    raise WrongKey(
                        f"the hub at {self.address} refused the signature of {self.url_file}: "
                        "its key is not the running cluster's"
                    )
                msg = self.session.feed(frames, "launcher hub line")
                if msg is not None and msg.parent_header.get("msg_id") == header["msg_id"]:
                    break
        if msg.content.get("status") != ReplyStatus.OK:
            raise ZparError(f"the hub refused {msg_type}: {msg.content.get('evalue', '')}")
        return msg.content

    def engine_exited(self, hostname: str, pid: int, exit_code: int | None) -> list[int]:
        content = EngineExitedRequest(hostname, pid, exit_code).as_dict()
        return list(self.request(MsgType.ENGINE_EXITED_REQUEST, content).get("ids", []))

    def engine_info(self) -> dict[int, dict[str, Any]]:
        engines = self.request(MsgType.ENGINE_INFO_REQUEST, EngineInfoRequest().as_dict()).get(
            "engines", {}
        )
        return {int(k): v for k, v in engines.items()}

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close(linger=0)
                self._sock = None


def ids_by_rank(url_file: str | Path) -> list[int]:
    """Engine ids ordered by MPI rank (engines without a rank last, by id)."""
    line = HubLine(url_file)
    try:
        info = line.engine_info()
    finally:
        line.close()
    return sorted(info, key=lambda i: (info[i]["rank"] < 0, info[i]["rank"], i))
