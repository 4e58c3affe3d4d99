"""``publish_data`` for tasks on engines: ipyparallel's ``ipyparallel.datapub`` (and
``ipyparallel.engine.datapub``), seen on the client as ``ar.data``.

A task calls ``publish_data({'i': i})`` as often as it likes; the client's ``ar.data`` is
the merge of everything published so far (live while the task runs, over IOPub), and the
reply carries the final merge, so the result always has it. The engine installs the
publisher when its kernel starts (zpar.engine.datapub); elsewhere publish_data says it
runs only inside a task on an engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_publisher: Callable[[dict[str, Any]], None] | None = None


def set_publisher(publisher: Callable[[dict[str, Any]], None] | None) -> None:
    """Install (or remove, with None) the engine's publisher."""
    global _publisher
    _publisher = publisher


def publish_data(data: dict[str, Any]) -> None:
    """Publish ``data`` (a dict: think of it as a namespace) to the client of the running
    task, where ``ar.data`` is updated with it."""
    if not isinstance(data, dict):
        raise TypeError(f"publish_data takes a dict, got {type(data).__name__}")
    if _publisher is None:
        raise RuntimeError(
            "publish_data works inside a task on a zpar engine (apply or execute), where it "
            "updates the task's ar.data on the client"
        )
    _publisher(data)


__all__ = ["publish_data"]
