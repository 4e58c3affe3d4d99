"""Load-balancing schemes, dependencies, retries, aborts and timeouts on real engines."""

from __future__ import annotations

import collections
import os
import signal
import time
from pathlib import Path

import pytest

import zpar
from tests.e2e.conftest import wait_for_files, wait_until
from zpar.errors import ImpossibleDependency, TaskAborted, TaskTimeout

pytestmark = pytest.mark.timeout(120)


def _engine_id():
    return os.getpid()


def _sleep_then(seconds, value=None):
    time.sleep(seconds)
    return value


def _stamp(seconds=0.0):
    """When it started and ended, and where."""
    t0 = time.time()
    time.sleep(seconds)
    return t0, time.time(), os.getpid()


def _mark_then_sleep(path, seconds, value=None):
    """Say it started (a file), then work."""
    Path(path).touch()
    time.sleep(seconds)
    return os.getpid() if value is None else value


def _fail(msg="boom"):
    raise ValueError(msg)


def _fail_first_time(flag):
    if not os.path.exists(flag):
        with open(flag, "w") as f:
            f.write(str(os.getpid()))
        raise RuntimeError("first attempt fails")
    return os.getpid()


def _record_and_spin(path, seconds):
    with open(path, "a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return os.getpid()


# -- schemes ---------------------------------------------------------------------------------


def _gated(gate):
    while not os.path.exists(gate):
        time.sleep(0.005)
    return os.getpid()


@pytest.mark.parametrize("scheme", ["lru", "leastload", "twobin", "weighted", "plainrandom"])
def test_scheme_spreads_1000_tasks_over_4_engines(make_cluster, scheme, tmp_path):
    from tests.e2e.conftest import FAST_HB

    c = make_cluster(4, controller_args=[*FAST_HB, "--scheme", scheme, "--hwm", "0"])
    # a window that lets all 1,000 reach the scheduler before any is answered
    rc = zpar.Client(url_file=c.url_file, timeout=60, window=1000)
    try:
        rc.wait_for_engines(4, timeout=60)
        pids = rc[:].apply_sync(os.getpid)
        lv = rc.load_balanced_view()
        # every task waits for a gate opened once all 1,000 are placed: no engine finishes one
        # meanwhile, so the spread is the scheme's alone, not how fast each engine ran on a
        # loaded machine (a descheduled engine rightly gets less from leastload)
        gate = tmp_path / "gate"
        ars = [lv.apply_async(_gated, str(gate)) for _ in range(1000)]

        def placed() -> bool:
            qs = rc.queue_status()
            return (
                not qs["unassigned"]
                and sum(qs[e]["queue"] + qs[e]["tasks"] for e in qs if e != "unassigned") == 1000
            )

        wait_until(placed, "every task placed on an engine", 60)
        gate.touch()
        counts = collections.Counter(ar.get(timeout=60) for ar in ars)
    finally:
        rc.close()
    assert set(counts) <= set(pids)
    per_engine = [counts[p] for p in pids]
    assert sum(per_engine) == 1000
    if scheme in ("lru", "leastload"):  # round-robin; the least loaded while none finishes
        assert per_engine == [250] * 4, per_engine
    else:  # every engine takes a fair share (expectation 250 each)
        assert min(per_engine) >= 100, per_engine


def test_hwm_1_keeps_work_off_a_blocked_engine(rc, tmp_path):
    lv = rc.load_balanced_view()
    long = lv.apply_async(_mark_then_sleep, str(tmp_path / "long"), 2.0)
    wait_for_files(tmp_path / "long")
    quick = [lv.apply_async(os.getpid) for _ in range(20)]
    where = {ar.get(timeout=10) for ar in quick}
    busy = long.get(timeout=10)
    assert busy not in where and len(where) == 1


def test_unknown_scheme_is_refused_at_start():
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-m", "zpar.hub", "--scheme", "fastest"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode != 0 and "fastest" in p.stderr


# -- dependencies ----------------------------------------------------------------------------


def test_after_runs_after(rc):
    lv = rc.load_balanced_view()
    first = lv.apply_async(_stamp, 0.4)
    with lv.temp_flags(after=first):
        second = lv.apply_async(_stamp)
    assert second.get(timeout=10)[0] >= first.get(timeout=10)[1]


def test_after_a_failure_is_impossible_at_once(rc):
    lv = rc.load_balanced_view()
    bad = lv.apply_async(_fail)
    with pytest.raises(zpar.RemoteError):
        bad.get(timeout=10)
    t0 = time.monotonic()
    with lv.temp_flags(after=bad):
        dependent = lv.apply_async(_stamp)
    with pytest.raises(ImpossibleDependency):
        dependent.get(timeout=10)
    assert time.monotonic() - t0 < 2
    # failure accepted: it runs
    lv.set_flags(after=zpar.Dependency(bad, success=False, failure=True))
    assert len(lv.apply_sync(_stamp)) == 3
    lv.set_flags(after=None)


def test_after_a_failure_still_running_fails_when_it_does(rc):
    lv = rc.load_balanced_view()
    bad = lv.apply_async(lambda: (time.sleep(0.3), _fail()))
    with lv.temp_flags(after=bad):
        dependent = lv.apply_async(_stamp)
    with pytest.raises(ImpossibleDependency, match="did not succeed"):
        dependent.get(timeout=10)


def test_all_and_any(rc):
    lv = rc.load_balanced_view()
    ok = lv.apply_async(_stamp, 0.2)
    bad = lv.apply_async(_fail)
    with lv.temp_flags(after=zpar.Dependency([ok, bad], all=False)):
        any_ = lv.apply_async(_stamp)
    with lv.temp_flags(after=zpar.Dependency([ok, bad], all=True)):
        all_ = lv.apply_async(_stamp)
    assert any_.get(timeout=10)[0] >= 0
    with pytest.raises(ImpossibleDependency):
        all_.get(timeout=10)
    bad2 = lv.apply_async(_fail)
    with lv.temp_flags(after=zpar.Dependency([bad, bad2], all=False)):
        none = lv.apply_async(_stamp)
    with pytest.raises(ImpossibleDependency, match="none of the 2"):
        none.get(timeout=10)


def test_follow_runs_where_the_followed_task_ran(rc):
    lv = rc.load_balanced_view()
    for _ in range(3):
        first = lv.apply_async(os.getpid)
        with lv.temp_flags(follow=first):
            followers = [lv.apply_async(os.getpid) for _ in range(10)]
        assert {f.get(timeout=10) for f in followers} == {first.get(timeout=10)}


def test_follow_all_on_two_engines_is_impossible(rc):
    lv = rc.load_balanced_view()
    a = rc.load_balanced_view(targets=[0]).apply_async(os.getpid)
    b = rc.load_balanced_view(targets=[1]).apply_async(os.getpid)
    rc.wait([a, b])
    with lv.temp_flags(follow=[a, b]):
        both = lv.apply_async(os.getpid)
    with pytest.raises(ImpossibleDependency, match="different engines"):
        both.get(timeout=10)
    with lv.temp_flags(follow=zpar.Dependency([a, b], all=False)):
        either = lv.apply_async(os.getpid)
    assert either.get(timeout=10) in {a.get(), b.get()}


def test_after_a_direct_call(rc):
    direct = rc[0].apply_async(_stamp, 0.5)
    lv = rc.load_balanced_view()
    with lv.temp_flags(after=direct):
        later = lv.apply_async(_stamp)
    assert later.get(timeout=10)[0] >= direct.get(timeout=10)[1]
    # and one that finished long ago, known only to this client
    with lv.temp_flags(follow=direct):
        assert lv.apply_sync(os.getpid) == direct.get()[2]


def test_a_5000_task_chain_completes_in_order(rc):
    lv = rc.load_balanced_view()
    prev = lv.apply_async(_stamp)
    first = prev
    for _ in range(4999):
        with lv.temp_flags(after=prev):
            prev = lv.apply_async(time.time)
    end = prev.get(timeout=90)
    assert end >= first.get()[1]


def test_a_failed_chain_unwinds_at_once(rc):
    lv = rc.load_balanced_view()
    bad = lv.apply_async(_fail)
    prev, chain = bad, []
    for _ in range(1000):
        with lv.temp_flags(after=prev):
            prev = lv.apply_async(time.time)
        chain.append(prev)
    assert rc.wait(chain, timeout=30)
    assert all(isinstance(ar.exception(), ImpossibleDependency) for ar in chain)


def test_timeout_on_dependencies(rc):
    lv = rc.load_balanced_view()
    slow = lv.apply_async(_sleep_then, 3)
    t0 = time.monotonic()
    with lv.temp_flags(after=slow, timeout=0.3):
        waiting = lv.apply_async(_stamp)
    with pytest.raises(TaskTimeout, match="dependencies"):
        waiting.get(timeout=10)
    assert time.monotonic() - t0 < 2.5
    slow.get(timeout=10)  # leave both engines free for the next test


def test_timeout_does_not_touch_tasks_that_run(rc):
    lv = rc.load_balanced_view(timeout=0.2)
    assert lv.map_sync(abs, range(-20, 0)) == list(range(20, 0, -1))
    time.sleep(0.3)  # their deadlines pass after they finished: no late error
    assert lv.apply_sync(abs, -1) == 1


# -- retries and engine death ----------------------------------------------------------------


def test_retry_after_an_exception_runs_elsewhere(rc, tmp_path):
    lv = rc.load_balanced_view(retries=1)
    flag = str(tmp_path / "flag")
    ar = lv.apply_async(_fail_first_time, flag)
    pid = ar.get(timeout=10)
    failed_on = int(Path(flag).read_text())
    assert pid in rc[:].apply_sync(os.getpid) and pid != failed_on
    # without retries the error reaches the caller
    os.remove(flag)
    with pytest.raises(zpar.RemoteError, match="first attempt"):
        rc.load_balanced_view().apply_sync(_fail_first_time, flag)
    # retries exhausted: the last error is reported
    with pytest.raises(zpar.RemoteError, match="boom"):
        rc.load_balanced_view(retries=2).apply_sync(_fail)


def test_retry_when_the_engine_is_sigkilled_mid_task(make_cluster, tmp_path):
    c = make_cluster(2)
    rc = c.client
    log_path = tmp_path / "runs"
    lv = rc.load_balanced_view(retries=1)
    ar = lv.apply_async(_record_and_spin, str(log_path), 1.0)
    deadline = time.monotonic() + 10
    while not log_path.exists() or not log_path.read_text():
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.01)
    victim = int(log_path.read_text().split()[0])
    os.kill(victim, signal.SIGKILL)
    pid = ar.get(timeout=15)
    assert pid != victim
    runs = [int(x) for x in log_path.read_text().split()]
    assert runs == [victim, pid]  # once on each engine, one result for the client
    assert not rc.outstanding
    # no retries left: EngineError, quickly
    log_path.unlink()
    lv = rc.load_balanced_view()
    ar = lv.apply_async(_record_and_spin, str(log_path), 30)
    while not log_path.exists() or not log_path.read_text():
        time.sleep(0.01)
    t0 = time.monotonic()
    os.kill(int(log_path.read_text().split()[0]), signal.SIGKILL)
    with pytest.raises(zpar.EngineError):
        ar.get(timeout=15)
    assert time.monotonic() - t0 < 3


