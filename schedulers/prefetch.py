"""Prefetch steal-back: taking back what a stalled engine has not started (a part of the
TaskBook; docs/decisions.md, "Prefetch").

Each engine may hold ``hwm`` tasks (default 2), so it never idles across the scheduler's
round trip; one that answers while tasks wait in the queue may hold TASK_HWM_LOADED (8),
so they reach it in batches. An engine holding more than one task that has not answered for
``steal_after`` seconds is stalled on a long task: it gets one task at a time until it
answers, and the tasks waiting behind the long one are asked back (RevokeTasks) and placed
elsewhere, so short tasks are never trapped behind a long one.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from zpar.wire.monitor import TaskDest

from .instructions import HubEvent, RevokeTasks
from .placement import Placement
from .schemes import EngineSlot
from .state import RUNNING

log = logging.getLogger(__name__)


class Prefetch(Placement):
    """Stalled engines found, their unstarted tasks revoked and placed anew."""

    def stall_deadline(self) -> float | None:
        """When the next engine holding prefetched tasks counts as stalled, None if none."""
        due = None
        if self.steals:
            for e in self.engines.values():
                if e.revoking:
                    continue
                if (e.load > 1 and e.depth > 1) or (self.element_placements and self._tails(e)):
                    at = e.since + self.steal_after
                    if due is None or at < due:
                        due = at
        return due

    def _steal(self, now: float) -> None:
        """An engine holding more than one task that has not answered for ``steal_after``
        is stalled on a long task: it gets one task at a time until it answers, and the
        tasks waiting behind the long one are asked back, to run elsewhere."""
        for engine in self.engines.values():
            if engine.revoking or now - engine.since < self.steal_after:
                continue
            # a map's element request there: its unstarted elements come back too
            tails = self._tails(engine) if self.element_placements else None
            if engine.load < 2 and not tails:
                continue
            held = []
            if engine.depth > 1:
                log.info("engine %d stalled: one task at a time until it answers", engine.id)
            engine.depth = 1  # what it gives back goes elsewhere
            if engine.load > 1:
                held = [m for m in engine.tasks if self._placed_on(m, engine)]
            if held or tails:
                engine.revoking = True
                self.out.append(RevokeTasks(engine, held, tails or None))

    def _placed_on(self, msg_id: str, engine: EngineSlot) -> bool:
        task = self.live.get(msg_id)
        return task is not None and task.engine is engine and task.state == RUNNING

    if TYPE_CHECKING:  # schedulers/elements.py

        def _tails(self, engine: EngineSlot) -> dict[str, int]: ...

    def revoked(self, uuid: bytes, msg_ids: list[str]) -> None:
        """An engine's revoke_reply: ``msg_ids`` will never run there; place them again
        (signed anew: the engine drops the copy it holds)."""
        engine = self.engines.get(uuid)
        if engine is None:
            return  # gone meanwhile: its tasks were retried or failed with it
        engine.revoking = False
        back = []
        for msg_id in msg_ids:
            if isinstance(msg_id, str) and self._placed_on(msg_id, engine):
                task = self.live[msg_id]
                self._unplace(task, engine)
                task.attempt += 1
                back.append(task)
                self.out.append(HubEvent(TaskDest(msg_id, "")))  # unassigned again
        if back:
            log.info("engine %d gave back %d unstarted task(s)", engine.id, len(back))
        for task in reversed(back):
            self._enqueue(task, front=True)
        self._drain_queue()

    def _answered_by(self, engine: EngineSlot) -> None:
        """An engine answered: it is not stalled, and its prefetch depth is back: deeper
        (``_loaded_depth``) while tasks wait for room if it answered within
        ``fast_answer`` of its previous answer (or of its first task), so the work it
        holds stays within about steal_after and no task waits long behind others there;
        ``hwm`` otherwise."""
        now = self.clock()
        fast = now - engine.since < self.fast_answer
        engine.since = now
        engine.depth = self._loaded_depth if fast and self.queue else self._depth
        engine.revoking = False  # a revoke still on its way is answered all the same
