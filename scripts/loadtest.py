"""Load test under faults (issue 13): C client processes x T tasks on E engines while
engines, the task scheduler and the controller are killed.

    python scripts/loadtest.py                       # the full run: 50 x 2,000 on 4 engines
    python scripts/loadtest.py --clients 3 --tasks 1000 --json    # CI's reduced form

Each client submits its tasks at once (load-balanced with retries, a tenth direct to one
engine), then reads every outcome. As the answered tasks pass fractions of the total the
orchestrator SIGKILLs an engine (10 %; the launcher replaces it), the task scheduler (30 %;
the controller restarts it), another engine (50 %) and the controller (70 %; what is
pending fails with ControllerLost). Passes (exit 0) when every task of every client was
answered (a result or an error) within the timeout, every result is the client's own, and
the controller's and scheduler's memory stayed within MEMORY_BOUND of their idle size.
Figures (noisy on a shared machine) go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

from zpar.constants import CLIENT_QUEUE_LIMIT, WINDOW_REQUESTS

#: Bytes the controller or the task scheduler may grow by over their idle size.
MEMORY_BOUND = 200 * 2**20
#: (fraction of all tasks answered, what is killed then)
KILLS = [(0.10, "engine"), (0.30, "scheduler"), (0.50, "engine"), (0.70, "controller")]


def work(client_id: int, i: int, seconds: float = 0.0) -> tuple[int, int]:
    if seconds:  # the load spans the kills however fast the task path is
        time.sleep(seconds)
    return client_id, i


# -- a client process -------------------------------------------------------------------------


class _LateReplies(logging.Handler):
    """Counts replies the client's I/O thread dropped as answering nothing pending (a
    second answer to a task, or one after the client had failed it)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("reply to unknown msg_id"):
            self.count += 1


def run_client(
    url_file: str,
    cid: int,
    n: int,
    progress: Path,
    timeout: float,
    window: int,
    seconds: float = 0.0,
) -> dict:
    import zpar

    late = _LateReplies()
    io_log = logging.getLogger("zpar.client.ioloop")
    io_log.setLevel(logging.DEBUG)
    io_log.addHandler(late)
    rc = zpar.Client(url_file=url_file, timeout=60, window=window)
    rc.wait_for_engines(1, timeout=60)
    view = rc.load_balanced_view(retries=2)
    ids = rc.ids
    ars: list = []
    t0 = time.monotonic()
    refused = 0
    for i in range(n):
        try:
            if i % 10 == 9:  # a tenth direct, pinned to one engine
                ars.append(rc[ids[i % len(ids)]].apply_async(work, cid, i, seconds))
            else:
                ars.append(view.apply_async(work, cid, i, seconds))
        except zpar.ZparError as e:  # refused at once (its engine was killed meanwhile)
            ars.append(e)
            refused += 1
    stop = threading.Event()
    answered = [refused]  # counted as they finish: 50 clients x 2,000 done() a tenth of a second
    # took a core of the 2

    lock = threading.Lock()  # done-callbacks run in the I/O thread, or here if done already

    def count(_: object) -> None:
        with lock:
            answered[0] += 1

    for ar in ars:
        if not isinstance(ar, Exception):
            ar.add_done_callback(count)

    def report_progress() -> None:  # tasks answered so far, for the orchestrator's kills
        written = -1
        while not stop.wait(0.05):
            if answered[0] != written:
                written = answered[0]
                progress.write_text(str(written))

    threading.Thread(target=report_progress, daemon=True).start()
    deadline = time.monotonic() + timeout
    outcomes: Counter[str] = Counter()
    wrong = unanswered = 0
    for i, ar in enumerate(ars):
        try:
            if isinstance(ar, Exception):
                raise ar
            value = ar.get(timeout=max(0.0, deadline - time.monotonic()))
            outcomes["ok"] += 1
            wrong += value != (cid, i)
        except zpar.TimeoutError:
            unanswered += 1
        except zpar.ZparError as e:
            # an engine's death reaches a client two ways: the client's own EngineError, or
            # the scheduler's reply (a RemoteError flavour of it, ename 'EngineError', as
            # ipyparallel raises it); both are the same outcome
            outcomes[e.ename if isinstance(e, zpar.RemoteError) else type(e).__name__] += 1
    elapsed = time.monotonic() - t0
    stop.set()
    progress.write_text(str(n))
    try:
        rc.close()
    except Exception:  # the controller may be dead: nothing to close politely
        pass
    return {
        "client": cid,
        "tasks": n,
        "outcomes": dict(outcomes),
        "wrong": wrong,
        "unanswered": unanswered,
        "late_replies": late.count,
        "seconds": round(elapsed, 2),
    }


# -- the orchestrator ---------------------------------------------------------------------------


def _rss(p: psutil.Process | None) -> int:
    try:
        return p.memory_info().rss if p is not None else 0
    except psutil.Error:
        return 0


def _scheduler_of(controller: psutil.Process) -> psutil.Process | None:
    try:
        for p in controller.children():
            if "zpar.schedulers" in " ".join(p.cmdline()):
                return p
    except psutil.Error:
        pass
    return None


def _engine_pids(url_file: str) -> list[int]:
    from zpar.cluster.launchers.hubquery import HubLine

    line = HubLine(url_file)
    try:
        return [e["pid"] for e in line.engine_info().values()]
    finally:
        line.close()


