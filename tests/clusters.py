"""Shared pieces of the test folders' cluster fixtures: each folder's conftest keeps its own
fixture names and scopes and builds them from these."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import cloudpickle
import pytest

import zpar

#: fast heartbeats, for tests of an engine whose connection stays open (stopped, frozen,
#: cut off): noticed within a second. A killed engine's connection closes and the hub
#: notices that within its suspect grace (hub/heartmonitor.py) whatever the period, so a
#: test that only kills engines needs none; and 0.4 s of tolerance is less than a loaded
#: 2-core host gives a busy engine's heart (8 ranks in collectives at load 17 had engines
#: declared dead, alive, in tests/comm/test_communicator.py).
FAST_HB = ["--hb-period", "0.1", "--hb-misses", "4"]


def wait_until(condition, what, timeout=30.0, *, tick=None):
    """Poll ``condition`` until true; fail naming ``what`` after ``timeout`` seconds (a
    deadline for failing, never a timing assertion). ``tick``: called between polls (a
    socket-less test's own loop)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        if tick is not None:
            tick()
        time.sleep(0.005 if tick is not None else 0.01)


def shipped_by_value(module: ModuleType) -> Iterator[None]:
    """Body of a module-scoped fixture: engines cannot import test modules, so ``module``'s
    functions and classes travel by value while its tests run, as a notebook's do."""
    cloudpickle.register_pickle_by_value(module)
    yield
    cloudpickle.unregister_pickle_by_value(module)


def module_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    dir_name: str,
    n: int,
    *,
    wait_timeout: float | None = None,
    env: dict[str, str] | None = None,
    **cluster_kw: Any,
) -> Iterator[zpar.Cluster]:
    """Body of a module-scoped fixture: a cluster of ``n`` engines with its own ZPAR_DIR
    (a fresh ``dir_name`` folder) and ``env``, stopped after the module. With
    ``wait_timeout`` the fixture first waits for all ``n`` engines to register."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ZPAR_DIR", str(tmp_path_factory.mktemp(dir_name)))
    for name, value in (env or {}).items():
        mp.setenv(name, value)
    c = zpar.Cluster(n=n, **cluster_kw)
    try:
        c.start()
        if wait_timeout is not None:
            c.client.wait_for_engines(n, timeout=wait_timeout)
        yield c
    finally:
        c.stop()
        mp.undo()


def ready_client(cluster: zpar.Cluster, n: int, timeout: float, *, clear: bool = True):
    """Body of a per-test ``rc`` fixture: the cluster's client once its ``n`` engines are
    registered, their namespaces cleared (``clear``) so each test starts afresh."""
    client = cluster.client
    client.wait_for_engines(n, timeout=timeout)
    if clear:
        client.clear(block=True)
    return client


def notebook_text(cell) -> str:
    """What a notebook cell printed and displayed, as one string."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def under_headers(text: str) -> dict[str, str]:
    """What was printed under each ``[stdout:N]`` / ``[stderr:N]`` header (a header alone
    on its line, as ipyparallel 9 prints it), joined per header: streamed output of
    several engines interleaves, each engine's lines stay in order."""
    out: dict[str, str] = {}
    header = None
    for line in text.splitlines(keepends=True):
        m = re.fullmatch(r"(\[(?:stdout|stderr):\S+\]) \n?", line)
        if m:
            header = m.group(1)
            out.setdefault(header, "")
        elif header is not None:
            out[header] += line
    return out


def run_notebook(path: Path, zpar_dir: Path, timeout: float) -> list:
    """Execute the notebook at ``path`` in a real python3 kernel started in ``zpar_dir``'s
    parent (the kernel inherits the test's ZPAR_DIR); return its executed cells. Skips when
    the notebook test extra is not installed."""
    nbformat = pytest.importorskip("nbformat", reason="nbformat is a test extra")
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(zpar_dir.parent)}},
    ).execute()
    return nb.cells