# -- abort, status, flags --------------------------------------------------------------------


def test_abort_queued_tasks_in_the_scheduler(rc, tmp_path):
    lv = rc.load_balanced_view()
    marks = [tmp_path / "a", tmp_path / "b"]
    blockers = [lv.apply_async(_mark_then_sleep, str(m), 2) for m in marks]
    wait_for_files(*marks)  # both engines busy: what comes next waits in the scheduler
    queued = [lv.apply_async(os.getpid) for _ in range(6)]
    deadline = time.monotonic() + 5  # the hub hears of them just after the scheduler
    while rc.queue_status()["unassigned"] < 6:
        assert time.monotonic() < deadline, rc.queue_status()
        time.sleep(0.02)
    rc.abort(queued[:3])
    for ar in queued[:3]:
        with pytest.raises(TaskAborted):
            ar.get(timeout=10)
    assert all(isinstance(ar.get(timeout=10), int) for ar in queued[3:])
    rc.wait(blockers)


def test_dependents_of_an_aborted_task_are_impossible(rc, tmp_path):
    lv = rc.load_balanced_view()
    marks = [tmp_path / "a", tmp_path / "b"]
    blockers = [lv.apply_async(_mark_then_sleep, str(m), 1) for m in marks]
    wait_for_files(*marks)
    queued = lv.apply_async(os.getpid)
    with lv.temp_flags(after=queued):
        dependent = lv.apply_async(os.getpid)
    lv.abort(queued)
    with pytest.raises(TaskAborted):
        queued.get(timeout=10)
    with pytest.raises(ImpossibleDependency):
        dependent.get(timeout=10)
    rc.wait(blockers)


