"""Broadcast requests in the task book (a part the TaskBook owns): one request, a copy of
its frames to each target engine, one reply from each. The client sends its payload once,
whatever the number of engines; each copy holds a slot of its engine until answered.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .instructions import Instruction, SendTask
from .schemes import EngineSlot
from .state import RUNNING, Task

__all__ = ["Broadcasts"]


class Broadcasts:
    """The copies of broadcast requests not answered yet, one per (msg_id, engine uuid)."""

    def __init__(self, engines: dict[bytes, EngineSlot], out: list[Instruction]) -> None:
        """``engines``: the book's, by uuid; ``out``: the book's instructions, in order."""
        self.engines = engines
        self.copies: dict[tuple[str, bytes], Task] = {}
        self._out = out

    def place(self, task: Task, uuids: Iterable[bytes]) -> None:
        """A copy of ``task`` to each engine of ``uuids`` (in engine id order), sent now:
        broadcasts wait for no room."""
        engines = self.engines
        for uuid in sorted(uuids, key=lambda u: engines[u].id):
            engine = engines[uuid]
            copy = Task(task.msg_id, task.client, task.msg, None, engine, RUNNING, broadcast=True)
            engine.load += 1
            engine.tasks.add(task.msg_id)
            self.copies[(task.msg_id, uuid)] = copy
            self._out.append(SendTask(copy, engine))

    def answered(self, msg_id: Any, uuid: bytes) -> EngineSlot | None:
        """Engine ``uuid`` answered its copy of ``msg_id``: the engine, its slot given back;
        None if no copy of ours waits for that reply."""
        copy = self.copies.pop((msg_id, uuid), None) if self.copies else None
        if copy is None:
            return None
        engine = copy.engine
        assert engine is not None
        engine.load -= 1
        engine.tasks.discard(msg_id)
        return engine

    def undeliverable(self, copy: Task, engine: EngineSlot) -> None:
        """The copy for ``engine`` found no connection: taken out (the book fails it)."""
        engine.load -= 1
        engine.tasks.discard(copy.msg_id)
        self.copies.pop((copy.msg_id, engine.uuid), None)

    def lost(self, uuid: bytes, msg_ids: Iterable[str]) -> list[Task]:
        """The copies engine ``uuid`` held of ``msg_ids``, taken out (it is gone)."""
        copies = self.copies
        return [copies.pop((m, uuid)) for m in msg_ids if (m, uuid) in copies]

    def holds(self, msg_id: str) -> bool:
        """Does a copy of ``msg_id`` still wait for an engine's reply?"""
        copies = self.copies
        return bool(copies) and any((msg_id, u) in copies for u in self.engines)
