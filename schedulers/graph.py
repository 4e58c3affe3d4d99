"""Which waiting tasks a finished task releases: the scheduler's dependency bookkeeping.

Each dependency (``after`` or ``follow``) of a waiting task is a Gate that counts its ids
as they finish, so a task is re-examined once per finished id it waits on, in O(1): a chain
of n dependent tasks costs O(n), and a task after 10,000 others costs O(10,000) in total.

Outcomes of finished tasks are remembered in a bounded window (DONE_WINDOW): long enough
to cover a dependency that finished while the dependent request was on its way here. Older
outcomes come from the client, which sends what it knows of its own finished tasks in the
request (metadata "outcomes") and tells us when a direct (MUX) task we wait on finishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zpar.dependency import Dependency
from zpar.wire.recent import RecentKeys

#: Outcomes of finished tasks kept for dependencies still on their way (msg_id -> outcome).
DONE_WINDOW = 65_536

#: (succeeded, engine uuid it ran on; b"" if it never reached an engine)
Outcome = tuple[bool, bytes]


@dataclass(slots=True, eq=False)
class Gate:
    """One Dependency, counted as its ids finish."""

    pending: set[str]
    all: bool
    success: bool
    failure: bool
    total: int
    follow: bool
    met: int = 0
    bad: int = 0
    engines: set[bytes] = field(default_factory=set)

    @classmethod
    def of(cls, dep: Dependency, follow: bool) -> Gate:
        return cls(set(dep), dep.all, dep.success, dep.failure, len(dep), follow)

    def feed(self, msg_id: str, outcome: Outcome) -> None:
        self.pending.discard(msg_id)
        ok, uuid = outcome
        if (ok and self.success) or (not ok and self.failure):
            self.met += 1
            if uuid:
                self.engines.add(uuid)
            elif self.follow:  # it never ran anywhere: there is no place to follow
                self.met -= 1
                self.bad += 1
        else:
            self.bad += 1

    def state(self) -> str | None:
        """None: keep waiting; "": met; otherwise why it can never be met."""
        want = "succeed" if not self.failure else ("fail" if not self.success else "finish")
        if self.all:
            if self.bad:
                return f"a task it depends on did not {want} (all of {self.total} must)"
            if self.met < self.total:
                return None
            if self.follow and len(self.engines) > 1:
                return (
                    f"follow=all: the tasks it follows ran on {len(self.engines)} different "
                    "engines, so no single engine can follow them all"
                )
            return ""
        if self.met:
            return ""
        if self.bad >= self.total:
            return f"none of the {self.total} tasks it depends on did {want}"
        return None


class OutcomeWindow:
    """The outcomes of the last ``window`` finished tasks, in fixed memory.

    Each entry is the msg_id's 64-bit hash and the index of its outcome among the distinct
    (ok, engine) pairs seen (two per engine): 2 MB for 65,536 entries from the start,
    where a dict of msg_id strings grew to 8 MB. Two msg_ids in the window sharing a hash
    (a 2**-33 chance at 65,536) would share an outcome."""

    __slots__ = ("_keys", "_outcomes", "_index")

    def __init__(self, window: int) -> None:
        self._keys = RecentKeys(window)
        self._outcomes: list[Outcome] = []
        self._index: dict[Outcome, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, msg_id: str) -> bool:
        return hash(msg_id) in self._keys

    def get(self, msg_id: str) -> Outcome | None:
        i = self._keys.get(hash(msg_id))
        return None if i is None else self._outcomes[i]

    def remember(self, msg_id: str, outcome: Outcome) -> None:
        i = self._index.get(outcome)
        if i is None:
            i = self._index[outcome] = len(self._outcomes)
            self._outcomes.append(outcome)
        self._keys.add(hash(msg_id), i)


class DependencyGraph:
    """Waiting tasks indexed by the ids they wait on, and recent outcomes."""

    def __init__(self, window: int = DONE_WINDOW) -> None:
        self.window = window
        self.done = OutcomeWindow(window)
        self.waiting: dict[str, Any] = {}  # msg_id -> Task
        self.dependents: dict[str, dict[str, Any]] = {}  # dep msg_id -> {msg_id: Task}

    def remember(self, msg_id: str, outcome: Outcome) -> None:
        self.done.remember(msg_id, outcome)

    def add(self, task: Any, known: dict[str, Outcome]) -> str | None:
        """Feed what is already known; None if the task must wait, else its gates' verdict
        ("" for met, or why it is impossible)."""
        done = self.done
        verdict = ""
        for gate in task.gates:
            for msg_id in list(gate.pending):
                outcome = done.get(msg_id) or known.get(msg_id)
                if outcome is not None:
                    gate.feed(msg_id, outcome)
            state = gate.state()
            if state:
                return state
            if state is None:
                verdict = None  # type: ignore[assignment]
        if verdict is None:
            self.waiting[task.msg_id] = task
            for gate in task.gates:
                for msg_id in gate.pending:
                    self.dependents.setdefault(msg_id, {})[task.msg_id] = task
        return verdict

    def finished(self, msg_id: str, outcome: Outcome) -> list[tuple[Any, str]]:
        """Record an outcome; the waiting tasks it settles, each with its verdict."""
        self.remember(msg_id, outcome)
        tasks = self.dependents.pop(msg_id, None)
        if not tasks:
            return []
        settled = []
        for task in tasks.values():
            verdict = ""
            for gate in task.gates:
                if msg_id in gate.pending:
                    gate.feed(msg_id, outcome)
                state = gate.state()
                if state:
                    verdict = state
                    break
                if state is None:
                    verdict = None  # type: ignore[assignment]
            if verdict is not None:
                self.remove(task)
                settled.append((task, verdict))
        return settled

    def remove(self, task: Any) -> bool:
        """Stop tracking ``task`` (settled, aborted or timed out); False if it was not."""
        if self.waiting.pop(task.msg_id, None) is None:
            return False
        for gate in task.gates:
            for dep in gate.pending:
                index = self.dependents.get(dep)
                if index is not None:
                    index.pop(task.msg_id, None)
                    if not index:
                        del self.dependents[dep]
        return True
