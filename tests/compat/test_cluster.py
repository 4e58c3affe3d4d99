"""ipyparallel's Cluster idioms on zpar.Cluster, the joblib backend and the magics."""

from __future__ import annotations

import asyncio
import os

import pytest

import zpar as ipp
from tests.clusters import under_headers, wait_until
from tests.shells import fresh_shell

pytestmark = pytest.mark.cluster


@pytest.fixture
def zpar_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path))
    return tmp_path


def test_start_and_connect_sync_and_connect_client_sync(zpar_dir):
    cluster = ipp.Cluster(n=2)
    rc = cluster.start_and_connect_sync()
    try:
        assert rc.ids == [0, 1]
        other = cluster.connect_client_sync()
        assert other.ids == [0, 1] and other.cluster is cluster
        other.close()
    finally:
        cluster.stop_cluster_sync()


def test_start_cluster_sync_returns_the_cluster(zpar_dir):
    cluster = ipp.Cluster(n=1)
    assert cluster.start_cluster_sync() is cluster
    try:
        rc = cluster.connect_client_sync()
        assert rc[-1].apply_sync(lambda: 1) == 1
        rc.close()
    finally:
        cluster.stop_cluster_sync()


def test_async_context_manager(zpar_dir):
    async def main():
        async with ipp.Cluster(n=1) as rc:
            return await rc[0].apply_async(lambda: 5)

    assert asyncio.run(main()) == 5


def test_register_joblib_backend_without_a_view_uses_the_running_cluster(zpar_dir):
    joblib = pytest.importorskip("joblib")
    ipp.register_joblib_backend()  # as ipyparallel: the backend is named 'ipyparallel'
    with ipp.Cluster(n=2, cluster_id="joblibtest") as rc:
        pids = set(rc[:].apply_sync(os.getpid))
        for name in ("ipyparallel", "zpar"):
            with joblib.parallel_backend(name):
                out = joblib.Parallel()(joblib.delayed(os.getpid)() for _ in range(8))
            assert set(out) <= pids


def test_magics_for_a_plain_client_in_ipython(zpar_dir, capsys):
    pytest.importorskip("IPython")
    with fresh_shell() as shell, ipp.Cluster(n=2) as rc:
        plain = ipp.Client(url_file=rc.url_file)  # a Client() made in IPython
        try:
            # (no progress bar among the lines, however long the first execute takes)
            shell.run_cell_magic("px", "--progress-after -1", "print('plain', 1 + 1)")
            out = capsys.readouterr().out
            assert under_headers(out) == {"[stdout:0]": "plain 2\n", "[stdout:1]": "plain 2\n"}
            view = rc.activate(targets=[1], suffix="one")
            assert view.targets == [1]
            shell.run_line_magic("pxconfigone", "--progress-after -1")
            shell.run_line_magic("pxone", "print('only')")
            out = capsys.readouterr().out
            assert under_headers(out) == {"[stdout:1]": "only\n"}
        finally:
            plain.close()


def test_px_stream_shows_an_engines_first_lines_on_a_fresh_client(zpar_dir, capsys):
    pytest.importorskip("IPython")
    from zpar.client.magics import register_magics

    with fresh_shell() as shell, ipp.Cluster(n=2) as rc:
        fresh = ipp.Client(url_file=rc.url_file)
        try:
            register_magics(shell, fresh.direct_view(fresh.ids, block=True), suffix="fresh")
            code = "for i in range(3):\n    print('line', i, flush=True)"
            # no progress bar among the lines, however long the engines' first
            # execute takes (it loads IPython there)
            shell.run_cell_magic("pxfresh", "--stream --progress-after -1", code)
            out = capsys.readouterr().out
            lines = "".join(f"line {i}\n" for i in range(3))
            assert under_headers(out) == {"[stdout:0]": lines, "[stdout:1]": lines}, out
        finally:
            fresh.close()


def test_step_by_step_life_cycle_as_ipyparallels_cluster(zpar_dir):
    """ipyparallel's Cluster.start_controller / start_engines / stop_engines /
    stop_engine / restart_engine / stop_controller, sync and as coroutines."""
    cluster = ipp.Cluster(n=1)
    try:
        cluster.start_controller_sync()
        first = cluster.start_engines_sync(2)
        rc = cluster.connect_client_sync()
        rc.wait_for_engines(2, timeout=60)
        second = asyncio.run(cluster.start_engines(1))
        assert first != second and set(cluster.engines) == {first, second}
        rc.wait_for_engines(3, timeout=60)
        cluster.stop_engines_sync(second)
        # the client hears of an engine's end from the hub, some time after it stopped
        wait_until(lambda: len(rc.ids) == 2, "the stopped engine set gone from rc.ids")
        assert list(cluster.engines) == [first]
        rc[:].push({"kept": 1}, block=True)
        cluster.restart_engine_sync(rc.ids[0])
        rc.wait_for_engines(2, timeout=60)
        has = ipp.interactive(lambda: "kept" in globals())
        assert rc[:].apply_sync(has) == [False, True]  # a fresh namespace, the same id
        cluster.stop_engine_sync(rc.ids[-1])
        wait_until(lambda: len(rc.ids) == 1, "the stopped engine gone from rc.ids")
        with pytest.raises(KeyError, match="no engine set"):
            cluster.stop_engines_sync("nope")
        rc.close()
        asyncio.run(cluster.stop_engines())
        assert cluster.engines == {}
        cluster.stop_controller_sync()
    finally:
        cluster.stop_cluster_sync()


def test_controller_launcher_class_as_ipyparallels(zpar_dir):
    """ipyparallel's test_label builds Cluster(controller=<LocalControllerLauncher subclass
    with controller_args>, log_level=10): the store flags map to zpar's."""
    from zpar.cluster.launcher import LocalControllerLauncher, controller_args_of

    class DictDB(LocalControllerLauncher):
        controller_args = ["--dictdb"]

    class Mongo(LocalControllerLauncher):
        controller_args = ["--mongodb"]

    assert controller_args_of(DictDB) == ["--db", "memory"]
    with pytest.raises(ValueError, match="MongoDB"):
        controller_args_of(Mongo)
    cluster = ipp.Cluster(n=1, log_level=10, controller=DictDB)
    try:
        cluster.start_cluster_sync()
        rc = cluster.connect_client_sync()
        rc.wait_for_engines(1, timeout=60)
        assert rc[:].apply_sync(lambda: 3) == [3]
        assert "memory" in rc.store_status()["url"]
        rc.close()
    finally:
        cluster.stop_cluster_sync()
