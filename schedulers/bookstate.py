"""The task book's state, shared by the parts it is made of.

TaskBook (schedulers/book.py) is one object assembled from parts of one responsibility
each: placement (schedulers/placement.py), prefetch steal-back (schedulers/prefetch.py),
scheduling flags and dependencies (schedulers/gating.py), and the book itself (submissions,
replies, aborts, clients, engines). They share the state set up here; no part touches a
socket (events in, instructions out in ``out``).
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from zpar.constants import STEAL_AFTER, TASK_HWM, TASK_HWM_LOADED, TASK_SCHEME
from zpar.errors import ZparError
from zpar.wire.messages import ReplyStatus

from .graph import DependencyGraph
from .instructions import Instruction
from .ledger import Ledger, OpenLedger
from .schemes import EngineSlot, get_scheme
from .state import Task


class BookState:
    """Every task not answered yet, the engines and what each holds."""

    def __init__(
        self,
        scheme: str = TASK_SCHEME,
        hwm: int = TASK_HWM,
        *,
        ledger: Ledger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if hwm < 0:
            raise ValueError(f"hwm must be >= 0 (0: unlimited), got {hwm}")
        self.choose = get_scheme(scheme)
        self.hwm = hwm
        self._depth = hwm or (1 << 62)  # an engine's room while it answers (0: no limit)
        #: its room when it answers fast while tasks wait for room: prefetch grows under
        #: load, for engines whose tasks take less than fast_answer (schedulers/prefetch.py)
        self._loaded_depth = max(hwm, TASK_HWM_LOADED) if hwm > 1 else self._depth
        self.fast_answer = STEAL_AFTER / TASK_HWM_LOADED
        #: prefetch depth > 1 takes tasks back from stalled engines; unlimited (0) asked
        #: for every task on the engines at once, and 1 prefetches nothing
        self.steals = hwm > 1
        self.steal_after = STEAL_AFTER
        self.ledger: Ledger = ledger or OpenLedger()
        self.clock = clock
        self.out: deque[Instruction] = deque()
        self.engines: dict[bytes, EngineSlot] = {}  # registration order
        self.ids: dict[int, bytes] = {}
        self.live: dict[str, Task] = {}  # every task not answered yet, whatever its state
        self.broadcasts: dict[tuple[str, bytes], Task] = {}  # (msg_id, engine): not answered
        self.queue: deque[Task] = deque()  # waiting for room, any engine will do
        self.restricted: list[Task] = []  # waiting for room on one of the engines it may use
        self.held: dict[bytes, deque[Task]] = {}  # by client, refused by the ledger for now
        self.graph = DependencyGraph()
        self.deadlines: list[tuple[float, int, Task]] = []  # heap of task timeouts
        self._settle: deque[tuple[Task, str]] = deque()
        self._settling = False
        self._seq = itertools.count()
        self.dispatched = 0
        #: element requests (zpar.elements) by msg_id: how many placements of each are live
        self.element_placements: dict[str, int] = {}
        self._parts_made = 0
        #: element requests aborted by their client: what their engines give back fails
        self.aborting: set[str] = set()
        #: engines whose task connection was not up when we first sent them a task
        self.paused: set[bytes] = set()

    if TYPE_CHECKING:  # what the parts ask of the whole book (schedulers/book.py)

        def _fail(
            self, task: Task, error: type[ZparError], evalue: str, status: str = ReplyStatus.ERROR
        ) -> None: ...

        def _remove(self, uuid: bytes, reason: str, drain: bool = True) -> None: ...

        def _retry(self, task: Task, why: str) -> None: ...
