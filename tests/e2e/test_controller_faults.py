"""The controller survives its parts: a killed task scheduler is replaced on the same
addresses, and the load-balanced tasks it held are resent (with retries) or fail at once;
a killed controller fails everything pending with an error naming it. Every task in flight
is answered exactly once, never left hanging."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

import zpar
from tests.e2e.conftest import wait_until


def _work(x):
    import time

    time.sleep(0.02)
    return x * x


def _scheduler(cluster):
    ctl = psutil.Process(cluster.launcher.controller.pid)
    found = [p for p in ctl.children() if "zpar.schedulers" in " ".join(p.cmdline())]
    assert len(found) == 1, found
    return found[0]


def _outcomes(ars, timeout=90):
    """{index: ("ok", value) | ("error", exception)}, each AsyncResult asked once."""
    out = {}
    for i, ar in enumerate(ars):
        try:
            out[i] = ("ok", ar.get(timeout=timeout))
        except zpar.ZparError as e:
            out[i] = ("error", e)
    return out


def test_a_killed_task_scheduler_is_replaced_and_its_tasks_answered(make_cluster):
    c = make_cluster(n=2)
    rc = c.client
    old = _scheduler(c)
    with_retries = rc.load_balanced_view(retries=2)
    without = rc.load_balanced_view()
    n = 150
    ar_retry = [with_retries.apply_async(_work, i) for i in range(n)]
    ar_plain = [without.apply_async(_work, i) for i in range(n)]
    wait_until(lambda: sum(a.done() for a in ar_retry) >= 5, "some tasks done", 60)
    old.kill()

    retried = _outcomes(ar_retry)
    plain = _outcomes(ar_plain)
    # retries: every one resent and answered with its own result
    assert retried == {i: ("ok", i * i) for i in range(n)}
    # no retries: each either answered before the death or failed naming the scheduler
    for i, (kind, value) in plain.items():
        if kind == "ok":
            assert value == i * i
        else:
            assert isinstance(value, zpar.SchedulerLost), value
            assert "task scheduler died" in str(value)
    # the store leaves none of them pending: resent tasks finished ok; failed ones marked
    # scheduler_died (one the hub never heard of is absent; one sent after the death,
    # which reached the new scheduler from the client's queue, ran); a task answered just
    # before the death, which the dead scheduler never reported, is marked scheduler_died
    # once its client does not resend it (hub.schedwatch.RESEND_WINDOW)
    failed_ids = [ar_plain[i].msg_ids[0] for i, (kind, _) in plain.items() if kind == "error"]
    retry_ids = [ar.msg_ids[0] for ar in ar_retry]

    offenders: dict[str, object] = {}

    def store_agrees():
        recs = rc.db_query({"msg_id": {"$in": failed_ids + retry_ids}}, keys=["status"])
        status = {r["msg_id"]: r["status"] for r in recs}
        offenders.clear()
        offenders.update(
            {m: status.get(m) for m in retry_ids if status.get(m) not in ("ok", "scheduler_died")}
        )
        offenders.update({m: None for m in failed_ids if m in status and status[m] is None})
        return not offenders

    try:
        wait_until(store_agrees, "the store leaves none of them pending", timeout=60)
    except AssertionError:
        raise AssertionError(f"store records not as expected: {offenders}") from None
    # a new scheduler serves, on the addresses the peers already had
    new = _scheduler(c)
    assert new.pid != old.pid
    assert without.map_sync(_work, range(10)) == [i * i for i in range(10)]
    assert sorted(rc.ids) == [0, 1]


def test_a_killed_controller_fails_everything_pending_naming_it(make_cluster):
    c = make_cluster(n=2)
    rc = c.client
    view = rc.load_balanced_view()
    slow = [view.apply_async(_work, i) for i in range(300)]
    direct = [rc[i % 2].apply_async(_work, i) for i in range(50)]
    wait_until(lambda: sum(a.done() for a in slow) >= 3, "some tasks done", 60)
    os.kill(c.launcher.controller.pid, signal.SIGKILL)
    outcomes = _outcomes(slow + direct, timeout=60)
    errors = [v for kind, v in outcomes.values() if kind == "error"]
    assert errors, "every task finished before the kill: nothing was tested"
    for i, (kind, value) in outcomes.items():
        if kind == "ok":
            assert value == (i if i < 300 else i - 300) ** 2
        else:
            assert isinstance(value, zpar.ControllerLost | zpar.EngineError), value
    assert any(isinstance(e, zpar.ControllerLost) for e in errors)
    lost = next(e for e in errors if isinstance(e, zpar.ControllerLost))
    assert str(c.launcher.controller.pid) in str(lost)
    # and a new request fails at once, not after a timeout
    with pytest.raises(zpar.ControllerLost):
        view.apply_sync(_work, 1)


def test_a_scheduler_restarted_just_before_its_controller_dies_exits_too(make_cluster):
    """The controller tells its scheduler its pid: a scheduler still importing when the
    controller is SIGKILLed must not take init for its parent and outlive the cluster."""
    c = make_cluster(1)
    ctl = psutil.Process(c.launcher.controller.pid)
    first = _scheduler(c)
    first.kill()
    wait_until(
        lambda: any(p.pid != first.pid for p in _children_schedulers(ctl)),
        "the scheduler was never restarted",
        timeout=30,
    )
    second = next(p for p in _children_schedulers(ctl) if p.pid != first.pid)
    assert "--parent-pid" in second.cmdline()
    ctl.kill()  # at once: the new scheduler is most likely still importing
    ctl.wait(30)
    second.wait(30)  # psutil.TimeoutExpired if it outlived its controller


def _children_schedulers(ctl):
    try:
        return [p for p in ctl.children() if "zpar.schedulers" in " ".join(p.cmdline())]
    except psutil.Error:
        return []
