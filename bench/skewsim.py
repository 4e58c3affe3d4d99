"""The task book's balance of W10's skewed map, without processes:
``python -m bench.skewsim [--n 400] [--latency-ms 0.3] [--overhead-ms 0.05]``.

W10 (bench/workloads.py) measures the skewed map on real processes, where a loaded host
stretches every 5 ms sleep and the figure moves by tens of per cent between runs. This
drives the real TaskBook (schedulers/book.py) through ``handle`` with a simulated clock and
two simulated engines that behave as engine/elements.py and engine/revoke.py do: an
element request's positions run in order, a part is answered after each element, the last
part is ``final``; a revoke gives back requests not started, and of the running one its
unstarted positions past those it keeps. Every message takes ``latency`` to arrive, every
element ``overhead`` beyond its duration. What it reports: the makespan (the client has
every element's reply) over the ideal one (total work over the engines), and the idle
time of each engine: what the book's placement and steal-back cost, with no noise.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
from collections import deque
from collections.abc import Callable
from typing import Any

from zpar.elements import ELEMENTS, FINAL, element_range, origin_of
from zpar.schedulers.book import TaskBook
from zpar.schedulers.events import (
    Delivered,
    EngineJoined,
    Event,
    Replied,
    Revoked,
    Submitted,
    Tick,
)
from zpar.schedulers.instructions import RelayReply, RevokeTasks, SendTask
from zpar.wire import Message
from zpar.wire.messages import MsgType, ReplyStatus

from .workloads import W10_SKEW, skewed_durations

CLIENT = b"client"


class Sim:
    """A clock, a heap of timed callbacks, the book and its engines."""

    def __init__(self, durations: list[float], chunks: int, latency: float, overhead: float):
        self.now = 0.0
        self.heap: list[tuple[float, int, Callable[[], None]]] = []
        self.seq = itertools.count()
        self.latency = latency
        self.overhead = overhead
        self.durations = durations
        self.book = TaskBook("leastload", 2, clock=lambda: self.now)
        self.engines = [SimEngine(self, f"engine-{i}".encode()) for i in range(2)]
        self.done: dict[int, float] = {}  # global position -> time its reply reached the client
        self.tick_at: float | None = None
        self.feed(*(EngineJoined(i, e.uuid) for i, e in enumerate(self.engines)))
        n = len(durations)
        size = -(-n // chunks)
        self.offsets: dict[str, int] = {}
        for c, lo in enumerate(range(0, n, size)):
            msg_id = f"map-{c}"
            self.offsets[msg_id] = lo
            hi = min(n, lo + size)
            header = {"msg_id": msg_id, "msg_type": MsgType.APPLY_REQUEST, "dest": "task"}
            msg = Message([CLIENT], header, {}, {ELEMENTS: [0, hi - lo]}, {})
            self.at(latency, lambda msg=msg: self.feed(Submitted(CLIENT, msg)))

    def at(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self.heap, (self.now + delay, next(self.seq), fn))

    def feed(self, *events: Event) -> None:
        for i in self.book.handle(*events):
            if isinstance(i, SendTask):
                engine = next(e for e in self.engines if e.uuid == i.engine.uuid)
                msg_id, elements = i.task.msg_id, list(i.task.elements or [])
                self.at(self.latency, lambda e=engine, m=msg_id, r=elements: e.request(m, r))
                if not i.engine.reached:
                    self.book.handle(Delivered(i.engine))
            elif isinstance(i, RevokeTasks):
                engine = next(e for e in self.engines if e.uuid == i.engine.uuid)
                ids, tails = list(i.msg_ids), dict(i.tails or {})
                self.at(self.latency, lambda e=engine, m=ids, t=tails: e.revoke(m, t))
            elif isinstance(i, RelayReply):
                self.relayed(i.reply)
        due = self.book.next_deadline()
        if due is not None and (
            self.tick_at is None or due < self.tick_at or self.tick_at < self.now
        ):
            self.tick_at = due
            self.at(max(0.0, due - self.now) + 1e-6, self.tick)

    def tick(self) -> None:
        self.tick_at = None
        self.feed(Tick())

    def relayed(self, reply: Message) -> None:
        rng = element_range(reply.content.get(ELEMENTS))
        if rng is None:
            return
        base = self.offsets[origin_of(reply.parent_header["msg_id"])]
        for pos in range(*rng):
            self.done.setdefault(base + pos, self.now + self.latency)

    def run(self) -> dict[str, Any]:
        while self.heap and len(self.done) < len(self.durations):
            self.now, _, fn = heapq.heappop(self.heap)
            fn()
        makespan = max(self.done.values())
        n = len(self.durations)
        ideal = max(sum(self.durations) / 2, max(self.durations))
        return {
            "n": n,
            "makespan_s": round(makespan, 4),
            "ideal_s": round(ideal, 4),
            "over_ideal": round(makespan / ideal, 4),
            "idle_s": [round(makespan - e.busy, 4) for e in self.engines],
            "revokes": sum(e.revokes for e in self.engines),
        }


class SimEngine:
    """An engine as engine/elements.py and engine/revoke.py make it, one element at a time."""

    def __init__(self, sim: Sim, uuid: bytes) -> None:
        self.sim = sim
        self.uuid = uuid
        self.waiting: deque[tuple[str, list[int]]] = deque()
        self.revoked: set[str] = set()
        self.started: set[str] = set()
        #: the element request running: its id, its unstarted positions, its first
        #: position not answered yet
        self.running: tuple[str, deque[int], int] | None = None
        self.busy = 0.0
        self.revokes = 0

    def request(self, msg_id: str, elements: list[int]) -> None:
        self.waiting.append((msg_id, elements))
        if self.running is None:
            self.next_request()

    def next_request(self) -> None:
        while self.waiting:
            msg_id, (lo, hi) = self.waiting.popleft()
            if msg_id in self.revoked:
                self.revoked.discard(msg_id)
                continue
            self.started.add(msg_id)
            self.running = (msg_id, deque(range(lo, hi)), lo)
            self.next_element()
            return
        self.running = None

    def next_element(self) -> None:
        assert self.running is not None
        msg_id, positions, first = self.running
        if not positions:
            self.reply(msg_id, first, first, final=True)
            self.next_request()
            return
        pos = positions.popleft()
        took = self.sim.durations[self.sim.offsets[origin_of(msg_id)] + pos] + self.sim.overhead
        self.busy += took
        self.sim.at(took, lambda: self.element_done(pos))

    def element_done(self, pos: int) -> None:
        assert self.running is not None
        msg_id, positions, first = self.running
        final = not positions
        self.reply(msg_id, first, pos + 1, final=final)
        self.running = (msg_id, positions, pos + 1)
        if final:
            self.next_request()
        else:
            self.next_element()

    def reply(self, msg_id: str, lo: int, hi: int, final: bool) -> None:
        content: dict[str, Any] = {"status": ReplyStatus.OK, ELEMENTS: [lo, hi]}
        if final:
            content[FINAL] = True
        header = {"msg_id": f"reply-{next(self.sim.seq)}", "msg_type": MsgType.APPLY_REPLY}
        reply = Message([], header, {"msg_id": msg_id}, {}, content)
        self.sim.at(self.sim.latency, lambda: self.sim.feed(Replied(self.uuid, CLIENT, reply)))

    def revoke(self, msg_ids: list[str], tails: dict[str, Any]) -> None:
        self.revokes += 1
        back = [m for m in msg_ids if m not in self.started]
        self.revoked.update(back)
        given: dict[str, list[int]] = {}
        if self.running is not None and self.running[0] in tails:
            keep = tails[self.running[0]]
            positions = self.running[1]
            out = []
            while len(positions) > max(0, keep):
                out.append(positions.pop())
            if out:
                given[self.running[0]] = [out[-1], out[0] + 1]
        event = Revoked(self.uuid, back, given)
        self.sim.at(self.sim.latency, lambda: self.sim.feed(event))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=W10_SKEW["quick"][0])
    p.add_argument("--chunks", type=int, default=2, help="element requests (the client's cut)")
    p.add_argument("--latency-ms", type=float, default=0.3)
    p.add_argument("--overhead-ms", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=10, help="where the slow elements fall (W10's: 10)")
    args = p.parse_args()
    _, fast, slow = W10_SKEW["quick"]
    sim = Sim(
        skewed_durations(args.n, fast, slow, args.seed),
        args.chunks,
        args.latency_ms / 1000,
        args.overhead_ms / 1000,
    )
    print(json.dumps(sim.run()))


if __name__ == "__main__":
    main()
