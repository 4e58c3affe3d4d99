"""Suite-wide fixtures: every test runs with its own ZPAR_DIR so no profile leaks between
tests or into the user's ~/.zpar, and no test may leave a child process behind.

Two tiers: a test that starts processes is marked ``cluster``, automatically when it uses a
fixture of PROCESS_FIXTURES, by its module's ``pytestmark`` otherwise. ``pytest -m "not
cluster"`` is the fast tier, and in it starting a process fails the test that tried, naming
the marker it lacks (so a missing mark is found the first time the fast tier runs).
"""

from __future__ import annotations

import os
import subprocess

import psutil
import pytest

#: fixtures that start processes (a controller, engines, PostgreSQL, sshd): a test that uses
#: one, directly or through another fixture, is a ``cluster`` test
PROCESS_FIXTURES = frozenset(
    {
        "cluster",
        "cluster4",
        "rc",
        "make_cluster",
        "cluster_addresses",
        "pg_database",
        "pg_server",
        "sshd",
    }
)


#: folders whose every test runs real processes end to end
PROCESS_FOLDERS = ("e2e", "deploy")


def _real_fixture(item, name: str) -> str | None:
    """For a fixture ``name`` that serves the in-process cluster (zpar.testing) unless its
    test is marked ``cluster``: the name of the process fixture it uses then."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.get(name) if info is not None else None
    return getattr(defs[-1].func, "real_fixture", None) if defs else None


def pytest_collection_modifyitems(config, items):
    for item in items:
        folder = item.path.relative_to(config.rootpath / "tests").parts[0]
        names = PROCESS_FIXTURES & set(getattr(item, "fixturenames", ()))
        dual = {n: real for n in names if (real := _real_fixture(item, n))}
        if folder in PROCESS_FOLDERS or names - dual.keys():
            item.add_marker(pytest.mark.cluster)
        if dual and item.get_closest_marker("cluster"):
            # the real cluster is set up before the autouse fixtures, as a test naming it
            # would have it: its processes are the module's, not ones the test left
            for real in dual.values():
                if real not in item.fixturenames:
                    item.fixturenames.insert(0, real)


def _fast_tier(config) -> bool:
    return "not cluster" in (config.getoption("markexpr", "") or "")


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    # after collection: importing a library may run a command (platform.architecture runs
    # `file`); only what the tests and their fixtures do counts
    if _fast_tier(session.config):
        _forbid_processes()


def _forbid_processes() -> None:
    """In the fast tier, a test that starts a process fails at once, saying why: through
    subprocess, and through the os calls beneath multiprocessing and os.system."""

    def refusal(what: object) -> RuntimeError:
        return RuntimeError(
            f"the fast tier starts no process, and this test started {what!r:.120}: "
            "mark it (or its module) with pytest.mark.cluster, or use a fixture of "
            "tests/conftest.py's PROCESS_FIXTURES"
        )

    def refuse(self, args, *rest, **kw):
        raise refusal(args)

    def refuse_os(name: str):
        def refused(*args, **kw):
            raise refusal(f"os.{name}{args!r:.100}")

        return refused

    subprocess.Popen._execute_child = refuse  # type: ignore[attr-defined]
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            setattr(os, name, refuse_os(name))


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
def no_leftover_children(request):
    """Fail a test that leaves a child process running (after a short grace period).

    Processes of wider-scoped fixtures (a module's cluster) exist before the test starts and
    are checked when the session ends instead. The fast tier starts none (they are refused),
    so it skips the look at the process table (tens of ms a test on a busy machine).
    """
    if _fast_tier(request.config):
        yield
        return
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
