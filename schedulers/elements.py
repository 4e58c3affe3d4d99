"""Element requests in the task book: parts answered and counted, tails taken back, parts
placed anew (a part the TaskBook owns; zpar.elements, docs/decisions.md "A load-balanced
map, one task per element").

An element request carries a run of a map's elements, ``[lo, hi]``; its engine answers in
parts as elements finish. The book keeps, per placement, the positions not answered yet
(``Task.elements``): each part (``ElementParts.reply``) moves ``lo`` up, and the last
(``final``) frees the engine's slot; the book then releases the request's dependents once
its last placement answered. Elements not started can come back:

- from an engine *stalled* on a long element (no answer for ``steal_after``) while work
  waits in the queue: every unstarted element (the revoke_request's ``tails``, keep 0),
  placed first;
- to an engine left *idle* with nothing queued, from another engine, once the request was
  placed there at least IDLE_STEAL_AFTER ago: from a stalled engine every unstarted
  element, else the second half of the request with most unanswered elements.

Nothing is asked back while every engine has work and nothing waits: each engine works
through its own run, and a slow element delays only the elements behind it until another
engine runs dry (pushed back at once, they went to an engine busy with its own run and
bounced between the engines at each slow element: bench/skewsim.py).

What comes back is a request of its own, with the same frames, under a part id
(``<msg_id>#<lo>.<n>``) and its positions in the metadata, placed first in the queue. The
request counts as finished for tasks that depend on it once its last placement answered.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from zpar.constants import STEAL_AFTER
from zpar.elements import (
    ELEMENTS,
    ERRORS,
    FINAL,
    element_id,
    element_range,
    origin_of,
    part_id,
)
from zpar.errors import TaskAborted
from zpar.wire import Message
from zpar.wire.messages import ReplyStatus

from .instructions import Instruction, RelayReply, RevokeTasks
from .placement import Failing, Placement
from .schemes import EngineSlot
from .state import DONE, RUNNING, WAITING, Task, placed_on

log = logging.getLogger(__name__)

#: Seconds an element request runs on its engine before an idle engine may take half of
#: its unstarted elements: a map of quick elements ends before (no revoke round trip for
#: it), one of long elements rebalances at its end within a few of them.
IDLE_STEAL_AFTER = 0.005
#: aborts of elements of requests not here yet kept at most (the oldest are dropped): a
#: client names only requests it still awaits, so these arrive, or ended just before
EARLY_ABORTS = 1024


def runs_of(lo: int, hi: int, named: set[int] | None) -> list[tuple[int, int, bool]]:
    """[lo, hi) cut into runs (a, b, aborted): the positions ``named`` (None: all) and
    those between them."""
    if named is None:
        return [(lo, hi, True)] if lo < hi else []
    out: list[tuple[int, int, bool]] = []
    a = lo
    for p in sorted(p for p in named if lo <= p < hi):
        if out and out[-1][2] and out[-1][1] == p:
            out[-1] = (out[-1][0], p + 1, True)
        else:
            if a < p:
                out.append((a, p, False))
            out.append((p, p + 1, True))
        a = p + 1
    if a < hi:
        out.append((a, hi, False))
    return out


class ElementParts:
    """Placements of element requests: counted, split, given back, aborted.

    ``engines`` and ``live``: the book's tables (a part placed anew joins ``live``);
    ``steals``: whether unstarted elements may be asked back at all (prefetch depth > 1)."""

    def __init__(
        self,
        engines: dict[bytes, EngineSlot],
        live: dict[str, Task],
        placement: Placement,
        clock: Callable[[], float],
        out: list[Instruction],
        failing: deque[Failing],
        steals: bool,
        stalled_after: float = STEAL_AFTER,
    ) -> None:
        self.engines = engines
        self.live = live
        self.placement = placement
        self.clock = clock
        self.out = out
        self.failing = failing
        self.steals = steals
        #: an engine that has not answered for this long is stalled on a long element:
        #: an idle engine takes all its unstarted elements, not half
        self.stalled_after = stalled_after
        #: element requests (zpar.elements) by msg_id: how many placements of each are live
        self.placements: dict[str, int] = {}
        self._parts_made = 0
        #: element requests aborted by their client, by msg_id: the positions named (None:
        #: all); what of them comes back or waits here is answered aborted
        self.aborting: dict[str, set[int] | None] = {}
        #: positions named by a client for its requests not here yet (held in its window)
        self.early: OrderedDict[tuple[bytes, str], set[int]] = OrderedDict()

    def start(self, task: Task, md: dict[str, Any]) -> None:
        """A submission's ``elements`` metadata: its positions, counted as one placement
        of its request."""
        rng = element_range(md.get(ELEMENTS))
        if rng is None:
            return
        task.elements = list(rng)
        self.placements[task.msg_id] = 1
        if self.early:
            named = self.early.pop((task.client, task.msg_id), None)
            if named is not None:
                self.aborting[task.msg_id] = named

    def reply(self, task: Task, engine: EngineSlot, client: bytes, reply: Message) -> str | None:
        """An engine's part of an element request ``task`` (the engine's prefetch already
        told): relayed to ``client``; its failed elements placed again on their own; the
        last part (``final``, or one without positions) frees the engine's slot (the task
        is then DONE) and places anew the elements given back meanwhile. The request
        finished for its dependents by this part (its last placement answered), else None:
        the book releases them, then serves its queue and any idle engine."""
        content = reply.content
        rng = element_range(content.get(ELEMENTS))
        elements = task.elements
        assert elements is not None
        if rng is not None:
            elements[0] = max(elements[0], rng[1])
        uuid = engine.uuid
        retrying = self.retried(task, content)
        if rng is not None and not content.get(FINAL):
            # every part is reported: the hub records a map's elements from its parts
            self.out.append(RelayReply(client, uuid, reply, retrying=retrying))
            if retrying:
                self.retry(task, retrying, uuid)
                self.placement.drain()
            return None
        engine.load -= 1
        engine.tasks.discard(task.msg_id)
        placement = self.placement
        if placement.counting:
            placement.ledger.answered(task.client)
        del self.live[task.msg_id]
        task.state = DONE
        self.out.append(RelayReply(client, uuid, reply, retrying=retrying))
        if rng is not None and elements[0] < elements[1]:  # given back, its revoke reply to come
            self.new_part(task, elements[0], elements[1])
        self.retry(task, retrying, uuid)
        task.msg = None
        origin = origin_of(task.msg_id)
        return origin if self.placement_done(origin) else None

    @staticmethod
    def retried(task: Task, content: dict[str, Any]) -> list[int] | None:
        """The positions among a part's errors to run again (the request's retries, per
        element: each failed element is placed again on its own, as ipyparallel retries
        each element task of a chunksize=1 map)."""
        errors = content.get(ERRORS)
        if not errors or task.retries <= 0 or not isinstance(errors, dict):
            return None
        out = sorted(int(k) for k in errors if isinstance(k, str) and k.isdigit())
        return out or None

    def retry(self, task: Task, positions: list[int] | None, uuid: bytes) -> None:
        for pos in positions or ():
            log.info("element %d of %s failed on %s: placed again", pos, task.msg_id, uuid)
            self.new_part(
                task, pos, pos + 1, retries=task.retries - 1, avoid=(task.avoid or set()) | {uuid}
            )

    def new_part(
        self,
        task: Task,
        lo: int,
        hi: int,
        retries: int | None = None,
        avoid: set[bytes] | None = None,
    ) -> None:
        """Place positions [lo, hi) of ``task``'s request anew, first in the queue (or
        answer those its client aborted aborted, in parts of their own)."""
        origin = origin_of(task.msg_id)
        if origin not in self.aborting:
            self._new_part(task, origin, lo, hi, retries, avoid, False)
            return
        runs = runs_of(lo, hi, self.aborting[origin])
        for a, b, aborted in reversed(runs):  # each enqueued first: the lowest ends first
            self._new_part(task, origin, a, b, retries, avoid, aborted)

    def _new_part(
        self,
        task: Task,
        origin: str,
        lo: int,
        hi: int,
        retries: int | None,
        avoid: set[bytes] | None,
        aborted: bool,
    ) -> None:
        self._parts_made += 1
        part = Task(
            part_id(origin, lo, self._parts_made),
            task.client,
            task.msg,
            task.targets,
            retries=task.retries if retries is None else retries,
            avoid=task.avoid if avoid is None else avoid,
            unmet=task.unmet,
            attempt=task.attempt + 1,
            elements=[lo, hi],
        )
        self.live[part.msg_id] = part
        self.placements[origin] = self.placements.get(origin, 0) + 1
        if aborted:  # named by an abort of its client (or its whole map aborted)
            why = (
                f"element {lo} of task {origin} was aborted before it ran"
                if hi - lo == 1
                else f"elements {lo}..{hi - 1} of task {origin} were aborted before they ran"
            )
            self.failing.append((part, TaskAborted, why, ReplyStatus.ABORTED))
            return
        log.info("elements %d..%d of %s placed anew as %s", lo, hi - 1, origin, part.msg_id)
        self.placement.enqueue(part, front=True)

    def cut(self, task: Task) -> bool:
        """A placement not on an engine (about to be placed, or queued: withdrawn by the
        caller) holding positions its client aborted: placed again as parts without them,
        those answered aborted. False (nothing done) when it holds none."""
        elements = task.elements
        if elements is None or not self.aborting:
            return False
        origin = origin_of(task.msg_id)
        if origin not in self.aborting:
            return False
        named = self.aborting[origin]
        lo, hi = elements
        if named is not None and not any(lo <= p < hi for p in named):
            return False
        self.live.pop(task.msg_id, None)
        task.state = DONE
        self.placements[origin] = self.placements.get(origin, 1) - 1
        self.new_part(task, lo, hi)
        task.msg = None
        return True

    def placement_done(self, origin: str) -> bool:
        """A placement of ``origin`` answered its last: True once none is left (the
        request is then finished for its dependents, whatever its elements' outcomes)."""
        left = self.placements.get(origin, 1) - 1
        if left > 0:
            self.placements[origin] = left
            return False
        self.placements.pop(origin, None)
        self.aborting.pop(origin, None)
        return True

    def parts_of(self, msg_ids: set[str]) -> list[Task]:
        """The placements of element requests among ``msg_ids`` placed under part ids."""
        return [
            t
            for t in self.live.values()
            if t.elements is not None and t.msg_id not in msg_ids and origin_of(t.msg_id) in msg_ids
        ]

    # -- tails taken back -----------------------------------------------------------------

    def tails(self, engine: EngineSlot) -> dict[str, int]:
        """The element requests on ``engine`` with unstarted elements to ask back: all."""
        out = {}
        for m in engine.tasks:
            t = self.live.get(m)
            if t is not None and t.elements is not None and t.elements[1] - t.elements[0] > 1:
                out[m] = 0
        return out

    def tail_deadline(self) -> float | None:
        """When an idle engine may next take half of a running element request."""
        if not self.placements or self.placement.queue:
            return None
        if not any(e.load == 0 and not e.paused for e in self.engines.values()):
            return None
        due = None
        for e in self.engines.values():
            if e.load == 0 or e.revoking:
                continue
            for m in e.tasks:
                t = self.live.get(m)
                if t is not None and t.elements is not None and t.elements[1] - t.elements[0] > 1:
                    at = t.placed_at + IDLE_STEAL_AFTER
                    due = at if due is None or at < due else due
        return due

    def steal_for_idle(self, now: float) -> None:
        """An engine is idle and nothing waits: ask an element request running elsewhere
        (placed IDLE_STEAL_AFTER ago) for its unstarted elements: all of them from an
        engine stalled on a long element, else the second half from the request with most
        unanswered elements."""
        if not self.placements or self.placement.queue or not self.steals:
            return
        idle = [e.uuid for e in self.engines.values() if e.load == 0 and not e.paused]
        if not idle:
            return
        best: tuple[bool, int, Task, EngineSlot] | None = None
        for e in self.engines.values():
            if e.load == 0 or e.revoking:
                continue
            stalled = now - e.since >= self.stalled_after
            for m in e.tasks:
                t = self.live.get(m)
                if t is None or t.elements is None or t.state != RUNNING:
                    continue
                if t.targets is not None and not any(u in t.targets for u in idle):
                    continue  # no idle engine may run it
                left = t.elements[1] - t.elements[0]
                if left > 1 and now - t.placed_at >= IDLE_STEAL_AFTER:
                    if best is None or (stalled, left) > best[:2]:
                        best = (stalled, left, t, e)
        if best is None:
            return
        stalled, left, task, engine = best
        task.placed_at = now
        engine.revoking = True
        # of the unanswered, one runs there: it keeps half of the others (none if stalled)
        keep = 0 if stalled else (left - 1) // 2
        # not started there yet (prefetched behind a long element): it comes back whole
        self.out.append(RevokeTasks(engine, [task.msg_id], {task.msg_id: keep}))

    def given_back(self, engine: EngineSlot, tails: dict[str, Any]) -> None:
        """The tails of running element requests ``engine`` gave back, placed as parts of
        their own."""
        for key, given in tails.items():
            task = self.live.get(key)
            rng = element_range(given)
            if task is None or rng is None or task.engine is not engine or not task.elements:
                continue  # answered meanwhile: its last part placed what it gave back
            lo, hi = max(rng[0], task.elements[0]), min(rng[1], task.elements[1])
            if lo < hi:
                task.elements[1] = lo
                self.new_part(task, lo, hi)

    def revoked(self, engine: EngineSlot, msg_ids: list[Any]) -> list[Any]:
        """Element requests ``engine`` never started, placed again under new part ids (so
        the copy still in the engine's hand, dropped when reached, and the new one are
        never taken for each other, however often it comes back); the other ids."""
        if not self.placements:
            return msg_ids
        rest = []
        for m in msg_ids:
            task = self.live.get(m) if isinstance(m, str) else None
            if task is None or task.elements is None or not placed_on(task, engine):
                rest.append(m)
                continue
            self.placement.unplace(task, engine)
            del self.live[m]
            task.state = DONE
            self.placements[origin_of(m)] -= 1
            self.new_part(task, task.elements[0], task.elements[1])
            task.msg = None
        return rest

    # -- aborts ---------------------------------------------------------------------------

    def abort(self, tasks: list[Task]) -> None:
        """A client's abort reached element requests running or prefetched on engines:
        their unstarted elements are asked back (the engine may be deep in a long element
        and read its control socket only after it), then answered aborted."""
        by_engine: dict[bytes, tuple[EngineSlot, list[str], dict[str, int]]] = {}
        for task in tasks:
            if task.elements is None or task.state != RUNNING or task.engine is None:
                continue
            self.aborting[origin_of(task.msg_id)] = None
            engine = task.engine
            _, held, tails = by_engine.setdefault(engine.uuid, (engine, [], {}))
            held.append(task.msg_id)
            tails[task.msg_id] = 0
        for engine, held, tails in by_engine.values():
            engine.revoking = True
            self.out.append(RevokeTasks(engine, held, tails))

    def forget_client(self, client: bytes) -> None:
        """The client is gone: the names it kept for requests not here yet go too."""
        if self.early:
            for key in [k for k in self.early if k[0] == client]:
                del self.early[key]

    def abort_elements(self, client: bytes, named: dict[str, set[int]]) -> list[str]:
        """A client's abort named elements of element requests (``{msg_id: positions}``;
        another client's too, as a whole task's abort): each placement still here is cut at once (``cut``), each one on an
        engine is asked for its unstarted elements, which are cut as they come back; the
        rest of each request runs. Requests not here yet keep the names until they come.
        The element ids answered aborted at once."""
        aborted: list[str] = []
        by_origin: dict[str, list[Task]] = {}
        for t in self.live.values():  # any client's, as a whole task's abort (ipyparallel)
            if t.elements is not None:
                by_origin.setdefault(origin_of(t.msg_id), []).append(t)
        revoke: dict[bytes, tuple[EngineSlot, list[str], dict[str, int]]] = {}
        for origin, positions in named.items():
            tasks = by_origin.get(origin)
            if not tasks:  # not here yet, or answered: kept for it, bounded
                key = (client, origin)
                self.early[key] = self.early.get(key, set()) | positions
                while len(self.early) > EARLY_ABORTS:
                    self.early.popitem(last=False)
                continue
            if origin in self.aborting:
                before = self.aborting[origin]
                if before is None:
                    continue  # its whole map is aborted already
                positions = before | positions
            self.aborting[origin] = positions
            for task in tasks:
                lo, hi = task.elements  # type: ignore[misc]
                hit = sorted(p for p in positions if lo <= p < hi)
                if not hit:
                    continue
                if task.state == RUNNING and task.engine is not None:
                    engine = task.engine
                    _, held, tails = revoke.setdefault(engine.uuid, (engine, [], {}))
                    held.append(task.msg_id)
                    tails[task.msg_id] = 0
                elif task.state != WAITING:  # queued or held; waiting ones: when released
                    self.placement.withdraw(task)
                    self.cut(task)
                    aborted.extend(element_id(origin, p) for p in hit)
        for engine, held, tails in revoke.values():
            engine.revoking = True
            self.out.append(RevokeTasks(engine, held, tails))
        return aborted
