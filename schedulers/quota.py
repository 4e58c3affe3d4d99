"""QueueQuota: how much of each client's work the task scheduler holds, sans-IO (issue 13
item 3).

A client keeps at most a window of work requests unanswered in the controller and holds
the rest itself (client/window.py); this is the scheduler's side of that bargain, for a
client that ignores it (an old or hostile one, a raw DEALER):

- **Per client**: a task arriving while its client already has ``per_client`` tasks, or
  ``per_client_bytes`` of frames, unfinished here is refused (the caller answers it with
  SubmissionRefused naming the limit, and counts the refusal as ``over_window``). A client
  with nothing here always gets one task in, however large, as its window promises.
- **All clients**: every unfinished task costs its frames plus ``task_cost`` (the Python
  objects around it); above ``budget`` the caller stops reading submissions until enough
  tasks finish (``over_budget``): libzmq's bounded receive pipes fill and clients' own
  sockets queue the rest, while replies and engines keep flowing.

A task is charged when it is accepted and released when the scheduler no longer holds it
(its reply relayed, or an error sent in its stead); the caller decides those moments.
"""

from __future__ import annotations

from zpar.constants import (
    CLIENT_QUEUE_BYTES,
    CLIENT_QUEUE_LIMIT,
    QUEUE_BUDGET,
    QUEUED_TASK_COST,
)

#: The refusal reason counted in Session.refused (and `zpar cluster status`).
OVER_WINDOW = "over_window"


class QueueQuota:
    """Unfinished tasks by client: counts, bytes, and the scheduler-wide total."""

    def __init__(
        self,
        per_client: int = CLIENT_QUEUE_LIMIT,
        per_client_bytes: int = CLIENT_QUEUE_BYTES,
        budget: int = QUEUE_BUDGET,
        task_cost: int = QUEUED_TASK_COST,
    ) -> None:
        for name, v in (
            ("per_client", per_client),
            ("per_client_bytes", per_client_bytes),
            ("budget", budget),
        ):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        self.per_client = per_client
        self.per_client_bytes = per_client_bytes
        self.budget = budget
        self.task_cost = task_cost
        self._tasks: dict[str, tuple[bytes, int]] = {}  # msg_id -> (client, frame bytes)
        self._clients: dict[bytes, list[int]] = {}  # client -> [tasks, frame bytes]
        #: frames + task_cost of every unfinished task
        self.total = 0
        self.refused = 0

    def holds(self, msg_id: str) -> bool:
        return msg_id in self._tasks

    def charge(self, client: bytes, msg_id: str, nbytes: int) -> str | None:
        """Count task ``msg_id`` of ``client`` (``nbytes`` of frames) as held here; None if
        accepted, else why it is refused (nothing counted)."""
        held = self._clients.get(client)
        if held is not None and held[0]:
            tasks, size = held
            why = None
            if tasks >= self.per_client:
                why = f"{tasks} tasks, the limit per client is {self.per_client}"
            elif size + nbytes > self.per_client_bytes:
                why = (
                    f"{size} + {nbytes} bytes of tasks, the limit per client is "
                    f"{self.per_client_bytes} bytes"
                )
            if why is not None:
                self.refused += 1
                return (
                    f"task {msg_id} refused: its client already has {why} unfinished in the "
                    "task scheduler (a client that ignores its submission window; see "
                    "docs/security.md)"
                )
        else:
            held = self._clients[client] = [0, 0]
        held[0] += 1
        held[1] += nbytes
        self._tasks[msg_id] = (client, nbytes)
        self.total += nbytes + self.task_cost
        return None

    def release(self, msg_id: str) -> None:
        """Task ``msg_id`` is no longer held here (answered); unknown ids are ignored."""
        entry = self._tasks.pop(msg_id, None)
        if entry is None:
            return
        client, nbytes = entry
        held = self._clients[client]
        held[0] -= 1
        held[1] -= nbytes
        if not held[0]:
            del self._clients[client]
        self.total -= nbytes + self.task_cost

    @property
    def over_budget(self) -> bool:
        """True while the scheduler should read no more submissions."""
        return self.total > self.budget

    def of(self, client: bytes) -> tuple[int, int]:
        """(tasks, frame bytes) of ``client`` held here."""
        held = self._clients.get(client)
        return (held[0], held[1]) if held is not None else (0, 0)

    def counts(self) -> dict[str, int]:
        """{tasks, clients, bytes, refused}: for logs and status."""
        return {
            "tasks": len(self._tasks),
            "clients": len(self._clients),
            "bytes": self.total,
            "refused": self.refused,
        }
