"""Prefetch: how many tasks each engine may hold, and taking back what a stalled engine has
not started (a part the TaskBook owns; docs/decisions.md, "Prefetch").

Each engine may hold ``hwm`` tasks (default 2), so it never idles across the scheduler's
round trip; one that answers while tasks wait in the queue may hold TASK_HWM_LOADED (8),
so they reach it in batches. An engine holding more than one task that has not answered for
``steal_after`` seconds is stalled on a long task: it gets one task at a time until it
answers, and the tasks waiting behind the long one are asked back (RevokeTasks) and placed
elsewhere, so short tasks are never trapped behind a long one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from zpar.constants import STEAL_AFTER, TASK_HWM_LOADED
from zpar.wire.monitor import TaskDest

from .elements import ElementParts
from .instructions import HubEvent, Instruction, RevokeTasks
from .placement import Placement
from .schemes import EngineSlot
from .state import Task, placed_on

log = logging.getLogger(__name__)


class Prefetch:
    """Engines' depths, stalled engines found, their unstarted tasks revoked and placed
    anew. ``engines`` and ``live``: the book's tables (read); ``placement`` and
    ``elements``: the parts it moves tasks back through and asks for element tails."""

    def __init__(
        self,
        hwm: int,
        engines: dict[bytes, EngineSlot],
        live: dict[str, Task],
        placement: Placement,
        elements: ElementParts,
        clock: Callable[[], float],
        out: list[Instruction],
    ) -> None:
        self.engines = engines
        self.live = live
        self.placement = placement
        self.elements = elements
        self.clock = clock
        self.out = out
        #: an engine's room while it answers (0: no limit)
        self.depth = hwm or (1 << 62)
        #: its room when it answers fast while tasks wait for room: prefetch grows under
        #: load, for engines whose tasks take less than fast_answer
        self.loaded_depth = max(hwm, TASK_HWM_LOADED) if hwm > 1 else self.depth
        self.fast_answer = STEAL_AFTER / TASK_HWM_LOADED
        #: prefetch depth > 1 takes tasks back from stalled engines; unlimited (0) asked
        #: for every task on the engines at once, and 1 prefetches nothing
        self.steals = hwm > 1
        self.steal_after = STEAL_AFTER

    def stall_deadline(self) -> float | None:
        """When the next engine holding prefetched tasks counts as stalled, None if none."""
        due = None
        if self.steals:
            # element tails come back from a stalled engine only while work waits (steal)
            elements = self.elements if self.elements.placements and self.placement.queue else None
            for e in self.engines.values():
                if e.revoking:
                    continue
                if (e.load > 1 and e.depth > 1) or (elements and elements.tails(e)):
                    at = e.since + self.steal_after
                    if due is None or at < due:
                        due = at
        return due

    def steal(self, now: float) -> None:
        """An engine holding more than one task that has not answered for ``steal_after``
        is stalled on a long task: it gets one task at a time until it answers, and the
        tasks waiting behind the long one are asked back, to run elsewhere. The unstarted
        elements of a map's request running there come back too while work waits in the
        queue (placed before it, they go first); else they stay until an engine runs dry
        (ElementParts.steal_for_idle): pushed to an engine busy with its own run, they
        bounced between the engines at each slow element."""
        live = self.live
        elements = self.elements if self.elements.placements and self.placement.queue else None
        for engine in self.engines.values():
            if engine.revoking or now - engine.since < self.steal_after:
                continue
            tails = elements.tails(engine) if elements else None
            if engine.load < 2 and not tails:
                continue
            held = []
            if engine.depth > 1:
                log.info("engine %d stalled: one task at a time until it answers", engine.id)
            engine.depth = 1  # what it gives back goes elsewhere
            if engine.load > 1:
                held = [m for m in engine.tasks if placed_on(live.get(m), engine)]
            if held or tails:
                engine.revoking = True
                self.out.append(RevokeTasks(engine, held, tails or None))

    def revoked(self, engine: EngineSlot, msg_ids: list[str]) -> None:
        """``msg_ids`` will never run on ``engine``: place them again (signed anew: the
        engine drops the copy it holds)."""
        engine.revoking = False
        back = []
        for msg_id in msg_ids:
            task = self.live.get(msg_id) if isinstance(msg_id, str) else None
            if placed_on(task, engine):
                assert task is not None
                self.placement.unplace(task, engine)
                task.attempt += 1
                back.append(task)
                self.out.append(HubEvent(TaskDest(task.msg_id, "")))  # unassigned again
        if back:
            log.info("engine %d gave back %d unstarted task(s)", engine.id, len(back))
        for task in reversed(back):
            self.placement.enqueue(task, front=True)

    def answered_by(self, engine: EngineSlot, deepen: bool = True) -> None:
        """An engine answered: it is not stalled, and its prefetch depth is back: deeper
        (``loaded_depth``) while tasks wait for room if it answered within ``fast_answer``
        of its previous answer (or of its first task), so the work it holds stays within
        about steal_after and no task waits long behind others there; ``hwm`` otherwise.
        ``deepen`` False: a part of an element request, quick as each element may be,
        says nothing of how long the requests it would take hold it (a run of elements
        each)."""
        now = self.clock()
        fast = deepen and now - engine.since < self.fast_answer
        engine.since = now
        engine.depth = self.loaded_depth if fast and self.placement.queue else self.depth
        engine.revoking = False  # a revoke still on its way is answered all the same