class MemoryWatch(threading.Thread):
    """Largest RSS of the controller and of its (current) task scheduler."""

    def __init__(self, controller: psutil.Process) -> None:
        super().__init__(daemon=True)
        self.controller = controller
        self.idle = {"controller": _rss(controller), "scheduler": _rss(_scheduler_of(controller))}
        self.peak = dict(self.idle)
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            for name, p in (
                ("controller", self.controller),
                ("scheduler", _scheduler_of(self.controller)),
            ):
                self.peak[name] = max(self.peak[name], _rss(p))


def orchestrate(
    clients: int,
    tasks: int,
    engines: int,
    timeout: float,
    kills: bool,
    window: int,
    work_ms: float = 0.0,
) -> dict:
    import zpar

    os.environ.setdefault("ZPAR_DIR", tempfile.mkdtemp(prefix="zpar-load-"))
    queue = ["--client-queue", str(max(window, CLIENT_QUEUE_LIMIT))]  # a window past it: room
    cluster = zpar.Cluster(n=engines, keep=True, log_level="WARNING", controller_args=queue)
    cluster.start()
    work_dir = Path(tempfile.mkdtemp(prefix="zpar-load-clients-"))
    procs = []
    try:
        cluster.client.wait_for_engines(engines, timeout=120)
        controller = psutil.Process(cluster.launcher.controller.pid)
        memory = MemoryWatch(controller)
        memory.start()
        url_file = str(cluster.url_file)
        for cid in range(clients):
            cmd = [sys.executable, __file__, "--client", url_file, "--id", str(cid)]
            cmd += ["--tasks", str(tasks), "--timeout", str(timeout), "--dir", str(work_dir)]
            cmd += ["--window", str(window), "--work-ms", str(work_ms)]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL))
        t0 = time.monotonic()
        done_kills = []
        tries = 0
        pending = list(KILLS) if kills else []
        total = clients * tasks
        while any(p.poll() is None for p in procs):
            answered = sum(_read_int(work_dir / f"{c}.progress") for c in range(clients))
            if pending and answered >= pending[0][0] * total:
                kill = _kill(pending[0][1], controller, url_file, answered, t0)
                if "pid" in kill or tries >= 5:  # a hub too busy to say where engines are:
                    pending.pop(0)  # ask again at the next turn, a few times
                    done_kills.append(kill)
                    tries = 0
                else:
                    tries += 1
            if time.monotonic() - t0 > timeout + 120:
                break
            time.sleep(0.1)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        elapsed = time.monotonic() - t0
        memory.stopping.set()
        results = [_read_json(work_dir / f"{c}.json") for c in range(clients)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        cluster.stop()
    return _summary(results, clients, tasks, engines, elapsed, done_kills, memory)


def _kill(what: str, controller: psutil.Process, url_file: str, answered: int, t0: float) -> dict:
    pid = None
    try:
        if what == "engine":
            pid = _engine_pids(url_file)[0]
        elif what == "scheduler":
            sched = _scheduler_of(controller)
            pid = sched.pid if sched is not None else None
        else:
            pid = controller.pid
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
    except Exception as e:  # the part may be gone already (the controller, killed before)
        return {"what": what, "error": str(e)}
    return {"what": what, "pid": pid, "answered": answered, "at": round(time.monotonic() - t0, 2)}


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"missing": str(path)}


def _summary(results, clients, tasks, engines, elapsed, kills, memory) -> dict:
    outcomes: Counter[str] = Counter()
    problems = []
    for r in results:
        if "missing" in r:
            problems.append(f"a client wrote no result: {r['missing']}")
            continue
        outcomes.update(r["outcomes"])
        answered = sum(r["outcomes"].values())
        if answered != tasks or r["unanswered"]:
            problems.append(
                f"client {r['client']}: {answered} of {tasks} answered, "
                f"{r['unanswered']} unanswered"
            )
        if r["wrong"]:
            problems.append(f"client {r['client']}: {r['wrong']} results not its own")
    growth = {k: memory.peak[k] - memory.idle[k] for k in memory.peak}
    for name, grew in growth.items():
        if grew > MEMORY_BOUND:
            problems.append(f"the {name} grew by {grew / 2**20:.0f} MB")
    return {
        "clients": clients,
        "tasks_each": tasks,
        "engines": engines,
        "seconds": round(elapsed, 1),
        "outcomes": dict(outcomes),
        "late_replies": sum(r.get("late_replies", 0) for r in results),
        "kills": kills,
        "memory_mb": {
            k: {"idle": round(memory.idle[k] / 2**20), "peak": round(memory.peak[k] / 2**20)}
            for k in memory.peak
        },
        "problems": problems,
        "ok": not problems,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--tasks", type=int, default=2000, help="tasks per client")
    p.add_argument("--engines", type=int, default=4)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for every answer")
    p.add_argument("--no-kills", action="store_true", help="the same load without faults")
    p.add_argument("--work-ms", type=float, default=0.0, help="each task sleeps this long")
    p.add_argument(
        "--window",
        type=int,
        default=WINDOW_REQUESTS,
        help="each client's submission window (larger than 1024 raises the controller's "
        "--client-queue to match)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    p.add_argument("--client", help=argparse.SUPPRESS)  # url file: run as one client
    p.add_argument("--id", type=int, help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.client:
        d = Path(args.dir)
        progress = d / f"{args.id}.progress"
        seconds = args.work_ms / 1000
        out = run_client(
            args.client, args.id, args.tasks, progress, args.timeout, args.window, seconds
        )
        (d / f"{args.id}.json").write_text(json.dumps(out))
        return 0
    summary = orchestrate(
        args.clients,
        args.tasks,
        args.engines,
        args.timeout,
        not args.no_kills,
        args.window,
        args.work_ms,
    )
    if args.json:
        print(json.dumps(summary))
    else:
        for k, v in summary.items():
            print(f"{k}: {v}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
