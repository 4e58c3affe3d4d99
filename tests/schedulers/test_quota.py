"""The task scheduler's per-client queue limit and scheduler-wide budget
(schedulers/quota.py), without sockets."""

from __future__ import annotations

import pytest

from zpar.schedulers.quota import QueueQuota


def test_a_client_past_its_task_limit_is_refused_naming_the_limit():
    q = QueueQuota(per_client=3, per_client_bytes=10**6, budget=10**9, task_cost=0)
    assert [q.charge(b"a", f"m{i}", 10) for i in range(3)] == [None, None, None]
    why = q.charge(b"a", "m3", 10)
    assert why is not None and "the limit per client is 3" in why and "m3" in why
    assert q.charge(b"b", "n0", 10) is None  # other clients are not affected
    assert q.of(b"a") == (3, 30) and q.refused == 1
    q.release("m0")
    assert q.charge(b"a", "m3", 10) is None


def test_bytes_per_client_but_always_one_task_however_large():
    q = QueueQuota(per_client=100, per_client_bytes=100, budget=10**9, task_cost=0)
    assert q.charge(b"a", "big", 10_000) is None  # nothing held: one goes in
    why = q.charge(b"a", "small", 1)
    assert why is not None and "the limit per client is 100 bytes" in why
    q.release("big")
    assert q.charge(b"a", "small", 1) is None


def test_the_budget_counts_frames_and_a_cost_per_task_over_all_clients():
    q = QueueQuota(per_client=100, per_client_bytes=10**6, budget=1000, task_cost=100)
    for i in range(4):
        q.charge(bytes([i]), f"m{i}", 150)  # 250 each
    assert q.total == 1000 and not q.over_budget
    q.charge(b"x", "m4", 0)
    assert q.over_budget
    q.release("m0")
    assert not q.over_budget and q.counts() == {
        "tasks": 4,
        "clients": 4,
        "bytes": 850,
        "refused": 0,
    }


def test_release_is_idempotent_and_ignores_unknown_ids():
    q = QueueQuota(per_client=2, per_client_bytes=100, budget=1000, task_cost=1)
    q.charge(b"a", "m", 5)
    q.release("m")
    q.release("m")
    q.release("never")
    assert q.total == 0 and q.of(b"a") == (0, 0) and not q.holds("m")


@pytest.mark.parametrize("kw", [{"per_client": 0}, {"per_client_bytes": -1}, {"budget": 0}])
def test_bad_bounds_are_refused_naming_the_setting(kw):
    name = next(iter(kw))
    with pytest.raises(ValueError, match=f"^{name} must be"):
        QueueQuota(**kw)
