"""Local engines start with glibc's huge-page tunable (W5: large frames land in fresh
mappings; docs/decisions.md, "The wire ... W5"), unless turned off or already set."""

from __future__ import annotations

import os

from zpar.launchers.base import ENGINE_GLIBC_TUNABLE, engine_environment


def test_engines_get_the_tunable_added_to_the_environment(monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("ZPAR_ENGINE_HUGEPAGES", raising=False)
    monkeypatch.setenv("ZPAR_SOMETHING", "kept")
    env = engine_environment()
    assert env is not None and env["GLIBC_TUNABLES"] == ENGINE_GLIBC_TUNABLE
    assert env["ZPAR_SOMETHING"] == "kept"


def test_tunables_the_user_set_are_kept_and_joined(monkeypatch):
    monkeypatch.delenv("ZPAR_ENGINE_HUGEPAGES", raising=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    env = engine_environment()
    assert env is not None
    assert env["GLIBC_TUNABLES"] == f"glibc.malloc.arena_max=2:{ENGINE_GLIBC_TUNABLE}"


def test_a_users_own_hugetlb_choice_or_the_off_switch_wins(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0")
    assert engine_environment() is None
    monkeypatch.delenv("GLIBC_TUNABLES")
    monkeypatch.setenv("ZPAR_ENGINE_HUGEPAGES", "0")
    assert engine_environment() is None


def test_a_local_engine_runs_with_the_tunable(monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("ZPAR_ENGINE_HUGEPAGES", raising=False)
    import zpar

    with zpar.Cluster(n=1) as rc:
        assert rc[0].apply_sync(os.getenv, "GLIBC_TUNABLES") == ENGINE_GLIBC_TUNABLE