def test_flags_are_checked_when_set(rc):
    lv = rc.load_balanced_view()
    with pytest.raises(ValueError, match="retries"):
        lv.set_flags(retries=-1)
    with pytest.raises(ValueError, match="timeout"):
        lv.set_flags(timeout="soon")
    with pytest.raises(TypeError, match="dependencies"):
        lv.set_flags(after=3.5)
    with pytest.raises(KeyError, match="flag"):
        lv.set_flags(priority=1)
    with lv.temp_flags(retries=3, timeout=5):
        assert (lv.retries, lv.timeout) == (3, 5)
    assert (lv.retries, lv.timeout) == (0, None)
    with pytest.raises(ValueError, match="retries"):
        rc.load_balanced_view(retries=-2)


# -- depend / require ------------------------------------------------------------------------


def test_require_a_module_no_engine_has_is_impossible(rc):
    @zpar.require("zpar_no_such_module")
    def needs():
        return 1

    with pytest.raises(ImpossibleDependency, match="depend/require"):
        rc.load_balanced_view().apply_sync(needs)


def test_require_imports_the_module_for_the_function(rc):
    @zpar.require("json")
    def dumps():
        return json.dumps([1])  # noqa: F821 - bound on the engine by require

    assert rc.load_balanced_view().apply_sync(dumps) == "[1]"


def test_depend_keeps_tasks_on_engines_where_it_holds(rc):
    target = rc[1].apply_sync(os.getpid)

    def on_target(pid):
        import os

        return os.getpid() == pid

    @zpar.depend(on_target, target)
    def where():
        return os.getpid()

    lv = rc.load_balanced_view()
    assert {lv.apply_sync(where) for _ in range(10)} == {target}
