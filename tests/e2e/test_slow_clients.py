"""Bounded memory toward clients (issue 13 item 3): a SIGSTOPped client's results wait for
it without the task scheduler buffering them (its queued tasks are held back, other clients
are served, every result arrives after SIGCONT); a killed client's queued tasks are
cancelled, not run, and the store says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from tests.e2e.conftest import wait_until
from zpar.constants import WINDOW_REQUESTS

#: the CI size of the issue's case (20,000 results of 100 KB took the scheduler to 2 GB)
N_RESULTS = 2000
RESULT_SIZE = 100_000
#: engines are declared dead after 10 s of silence, not FAST_HB's 0.4 s: these tests load
#: a shared machine hard, and an engine lost to a late heartbeat fails the stopped client
SLOW_HB = ["--hb-period", "1", "--hb-misses", "10"]
#: the documented bound on the scheduler's growth over its idle size (docs/security.md)
RSS_BOUND = 200 * 2**20

CLIENT = textwrap.dedent(
    """
    import json, os, sys, time
    import zpar

    url, n, size, ids_file, sleep, window, direct = sys.argv[1:8]
    n, size, sleep, window = int(n), int(size), float(sleep), int(window)

    def make(i, size, sleep):
        import time
        time.sleep(sleep)
        return i, bytes([i % 251]) * size

    rc = zpar.Client(url_file=url, window=window)
    view = rc[rc.ids[0]] if direct == "direct" else rc.load_balanced_view()
    ars = [view.apply_async(make, i, size, sleep) for i in range(n)]
    with open(ids_file + ".tmp", "w") as f:
        json.dump([ar.msg_ids[0] for ar in ars], f)
    os.rename(ids_file + ".tmp", ids_file)
    for i, ar in enumerate(ars):
        j, data = ar.get(timeout=900)
        assert j == i and len(data) == size and data[:1] == bytes([i % 251]), (i, j)
        ars[i] = None  # checked: let it go
    print("all", n, "results", flush=True)
    rc.close()
    """
)


def _scheduler(cluster) -> psutil.Process:
    ctl = psutil.Process(cluster.launcher.controller.pid)
    found = [p for p in ctl.children() if "zpar.schedulers" in " ".join(p.cmdline())]
    assert len(found) == 1, found
    return found[0]


def _start_client(cluster, tmp_path, n, size, sleep=0.0, window=WINDOW_REQUESTS, direct=False):
    """A client process submitting ``n`` tasks (results of ``size`` bytes); its output goes
    to files (a pipe nobody reads while it is stopped would block it)."""
    script = tmp_path / "client" / "client.py"  # beside it, nothing named zpar
    script.parent.mkdir()
    script.write_text(CLIENT)
    ids_file = tmp_path / "ids.json"
    with open(tmp_path / "client.out", "w") as out, open(tmp_path / "client.err", "w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(cluster.url_file),
                str(n),
                str(size),
                str(ids_file),
                str(sleep),
                str(window),
                "direct" if direct else "load-balanced",
            ],
            stdout=out,
            stderr=err,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )

    def submitted():
        assert proc.poll() is None, f"the client exited: {_output(tmp_path)}"
        return ids_file.exists()

    try:
        wait_until(submitted, "the client submitted its tasks", 120)
    except AssertionError:
        proc.kill()
        proc.wait(timeout=30)
        raise
    return proc, json.loads(ids_file.read_text())


def _output(tmp_path) -> str:
    out = (tmp_path / "client.out").read_text()
    return f"{out}\n{(tmp_path / 'client.err').read_text()[-3000:]}"


def _resume_and_finish(proc: subprocess.Popen, tmp_path) -> None:
    """SIGCONT the stopped client and wait until it has read every result (killed if it
    fails or times out: never left behind)."""
    os.kill(proc.pid, signal.SIGCONT)
    try:
        assert proc.wait(timeout=400) == 0, _output(tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert f"all {N_RESULTS} results" in _output(tmp_path)


def _statuses(rc, ids):
    recs = rc.db_query({"msg_id": {"$in": ids}}, keys=["status"])
    return {r["msg_id"]: r["status"] for r in recs}


def _every(interval, condition):
    """``condition`` checked at most every ``interval`` s (a db query is not free)."""

    def check():
        ok = condition()
        if not ok:
            time.sleep(interval)
        return ok

    return check


@pytest.mark.timeout(600)
def test_a_stopped_client_gets_every_result_later_and_the_scheduler_stays_bounded(
    make_cluster, tmp_path
):
    # every task in the scheduler at once, as without a window: replies go to a client in
    # batches, and libzmq's CLIENT_SNDHWM counts a batch as one, so a smaller window may
    # fit whole in the pipe and the scheduler would never need to hold anything back
    c = make_cluster(n=2, controller_args=[*SLOW_HB, "--client-queue", str(N_RESULTS)])
    rc = c.client
    rc.wait_for_engines(2, timeout=60)
    sched = _scheduler(c)
    idle = sched.memory_info().rss
    # 20 ms a task (20 s of work on 2 engines): it stops long before its tasks are done
    # (quick ones, whose replies the scheduler sends in batches, all fit in its pipe first)
    proc, ids = _start_client(c, tmp_path, N_RESULTS, RESULT_SIZE, 0.02, window=N_RESULTS)
    try:
        # its window of tasks reached the controller (the rest waits in the client), then
        # stop it
        wait_until(_every(0.2, lambda: len(_statuses(rc, ids)) == N_RESULTS), "all submitted", 120)
        os.kill(proc.pid, signal.SIGSTOP)
        peak = idle

        def held_back():
            """Engines idle while the stopped client's tasks wait: the scheduler holds
            them instead of running them into results it would have to buffer."""
            nonlocal peak
            peak = max(peak, sched.memory_info().rss)
            q = rc.queue_status()
            running = sum(v["tasks"] for k, v in q.items() if isinstance(k, int))
            return q["unassigned"] > 0 and running == 0

        wait_until(_every(0.5, held_back), "the stopped client's tasks held back", 300)
        wait_until(_every(0.5, held_back), "still held back a moment later", 60)
        pending = N_RESULTS - sum(s is not None for s in _statuses(rc, ids).values())
        assert pending > 0, "every task ran: nothing was held back"

        # another client is served meanwhile
        assert rc.load_balanced_view().apply_async(lambda: 42).get(timeout=120) == 42
        peak = max(peak, sched.memory_info().rss)
        grown = peak - idle
        print(
            f"scheduler RSS: idle {idle / 2**20:.0f} MB, peak while the client was "
            f"stopped {peak / 2**20:.0f} MB (+{grown / 2**20:.0f} MB); {pending} of "
            f"{N_RESULTS} tasks held back"
        )
        assert grown <= RSS_BOUND, f"the scheduler grew by {grown / 2**20:.0f} MB"
    except BaseException:  # the stopped client is never left behind
        proc.kill()
        proc.wait(timeout=30)
        raise
    _resume_and_finish(proc, tmp_path)
    # nothing lost, nothing failed: the store has every one as ok
    wait_until(
        _every(0.2, lambda: set(_statuses(rc, ids).values()) == {"ok"}), "all stored ok", 120
    )


def test_a_killed_clients_queued_tasks_are_cancelled_and_a_new_task_runs(make_cluster, tmp_path):
    c = make_cluster(n=2, controller_args=SLOW_HB)
    rc = c.client
    rc.wait_for_engines(2, timeout=60)
    n = 400
    proc, ids = _start_client(c, tmp_path, n, 10, sleep=0.05)
    try:
        wait_until(
            _every(0.2, lambda: len(_statuses(rc, ids)) >= min(n, WINDOW_REQUESTS)),
            "its window submitted",
            120,
        )
        wait_until(
            _every(0.1, lambda: sum(s == "ok" for s in _statuses(rc, ids).values()) >= 4),
            "some tasks done",
            120,
        )
    finally:
        proc.kill()
        proc.wait(timeout=60)

    def settled():
        # what reached the controller (its window: the rest died with the client, unsent)
        statuses = _statuses(rc, ids)
        return len(statuses) >= min(n, WINDOW_REQUESTS) and None not in statuses.values()

    # the orphans are not run (400 x 50 ms on 2 engines would take 10 s): they are cancelled
    wait_until(_every(0.2, settled), "every task of the killed client settled", 60)
    statuses = list(_statuses(rc, ids).values())
    cancelled = statuses.count("cancelled")
    assert set(statuses) <= {"ok", "cancelled"}, set(statuses)
    assert cancelled >= min(n, WINDOW_REQUESTS) // 2, f"only {cancelled} of {n} cancelled"
    # a new client's task does not wait behind them
    assert rc.load_balanced_view().apply_async(lambda: "next").get(timeout=60) == "next"
    assert rc.queue_status()["unassigned"] == 0


@pytest.mark.timeout(600)
def test_a_stopped_clients_direct_results_wait_in_the_engine_within_its_window(
    make_cluster, tmp_path
):
    """The MUX relay forwards every direct request at once and holds the replies toward a
    client that stopped reading, in libzmq's unbounded pipe. The client's window keeps
    WINDOW_REQUESTS unanswered, so the relay holds at most that many results; the rest of
    the work waits in the client, and nothing is lost after SIGCONT."""
    c = make_cluster(n=2, controller_args=SLOW_HB)
    rc = c.client
    rc.wait_for_engines(2, timeout=60)
    controller = psutil.Process(c.launcher.controller.pid)
    idle = controller.memory_info().rss
    proc, ids = _start_client(c, tmp_path, N_RESULTS, RESULT_SIZE, direct=True)
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        peak = idle

        def engines_idle():
            nonlocal peak
            peak = max(peak, controller.memory_info().rss)
            q = rc.queue_status()
            return sum(v["queue"] + v["tasks"] for k, v in q.items() if isinstance(k, int)) == 0

        wait_until(_every(0.5, engines_idle), "the stopped client's window answered", 300)
        done = sum(s is not None for s in _statuses(rc, ids).values())
        # the engines idle with work left: the rest of it waits in the stopped client
        assert done < N_RESULTS, "every direct request reached an engine"
        grown = max(peak, controller.memory_info().rss) - idle
        print(
            f"controller RSS: idle {idle / 2**20:.0f} MB, +{grown / 2**20:.0f} MB with "
            f"{done} direct results of {RESULT_SIZE} B toward the stopped client"
        )
        assert grown <= WINDOW_REQUESTS * RESULT_SIZE * 2 + 50 * 2**20
    except BaseException:  # the stopped client is never left behind
        proc.kill()
        proc.wait(timeout=30)
        raise
    _resume_and_finish(proc, tmp_path)
