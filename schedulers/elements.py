"""Element requests in the task book: parts answered, tails taken back, parts placed anew (a
part of the TaskBook; zpar.elements, docs/decisions.md "A load-balanced map, one task per
element").

An element request carries a run of a map's elements, ``[lo, hi]``; its engine answers in
parts as elements finish. The book keeps, per placement, the positions not answered yet
(``Task.elements``): each part moves ``lo`` up, and the last (``final``) frees the engine's
slot. Elements not started can come back:

- from an engine *stalled* on a long element (no answer for ``steal_after``): every
  unstarted element (the revoke_request's ``tails``, keep 0);
- to an engine left *idle* with nothing queued, from the element request that has most
  unanswered elements on another engine, placed at least IDLE_STEAL_AFTER ago: the second
  half of what is unanswered.

What comes back is a request of its own, with the same frames, under a part id
(``<msg_id>#<lo>.<n>``) and its positions in the metadata, placed first in the queue. The
request counts as finished for tasks that depend on it once its last placement answered.
"""

from __future__ import annotations

import logging
from typing import Any

from zpar.elements import ELEMENTS, ERRORS, FINAL, element_range, origin_of, part_id
from zpar.errors import TaskAborted
from zpar.wire import Message
from zpar.wire.messages import ReplyStatus

from .instructions import RelayReply, RevokeTasks
from .prefetch import Prefetch
from .schemes import EngineSlot
from .state import DONE, RUNNING, Task

log = logging.getLogger(__name__)

#: Seconds an element request runs on its engine before an idle engine may take half of
#: its unstarted elements: a map of quick elements ends before (no revoke round trip for
#: it), one of long elements rebalances at its end within a few of them.
IDLE_STEAL_AFTER = 0.005


