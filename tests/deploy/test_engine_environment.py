"""Local engines start with glibc tunables (docs/decisions.md): huge pages ("The wire ...
W5") and large frames received into reused memory ("W5: reused frame memory",
zpar.wire.framememory), each unless turned off or already set by the user."""

from __future__ import annotations

import os

import pytest

from zpar.cluster.launchers.base import ENGINE_GLIBC_TUNABLE, engine_environment
from zpar.wire import framememory

ALL = ":".join([ENGINE_GLIBC_TUNABLE, *framememory.REUSE_TUNABLES])


@pytest.fixture(autouse=True)
def _defaults(monkeypatch):
    for name in ("GLIBC_TUNABLES", "ZPAR_ENGINE_HUGEPAGES", framememory.SWITCH_ENV):
        monkeypatch.delenv(name, raising=False)


def test_engines_get_the_tunables_added_to_the_environment(monkeypatch):
    monkeypatch.setenv("ZPAR_SOMETHING", "kept")
    env = engine_environment()
    assert env is not None and env["GLIBC_TUNABLES"] == ALL
    assert env["ZPAR_SOMETHING"] == "kept"
    assert "glibc.malloc.mmap_max=0" in framememory.REUSE_TUNABLES


def test_tunables_the_user_set_are_kept_and_win(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    env = engine_environment()
    assert env is not None
    ours = [t for t in ALL.split(":") if not t.startswith("glibc.malloc.arena_max=")]
    assert env["GLIBC_TUNABLES"] == ":".join(["glibc.malloc.arena_max=2", *ours])


def test_a_users_own_hugetlb_choice_or_the_off_switches_win(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0")
    env = engine_environment()
    assert env is not None
    assert env["GLIBC_TUNABLES"] == ":".join(
        ["glibc.malloc.hugetlb=0", *framememory.REUSE_TUNABLES]
    )
    monkeypatch.delenv("GLIBC_TUNABLES")
    monkeypatch.setenv("ZPAR_ENGINE_HUGEPAGES", "0")
    env = engine_environment()
    assert env is not None and env["GLIBC_TUNABLES"] == ":".join(framememory.REUSE_TUNABLES)
    monkeypatch.setenv(framememory.SWITCH_ENV, "0")
    assert engine_environment() is None
    monkeypatch.delenv("ZPAR_ENGINE_HUGEPAGES")
    env = engine_environment()
    assert env is not None and env["GLIBC_TUNABLES"] == ENGINE_GLIBC_TUNABLE


def test_a_misspelt_switch_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv(framememory.SWITCH_ENV, "yes")
    with pytest.raises(ValueError, match="ZPAR_FRAME_REUSE must be one of all, engines, 0"):
        engine_environment()


def test_a_local_engine_runs_with_the_tunables():
    import zpar

    with zpar.Cluster(n=1) as rc:
        assert rc[0].apply_sync(os.getenv, "GLIBC_TUNABLES") == ALL
