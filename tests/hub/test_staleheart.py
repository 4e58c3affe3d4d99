"""hub/staleheart.py without sockets: whom the hub tells that its registration is gone."""

from __future__ import annotations

import pytest

from zpar.hub.staleheart import StaleHearts


def test_only_engines_unregistered_here_are_told():
    stale = StaleHearts(interval=1.0)
    assert stale.heard(b"never-registered", now=0.0) is None
    stale.unregistered(b"u1", 3, "missed 5 heartbeats")
    assert b"u1" in stale
    assert stale.heard(b"u1", now=10.0) == (3, "missed 5 heartbeats")
    assert stale.told == 1


def test_a_heart_is_told_at_most_once_per_interval():
    stale = StaleHearts(interval=1.0)
    stale.unregistered(b"u1", 0, "r")
    assert stale.heard(b"u1", now=5.0) is not None
    assert stale.heard(b"u1", now=5.5) is None  # it beats 10 times a second: not each time
    assert stale.heard(b"u1", now=6.0) is not None  # a tell lost to a partition is repeated
    assert stale.told == 2


def test_registered_again_is_no_longer_stale():
    stale = StaleHearts()
    stale.unregistered(b"u1", 0, "r")
    stale.registered(b"u1")
    assert b"u1" not in stale
    assert stale.heard(b"u1", now=100.0) is None


def test_memory_is_bounded_oldest_forgotten_first():
    stale = StaleHearts(kept=2)
    for i in range(3):
        stale.unregistered(f"u{i}".encode(), i, "r")
    assert len(stale) == 2
    assert b"u0" not in stale and b"u2" in stale


def test_nonsense_bounds_are_refused():
    with pytest.raises(ValueError, match="kept"):
        StaleHearts(kept=0)
