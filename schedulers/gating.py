"""What a request's scheduling flags ask before it may run: targets, retries, timeouts,
and dependencies on other tasks (after / follow), released or failed as tasks finish (a
part of the TaskBook; the graph itself is schedulers/graph.py).
"""

from __future__ import annotations

import heapq
import logging
from typing import Any

from zpar.errors import ImpossibleDependency, ProtocolError

from .flags import parse_gates, parse_outcomes, parse_retries, parse_timeout
from .placement import Placement
from .state import WAITING, Task

log = logging.getLogger(__name__)


class Gating(Placement):
    """Flags read, dependencies waited on, and tasks released when they are met."""

    def _read_flags(self, task: Task, md: dict[str, Any]) -> bool:
        """Apply the request's scheduling flags; False if the task is settled or waits."""
        try:
            gates = parse_gates(md)
            known = parse_outcomes(md)
            task.retries = parse_retries(md)
            timeout = parse_timeout(md)
        except ValueError as e:
            self._fail(task, ProtocolError, f"task {task.msg_id}: {e}")
            return False
        targets = md.get("targets")
        if targets is not None:
            uuids = self._target_uuids(targets)
            if isinstance(uuids, str):
                self._fail(task, ImpossibleDependency, uuids)
                return False
            task.targets = uuids
        if timeout:  # 0: none, as ipyparallel
            task.timeout = timeout
            self._arm(task)
        if not gates:
            return True
        task.gates = gates
        verdict = self.graph.add(task, known)
        if verdict is None:
            task.state = WAITING
            return False
        if verdict:
            self._fail(task, ImpossibleDependency, f"task {task.msg_id}: {verdict}")
            return False
        return self._follow(task)

    def _arm(self, task: Task) -> None:
        """Start the task's timeout: at submission, and again each time it waits for an
        engine anew after a retry (ipyparallel arms it whenever the task is queued); an
        older deadline still in the heap is then stale (tick skips it)."""
        assert task.timeout is not None
        task.deadline = self.clock() + task.timeout
        heapq.heappush(self.deadlines, (task.deadline, next(self._seq), task))

    def _follow(self, task: Task) -> bool:
        """Dependencies met: narrow the targets to where followed tasks ran."""
        for gate in task.gates:
            if gate.follow:
                where = frozenset(gate.engines)
                task.targets = where if task.targets is None else task.targets & where
                if not task.targets & self.engines.keys():
                    self._fail(
                        task,
                        ImpossibleDependency,
                        f"task {task.msg_id} follows tasks whose engines are gone "
                        "(or not among its targets)",
                    )
                    return False
        task.gates = ()
        return True

    def _target_uuids(self, targets: Any) -> frozenset[bytes] | str:
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

    def _finished(self, msg_id: str, ok: bool, uuid: bytes) -> None:
        """Record an outcome and release (or fail) what waited on it, iteratively: a failed
        chain of thousands of tasks unwinds without recursion."""
        self._settle.extend(self.graph.finished(msg_id, (ok, uuid)))
        if self._settling or not self._settle:
            return
        self._settling = True
        try:
            while self._settle:
                task, verdict = self._settle.popleft()
                if verdict:
                    self._fail(task, ImpossibleDependency, f"task {task.msg_id}: {verdict}")
                elif self._follow(task):
                    self._submit(task)
        finally:
            self._settling = False

    def outcomes(self, content: dict[str, Any]) -> None:
        """A client's word on tasks it saw finish elsewhere (direct tasks it depends on)."""
        try:
            outcomes = parse_outcomes(content)
        except ValueError as e:
            log.warning("malformed task_outcomes dropped: %s", e)
            return
        for msg_id, (ok, uuid) in outcomes.items():
            if msg_id not in self.graph.done:
                self._finished(msg_id, ok, uuid)
