"""What a request's scheduling flags ask before it may run: targets, retries, timeouts,
and dependencies on other tasks (after / follow), released as tasks finish (a part the
TaskBook owns; the graph itself is schedulers/graph.py).

Gates decides and records; the book answers the tasks it says can never run.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Any

from zpar.errors import ImpossibleDependency, ProtocolError, ZparError

from .flags import parse_gates, parse_outcomes, parse_retries, parse_timeout
from .graph import DependencyGraph, Outcome
from .schemes import EngineSlot
from .state import WAITING, Task

log = logging.getLogger(__name__)

#: What ``Gates.read`` says of a request: True, it may be placed now; False, it waits for
#: its dependencies; (error, why), it can never run.
Verdict = bool | tuple[type[ZparError], str]


class Gates:
    """Flags read, dependencies waited on, timeouts armed.

    ``engines`` and ``ids``: the book's engine table and its id -> uuid map (read)."""

    def __init__(
        self,
        engines: dict[bytes, EngineSlot],
        ids: dict[int, bytes],
        clock: Callable[[], float],
    ) -> None:
        self.engines = engines
        self.ids = ids
        self.clock = clock
        self.graph = DependencyGraph()
        #: ``finished(msg_id, outcome)``: record an outcome; the waiting tasks it settles,
        #: each with "" (met) or why it can never be met (the graph's own, on every reply)
        self.finished: Callable[[str, Outcome], list[tuple[Task, str]]] = self.graph.finished
        self.deadlines: list[tuple[float, int, Task]] = []  # heap of task timeouts
        self._seq = itertools.count()

    def read(self, task: Task, md: dict[str, Any]) -> Verdict:
        """Apply the request's scheduling flags to ``task``."""
        try:
            gates = parse_gates(md)
            known = parse_outcomes(md)
            task.retries = parse_retries(md)
            timeout = parse_timeout(md)
        except ValueError as e:
            return ProtocolError, f"task {task.msg_id}: {e}"
        targets = md.get("targets")
        if targets is not None:
            uuids = self.target_uuids(targets)
            if isinstance(uuids, str):
                return ImpossibleDependency, uuids
            task.targets = uuids
        if timeout:  # 0: none, as ipyparallel
            task.timeout = timeout
            self.arm(task)
        if not gates:
            return True
        task.gates = gates
        verdict = self.graph.add(task, known)
        if verdict is None:
            task.state = WAITING
            return False
        if verdict:
            return ImpossibleDependency, f"task {task.msg_id}: {verdict}"
        why = self.follow(task)
        return True if why is None else (ImpossibleDependency, why)

    def arm(self, task: Task) -> None:
        """Start the task's timeout: at submission, and again each time it waits for an
        engine anew after a retry (ipyparallel arms it whenever the task is queued); an
        older deadline still in the heap is then stale (``expired`` skips it)."""
        assert task.timeout is not None
        task.deadline = self.clock() + task.timeout
        heapq.heappush(self.deadlines, (task.deadline, next(self._seq), task))

    def next_deadline(self) -> float | None:
        return self.deadlines[0][0] if self.deadlines else None

    def expired(self, now: float) -> Iterator[Task]:
        """Tasks whose newest deadline passed (whatever their state now)."""
        heap = self.deadlines
        while heap and heap[0][0] <= now:
            due, _, task = heapq.heappop(heap)
            if due == task.deadline:  # else re-armed since (a retry): the newer one counts
                yield task

    def follow(self, task: Task) -> str | None:
        """Dependencies met: narrow the targets to where followed tasks ran; why it can
        never run, or None."""
        for gate in task.gates:
            if gate.follow:
                where = frozenset(gate.engines)
                task.targets = where if task.targets is None else task.targets & where
                if not task.targets & self.engines.keys():
                    return (
                        f"task {task.msg_id} follows tasks whose engines are gone "
                        "(or not among its targets)"
                    )
        task.gates = ()
        return None

    def target_uuids(self, targets: Any) -> frozenset[bytes] | str:
        """The uuids of ``targets``, or a message saying why they cannot be met."""
        if isinstance(targets, int):
            targets = [targets]
        if not isinstance(targets, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in targets
        ):
            return f"targets must be a list of engine ids, got {targets!r}"
        uuids = frozenset(self.ids[t] for t in targets if t in self.ids)
        if not uuids:
            return f"none of the target engines {targets} is registered (ids: {sorted(self.ids)})"
        return uuids

    def known(self, msg_id: str) -> bool:
        return msg_id in self.graph.done

    def remove(self, task: Task) -> None:
        self.graph.remove(task)

    @staticmethod
    def outcomes(content: dict[str, Any]) -> dict[str, Outcome] | None:
        """A client's task_outcomes: {msg_id: outcome}, None if malformed (logged)."""
        try:
            return parse_outcomes(content)
        except ValueError as e:
            log.warning("malformed task_outcomes dropped: %s", e)
            return None
