"""The engine's side of ``publish_data`` (zpar.datapub; ipyparallel's
``ipyparallel.engine.datapub``): what a task published, merged for its reply's metadata,
and sent live as IOPub ``data_message``s to whoever watches.

The kernel starts it with each task's header and stops it when the task ends; ``stop``
gives the pickled merge for the reply (None when nothing was published: most tasks pay a
dict lookup and nothing else).
"""

from __future__ import annotations

from typing import Any

import cloudpickle

from zpar.datapub import publish_data, set_publisher
from zpar.wire.messages import DataMessage, MsgType

from .capture import Publish

__all__ = ["DataPublisher", "publish_data"]


class DataPublisher:
    """Data published by the running task (one task at a time: the kernel's)."""

    def __init__(self, publish: Publish | None) -> None:
        self._publish = publish
        self._parent: dict[str, Any] | None = None
        self._data: dict[str, Any] | None = None
        set_publisher(self.publish_data)

    def start(self, parent: dict[str, Any]) -> None:
        self._parent = parent
        self._data = None

    def stop(self) -> bytes | None:
        """The task ended: the pickled merge of what it published, None if nothing."""
        data, self._data, self._parent = self._data, None, None
        return None if data is None else cloudpickle.dumps(data, protocol=5)

    def publish_data(self, data: dict[str, Any]) -> None:
        if self._parent is None:
            raise RuntimeError("publish_data works inside a task on an engine")
        if self._data is None:
            self._data = {}
        self._data.update(data)
        if self._publish is not None:
            content = DataMessage(list(data), cloudpickle.dumps(data, protocol=5)).as_dict()
            self._publish(MsgType.DATA_MESSAGE, content, self._parent)
