"""``ar.data``: what tasks published with ``publish_data`` (zpar.datapub), as ipyparallel's
AsyncResult.data shows it.

A finished task's data comes with its reply (metadata ``data``, pickled). While it runs,
the first read of ``ar.data`` subscribes to its IOPub ``data_message``s (from then on:
earlier ones are not replayed, the reply has them all) and each read shows the merge so far.
"""

from __future__ import annotations

import logging
import pickle
import threading
from typing import Any

from zpar.wire.messages import MsgType

log = logging.getLogger(__name__)


def reply_data(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The published data a reply (or a stored record) carries, None if none."""
    raw = metadata.get("data")
    if isinstance(raw, str):  # read back from the store's JSON (records.jsonable)
        raw = raw.encode("latin-1")
    if not isinstance(raw, bytes | bytearray):
        return raw if isinstance(raw, dict) else None
    try:
        data = pickle.loads(raw)
    except Exception as e:  # a class the client cannot import, say
        log.warning("published data could not be unpickled: %s", e)
        return None
    return data if isinstance(data, dict) else None


class LiveData:
    """Data messages of running tasks whose ``ar.data`` was read, by msg_id."""

    def __init__(self, sender: Any) -> None:
        self._sender = sender
        self._data: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def watch(self, msg_ids: list[str]) -> None:
        with self._lock:
            new = [m for m in msg_ids if m not in self._data]
            for m in new:
                self._data[m] = {}
        if new:
            self._sender.watch_output(new, self._on_message)

    def get(self, msg_id: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._data.get(msg_id, {}))

    def forget(self, msg_ids: list[str]) -> None:
        with self._lock:
            gone = [m for m in msg_ids if self._data.pop(m, None) is not None]
        if gone:
            self._sender.unwatch_output(gone)

    def _on_message(self, msg_id: str, msg: Any) -> None:
        """In the I/O thread: a message on IOPub of a watched task."""
        if msg.msg_type != MsgType.DATA_MESSAGE:
            return
        data = reply_data(msg.content)
        if data is not None:
            with self._lock:
                if msg_id in self._data:
                    self._data[msg_id].update(data)
