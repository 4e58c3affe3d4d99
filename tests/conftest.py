"""Suite-wide fixtures: every test runs with its own ZPAR_DIR so no profile leaks between
tests or into the user's ~/.zpar, and no test may leave a child process behind."""

from __future__ import annotations

import os

import psutil
import pytest


@pytest.fixture(autouse=True)
def zpar_dir(tmp_path, monkeypatch):
    d = tmp_path / "zpar"
    monkeypatch.setenv("ZPAR_DIR", str(d))
    return d


def _running_children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _reap(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Wait a grace period for ``procs`` to exit; kill and return those that did not."""
    _, alive = psutil.wait_procs(procs, timeout=5)
    alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    for p in alive:
        p.kill()
    return alive


@pytest.fixture(autouse=True)
def no_leftover_children():
    """Fail a test that leaves a child process running (after a short grace period).

    Processes of wider-scoped fixtures (a module's cluster) exist before the test starts and
    are checked when the session ends instead.
    """
    before = {p.pid for p in _running_children()}
    yield
    new = [p for p in _running_children() if p.pid not in before]
    if new:
        alive = _reap(new)
        assert not alive, f"test left child processes: {[p.pid for p in alive]}"


def pytest_sessionfinish(session, exitstatus):
    left = _running_children()
    if left:
        alive = _reap(left)
        if alive:
            session.exitstatus = 1
            raise RuntimeError(f"the test session left child processes: {[p.pid for p in alive]}")