class ElementParts(Prefetch):
    """Replies in parts, tails taken back, parts placed anew."""

    def _element_task(self, task: Task, md: dict[str, Any]) -> None:
        """A submission's ``elements`` metadata: its positions, counted as one placement
        of its request."""
        rng = element_range(md.get(ELEMENTS))
        if rng is None:
            return
        task.elements = list(rng)
        self.element_placements[task.msg_id] = 1

    def _element_reply(self, task: Task, engine: EngineSlot, client: bytes, reply: Message) -> None:
        """An engine's part of an element request: relayed; the last one ends the
        placement (elements it did not answer, given back meanwhile, are placed anew)."""
        content = reply.content
        rng = element_range(content.get(ELEMENTS))
        elements = task.elements
        assert elements is not None
        self._answered_by(engine)
        if rng is not None:
            elements[0] = max(elements[0], rng[1])
        uuid = engine.uuid
        origin = origin_of(task.msg_id)
        retrying = self._retried(task, content, uuid)
        if rng is not None and not content.get(FINAL):
            # every part is reported: the hub records a map's elements from its parts
            self.out.append(RelayReply(client, uuid, reply, retrying=retrying))
            self._retry_elements(task, retrying, uuid)
            return
        engine.load -= 1
        engine.tasks.discard(task.msg_id)
        self.ledger.answered(task.client)
        del self.live[task.msg_id]
        task.state = DONE
        self.out.append(RelayReply(client, uuid, reply, retrying=retrying))
        if rng is not None and elements[0] < elements[1]:  # given back, its revoke reply to come
            self._new_part(task, elements[0], elements[1])
        self._retry_elements(task, retrying, uuid)
        task.msg = None
        self._placement_done(origin, uuid)
        self._after_answer(task.client)
        self._steal_for_idle(self.clock())

    def _retried(self, task: Task, content: dict[str, Any], uuid: bytes) -> list[int] | None:
        """The positions among a part's errors to run again (the request's retries, per
        element: each failed element is placed again on its own, as ipyparallel retries
        each element task of a chunksize=1 map)."""
        errors = content.get(ERRORS)
        if not errors or task.retries <= 0 or not isinstance(errors, dict):
            return None
        out = sorted(int(k) for k in errors if isinstance(k, str) and k.isdigit())
        return out or None

    def _retry_elements(self, task: Task, positions: list[int] | None, uuid: bytes) -> None:
        for pos in positions or ():
            log.info("element %d of %s failed on %s: placed again", pos, task.msg_id, uuid)
            self._new_part(
                task, pos, pos + 1, retries=task.retries - 1, avoid=(task.avoid or set()) | {uuid}
            )
        if positions:
            self._drain_queue()

    def _new_part(
        self,
        task: Task,
        lo: int,
        hi: int,
        retries: int | None = None,
        avoid: set[bytes] | None = None,
    ) -> None:
        """Place positions [lo, hi) of ``task``'s request anew, first in the queue."""
        origin = origin_of(task.msg_id)
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
        self.element_placements[origin] = self.element_placements.get(origin, 0) + 1
        if origin in self.aborting:  # given back after its map was aborted
            self._abort_element_task(part)
            return
        log.info("elements %d..%d of %s placed anew as %s", lo, hi - 1, origin, part.msg_id)
        self._enqueue(part, front=True)

    def _placement_done(self, origin: str, uuid: bytes) -> None:
        """A placement of ``origin`` answered its last: the request is finished for its
        dependents once none is left (its outcome: answered, whatever the elements')."""
        left = self.element_placements.get(origin, 1) - 1
        if left > 0:
            self.element_placements[origin] = left
            return
        self.element_placements.pop(origin, None)
        self.aborting.discard(origin)
        self._finished(origin, True, uuid)

    def _element_failed(self, task: Task) -> None:
        """A placement answered in the engine's stead (aborted, its engine died...)."""
        self._placement_done(origin_of(task.msg_id), task.engine.uuid if task.engine else b"")

    # -- tails taken back -----------------------------------------------------------------

    def _tails(self, engine: EngineSlot) -> dict[str, int]:
        """The element requests on ``engine`` with unstarted elements to ask back: all."""
        out = {}
        for m in engine.tasks:
            t = self.live.get(m)
            if t is not None and t.elements is not None and t.elements[1] - t.elements[0] > 1:
                out[m] = 0
        return out

    def tail_deadline(self) -> float | None:
        """When an idle engine may next take half of a running element request."""
        if not self.element_placements or self.queue:
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

    def _steal_for_idle(self, now: float) -> None:
        """An engine is idle and nothing waits: ask the element request with most
        unanswered elements elsewhere (placed IDLE_STEAL_AFTER ago) for its second half."""
        if not self.element_placements or self.queue or not self.steals:
            return
        idle = [e.uuid for e in self.engines.values() if e.load == 0 and not e.paused]
        if not idle:
            return
        best: tuple[int, Task, EngineSlot] | None = None
        for e in self.engines.values():
            if e.load == 0 or e.revoking:
                continue
            for m in e.tasks:
                t = self.live.get(m)
                if t is None or t.elements is None or t.state != RUNNING:
                    continue
                if t.targets is not None and not any(u in t.targets for u in idle):
                    continue  # no idle engine may run it
                left = t.elements[1] - t.elements[0]
                if left > 1 and now - t.placed_at >= IDLE_STEAL_AFTER:
                    if best is None or left > best[0]:
                        best = (left, t, e)
        if best is None:
            return
        left, task, engine = best
        task.placed_at = now
        engine.revoking = True
        # not started there yet (prefetched behind a long element): it comes back whole
        self.out.append(RevokeTasks(engine, [task.msg_id], {task.msg_id: left // 2}))

    def revoked(self, uuid: bytes, msg_ids: list[str], tails: dict[str, Any] | None = None) -> None:
        """An engine's revoke_reply: whole tasks never started (placed again), and the
        tails of running element requests given back (placed as parts of their own);
        those of an aborted map are answered aborted instead."""
        engine = self.engines.get(uuid)
        if engine is not None and tails:
            for key, given in tails.items():
                task = self.live.get(key)
                rng = element_range(given)
                if task is None or rng is None or task.engine is not engine or not task.elements:
                    continue  # answered meanwhile: its last part placed what it gave back
                lo, hi = max(rng[0], task.elements[0]), min(rng[1], task.elements[1])
                if lo < hi:
                    task.elements[1] = lo
                    self._new_part(task, lo, hi)
        rest = msg_ids
        if engine is not None and self.element_placements:
            rest = []
            for m in msg_ids:
                task = self.live.get(m) if isinstance(m, str) else None
                if task is None or task.elements is None or not self._placed_on(m, engine):
                    rest.append(m)
                    continue
                # an element request never started there: placed again under a new part id,
                # so the copy still in the engine's hand (dropped when reached) and the new
                # one are never taken for each other, however often it comes back
                self._unplace(task, engine)
                del self.live[m]
                task.state = DONE
                self.element_placements[origin_of(m)] -= 1
                self._new_part(task, task.elements[0], task.elements[1])
                task.msg = None
        super().revoked(uuid, rest)

    # -- aborts ---------------------------------------------------------------------------

    def _abort_elements(self, tasks: list[Task]) -> None:
        """A client's abort reached element requests running or prefetched on engines:
        their unstarted elements are asked back (the engine may be deep in a long element
        and read its control socket only after it), then answered aborted."""
        by_engine: dict[bytes, tuple[EngineSlot, list[str], dict[str, int]]] = {}
        for task in tasks:
            if task.elements is None or task.state != RUNNING or task.engine is None:
                continue
            self.aborting.add(origin_of(task.msg_id))
            engine = task.engine
            _, held, tails = by_engine.setdefault(engine.uuid, (engine, [], {}))
            held.append(task.msg_id)
            tails[task.msg_id] = 0
        for engine, held, tails in by_engine.values():
            engine.revoking = True
            self.out.append(RevokeTasks(engine, held, tails))

    def _abort_element_task(self, task: Task) -> None:
        """Answer a placement of an aborted map aborted, in the engine's stead."""
        assert task.elements is not None
        lo, hi = task.elements
        origin = origin_of(task.msg_id)
        why = f"elements {lo}..{hi - 1} of task {origin} were aborted before they ran"
        self._fail(task, TaskAborted, why, ReplyStatus.ABORTED)
