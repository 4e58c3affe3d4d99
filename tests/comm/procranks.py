"""Run a function on N ranks, each a process of its own forked from the test (peer links,
the dance and the communicator as on engines, without a cluster), pinned to at most
``cpus`` CPUs; ``pure`` gives every rank the lane's pure-Python twin."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import traceback
import uuid
from collections.abc import Callable
from typing import Any

KEY = b"test-cluster-key"


def _rank_main(r, n, comm_id, cpus, pure, fn, tables, out, timeout):  # pragma: no cover
    try:
        allowed = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, allowed[:cpus])
        from zpar.comm import links as links_mod
        from zpar.comm.communicator import Communicator

        if pure:
            from zpar.comm import lanepy

            links_mod.Lane = lanepy.Lane
        lk = links_mod.PeerLinks(r, n, comm_id, KEY)
        out.put(("table", r, lk.bind()))
        table = tables.get(timeout=timeout)
        lk.dance(table, timeout)
        comm = Communicator(lk, ["h"] * n, timeout=timeout)
        result = fn(comm)
        comm.Free()
        out.put(("result", r, pickle.dumps(result)))
    except BaseException:  # noqa: BLE001 - reported to the test
        out.put(("error", r, traceback.format_exc()))


def run_processes(
    n: int, fn: Callable[[Any], Any], *, cpus: int = 2, pure: bool = False, timeout: float = 60
) -> list[Any]:
    """fn(comm) on every rank (fn must be a module-level function); results in rank order.
    Any rank's exception fails the call with its traceback."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    tables = [ctx.Queue() for _ in range(n)]
    cid = uuid.uuid4().hex
    procs = [
        ctx.Process(target=_rank_main, args=(r, n, cid, cpus, pure, fn, tables[r], out, timeout))
        for r in range(n)
    ]
    for p in procs:
        p.start()
    try:
        table: list[Any] = [None] * n
        results: list[Any] = [None] * n
        got = 0
        while got < 2 * n:
            kind, r, value = out.get(timeout=timeout + 30)
            got += 1
            if kind == "table":
                table[r] = value
                if all(t is not None for t in table):
                    for q in tables:
                        q.put(table)
            elif kind == "error":
                raise RuntimeError(f"rank {r} failed:\n{value}")
            else:
                results[r] = pickle.loads(value)
        return results
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
