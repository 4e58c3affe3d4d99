"""`zpar smoke --job full`: a real job on a running cluster, one that survives a lost engine.

The compose file's ``client`` service runs it (tests/deploy/test_compose_cluster.py kills an
engine container while it holds); anyone can run it against a cluster they started.

1. hold: one task on each engine for ``hold`` seconds. An engine lost meanwhile (its
   container killed, its host gone) must be answered with EngineError, the others with
   their result; the rest of the job then runs on the engines still registered.
2. a load-balanced map, checked element by element;
3. a numpy array scattered over the engines, summed there and gathered back unchanged;
4. a communicator over the engines (zpar.comm): allreduce of objects and of a buffer;
5. a load-balanced task's result fetched back from the controller's store by msg_id, by another client.

Functions that run on the engines live here, at module level: they travel by reference
(engines have zpar installed), as user code would by value.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: Elements of the array the job scatters (8 bytes each: 80 kB, cut into one block per engine).
ARRAY_SIZE = 10_000

Say = Callable[[str], None]


def _where() -> tuple[str, int]:
    return socket.gethostname(), os.getpid()


def _hold(seconds: float) -> str:
    time.sleep(seconds)
    return socket.gethostname()


def _square(x: int) -> int:
    return x * x


def _block_sum(block: Any) -> float:
    return float(block.sum())


def _reduce(comm: Any) -> tuple[int, int, list[float]]:
    import numpy as np

    from zpar.comm import SUM

    mine = np.full(4, float(comm.rank))
    total = np.empty_like(mine)
    comm.Allreduce(mine, total, op=SUM)
    return comm.size, comm.allreduce(comm.rank, op=SUM), total.tolist()


def _hold_phase(rc: Any, hold: float, timeout: float, say: Say) -> list[str]:
    """A task on each engine for ``hold`` s; return a line per engine lost meanwhile."""
    from zpar.errors import EngineError

    ids = list(rc.ids)
    hosts = rc[ids].apply_sync(_where)
    ars = {eid: rc[eid].apply_async(_hold, hold) for eid in ids}
    say(
        f"holding a task on each of {len(ids)} engines for {hold:g} s (hosts "
        f"{' '.join(h for h, _ in hosts)}): an engine lost now is answered with EngineError"
    )
    lost = []
    for (eid, ar), (host, pid) in zip(ars.items(), hosts, strict=True):
        try:
            ar.get(timeout=hold + timeout)
        except EngineError as e:
            lost.append(f"engine {eid} on {host} (pid {pid}) lost mid-task: EngineError: {e}")
            say(lost[-1])
    return lost


def _wait_for_unregistration(rc: Any, lost: int, before: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(rc.ids) > before - lost and time.monotonic() < deadline:
        time.sleep(0.05)


def full_job(
    url_file: str | Path | None,
    profile: str,
    engines: int,
    timeout: float,
    hold: float,
    say: Say = lambda text: log.info("%s", text),
) -> str:
    """Run the job, telling ``say`` each step as it passes; return a one-line summary,
    raise AssertionError or ZparError."""
    import numpy as np

    from zpar.client.client import Client
    from zpar.serialize import Reference

    with Client(url_file=url_file, profile=profile, timeout=timeout) as rc:
        rc.wait_for_engines(engines, timeout=timeout)
        before = len(rc.ids)
        lost = _hold_phase(rc, hold, timeout, say) if hold > 0 else []
        _wait_for_unregistration(rc, len(lost), before, timeout)
        ids = list(rc.ids)
        if not ids:
            raise AssertionError("no engine left to run the job on")
        n = len(ids)
        lv = rc.load_balanced_view()
        ar = lv.map_async(_square, range(4 * n))
        squares = ar.get(timeout=timeout)
        if list(squares) != [x * x for x in range(4 * n)]:
            raise AssertionError(f"load-balanced map: wrong results {squares}")
        say(f"load-balanced map of {4 * n} tasks on {n} engines: right")
        dv = rc[ids]
        a = np.arange(float(ARRAY_SIZE))
        dv.scatter("x", a, block=True)
        partial = dv.apply_sync(_block_sum, Reference("x"))
        back = dv.gather("x", block=True)
        if not np.array_equal(back, a) or sum(partial) != float(a.sum()):
            raise AssertionError(f"scatter/gather: {back!r} (partial sums {partial})")
        say(f"scatter/gather of {a.size} floats over {n} engines: right")
        dv.communicator()
        want = (n, n * (n - 1) // 2, [float(n * (n - 1) // 2)] * 4)
        reduced = dv.apply_sync(_reduce, Reference("comm"))  # the engine's `comm`
        if any(tuple(r) != want for r in reduced):
            raise AssertionError(f"allreduce: {reduced}, expected {want} on each rank")
        say(f"communicator allreduce over {n} ranks: right")
        one = lv.apply_async(_square, 12345)
        one.get(timeout=timeout)
        msg_id = one.msg_ids[0]
        with Client(url_file=url_file, profile=profile, timeout=timeout) as other:
            fetched = other.get_result(msg_id).get(timeout=timeout)
        if fetched != 12345 * 12345:
            raise AssertionError(f"result {msg_id} fetched from the store: {fetched!r}")
        say(f"result {msg_id} fetched back from the store by another client: right")
    hosts = "; ".join(lost) if lost else "no engine lost"
    return f"job done on {n} of {before} engines ({hosts})"
