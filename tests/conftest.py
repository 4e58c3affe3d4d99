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


@pytest.fixture(autouse=True)
def no_leftover_children():
    """Fail a test that leaves a child process running (after a short grace period)."""
    yield
    children = psutil.Process(os.getpid()).children(recursive=True)
    if children:
        _, alive = psutil.wait_procs(children, timeout=5)
        for p in alive:
            p.kill()
        assert not alive, f"test left child processes: {[p.pid for p in alive]}"
