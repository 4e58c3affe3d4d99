"""ipyparallel/client/client.py: Client's arguments, indexing, waits, queries, shutdown."""

from __future__ import annotations

import json
import logging
import os

import pytest

import zpar as ipp


def test_client_accepts_ipyparallels_arguments(cluster, caplog):
    import zmq

    url = str(cluster.url_file)
    ctx = zmq.Context()
    try:
        with caplog.at_level(logging.INFO, logger="zpar.client.clientcompat"):
            rc = ipp.Client(url, context=ctx, debug=False, timeout=30, profile="default")
        assert "context" in caplog.text  # says it is not used
        rc.close()
    finally:
        ctx.term()
    rc = ipp.Client(url_file=url, cluster=cluster)
    assert rc.cluster is cluster and rc.ids == [0, 1]
    rc.close(linger=0)


def test_ssh_arguments_are_accepted_with_a_clear_warning(cluster):
    with pytest.warns(UserWarning, match="does not tunnel over ssh"):
        rc = ipp.Client(str(cluster.url_file), sshserver="me@gateway", sshkey="~/.ssh/id")
    assert rc.ids == [0, 1]
    rc.close()


def test_connection_info_dict_and_profile_dir(cluster):
    info = json.loads(cluster.url_file.read_text())
    rc = ipp.Client(info)
    assert rc.ids == [0, 1]
    rc.close()
    security = cluster.url_file.parent.parent
    rc = ipp.Client(profile_dir=security.parent, cluster_id=cluster.cluster_id)
    assert rc.ids == [0, 1]
    rc.close()
    with pytest.raises(ValueError, match="url-files must be used"):
        ipp.Client("tcp://127.0.0.1:5555")
    with pytest.raises(ValueError, match="registration"):
        ipp.Client({"interface": "tcp://127.0.0.1", "mux": 1})
    with pytest.raises(TypeError, match="unexpected keyword"):
        ipp.Client(str(cluster.url_file), bogus=1)


def test_negative_indices_and_slices(rc):
    assert rc[-1].targets == rc.ids[-1] and rc[-2].targets == rc.ids[0]
    assert rc[-1].apply_sync(os.getpid) == rc[1].apply_sync(os.getpid)
    assert rc[::-1].targets == [1, 0]
    with pytest.raises(IndexError):
        rc[-3]
    assert rc.direct_view([-1]).apply_sync(lambda: 1) == [1]


def test_wait_for_engines_forms(rc):
    assert rc.wait_for_engines(2, timeout=30) is None
    assert rc.wait_for_engines() is None  # n=None: the Cluster's engines
    fut = rc.wait_for_engines(2, block=False)
    assert fut.result(timeout=30) is None
    with pytest.raises(TimeoutError):
        rc.wait_for_engines(3, timeout=0.1)


def test_spin_and_spin_thread_are_harmless(rc):
    rc.spin()
    rc.spin_thread(interval=0.5)
    rc.stop_spin_thread()


def test_wait_on_history_indices_and_msg_ids(rc):
    ar = rc[0].apply_async(lambda: 1)
    assert rc.wait(-1, timeout=30) and rc.wait(ar.msg_ids[0]) and rc.wait([ar], timeout=-1)
    assert rc.history[-1] == ar.msg_ids[0] and rc.history[-1:] == ar.msg_ids
    assert rc.wait()  # everything outstanding


def _held_unless_first(x, gate):
    """Element 0 returns at once; the others wait for ``gate`` (a file) to exist."""
    import os
    import time

    deadline = time.monotonic() + 60
    while x and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)
    return x


def test_outstanding_names_a_maps_elements_one_by_one(rc, tmp_path):
    """ipyparallel's ``Client.outstanding``: the msg_ids awaiting a reply, as ``ar.msg_ids``
    names them. A default load-balanced map is one task per element there, so each element's
    msg_id is outstanding until that element is done, and any of them can be given to
    ``wait`` (which waits for that element alone), ``get_result`` and a view's
    ``outstanding`` (seen on ipyparallel 9.2.0: after ``lv.map_async(f, range(4))``,
    ``rc.outstanding == set(ar.msg_ids)``; waiting for the first element leaves the others)."""
    gate = tmp_path / "gate"
    lv = rc.load_balanced_view()
    ar = lv.map_async(_held_unless_first, range(4), [str(gate)] * 4)
    try:
        assert rc.outstanding <= set(ar.msg_ids) and len(ar.msg_ids) == 4
        first, rest = ar.msg_ids[0], ar.msg_ids[1:]
        assert rc.wait(first, timeout=30)  # the first alone: the others wait for the gate
        assert rc.outstanding == set(rest) and lv.outstanding == set(rest)
        assert rc.get_result(first).get(timeout=30) == [0]
        assert not rc.wait(rest[0], timeout=0.05)
    finally:
        gate.touch()
    assert rc.wait(list(rest), timeout=30)
    assert ar.get(timeout=30) == [0, 1, 2, 3] and not rc.outstanding and not lv.outstanding


def test_get_result_by_index_msg_id_and_async_result(rc):
    ar = rc[:].apply_async(lambda: 2)
    again = rc.get_result(ar, block=True)
    assert isinstance(again, ipp.AsyncResult) and again.ready() and again.get() == [2, 2]
    by_id = rc.get_result(ar.msg_ids[0], owner=False)
    assert by_id.get(timeout=30) == 2
    last = rc.get_result()  # the last request sent
    assert last.msg_ids == [ar.msg_ids[-1]]


def test_queue_status_keys(rc):
    status = rc.queue_status()
    assert set(status) == {0, 1, "unassigned"}
    assert set(status[0]) >= {"queue", "completed", "tasks"}
    assert set(rc.queue_status(targets=1)) >= {"queue", "completed", "tasks"}
    assert set(rc.queue_status(targets=[0])) == {0, "unassigned"}


def test_purge_local_and_hub_results(rc):
    ar = rc[0].apply_async(lambda: 3)
    ar.get(timeout=30)
    rc.purge_local_results(ar)
    with pytest.raises(ValueError, match="at least one"):
        rc.purge_local_results()
    assert ar.get() == 3  # the handle keeps its result


def test_results_and_metadata_hold_what_no_asyncresult_owns(rc):
    """ipyparallel's owner bookkeeping (test_owner_pop, test_get_result): a view's
    AsyncResult owns its result, which is not in rc.results; get_result(owner=False) leaves
    it there until an owning get_result takes it or it is purged."""
    ar = rc[0].apply_async(lambda: 4)
    ar.get(timeout=30)
    m = ar.msg_ids[0]
    assert m not in rc.results and m not in rc.metadata
    fetched = rc.get_result(m, owner=False, block=True)
    assert rc.results[m] == 4 and rc.metadata[m]["engine_id"] == 0 and not fetched.owner
    owned = rc.get_result(m)
    assert type(owned) is ipp.AsyncResult and owned.get() == 4 and owned.owner
    assert m not in rc.results and m not in rc.metadata
    rc.results["asdf"] = 5
    assert rc.metadata["asdf"] == {}  # read as an empty Metadata, as ipyparallel's defaultdict
    rc.purge_local_results("asdf")
    assert "asdf" not in rc.results and "asdf" not in rc.metadata


def test_wait_takes_plain_futures(rc):
    import concurrent.futures
    import threading

    f = concurrent.futures.Future()
    threading.Timer(0.1, f.set_result, ("future",)).start()
    assert rc.wait([f], timeout=30) and f.result() == "future"


def test_activate_outside_ipython_warns(rc):
    with pytest.warns(UserWarning, match="only work within IPython"):
        view = rc.activate(targets=[0], suffix="0")
    assert view.block is True and view.targets == [0]


@pytest.mark.cluster
def test_shutdown_targets_then_ids(make_cluster_compat):
    c = make_cluster_compat(3)
    rc = c.client
    pids = rc[:].apply_sync(os.getpid)
    rc.shutdown(targets=[-1], block=True)
    assert rc.ids == [0, 1]  # gone as soon as shutdown returns
    assert rc[:].apply_sync(os.getpid) == pids[:2]
    rc.shutdown(hub=True)  # hub=True: every engine, then the controller


@pytest.fixture
def make_cluster_compat(tmp_path, monkeypatch):
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path))
    started = []

    def make(n):
        c = ipp.Cluster(n=n, timeout=60)
        c.start()
        started.append(c)
        return c

    yield make
    for c in started:
        c.stop()


def test_url_or_file_is_the_deprecated_name_of_the_connection_file(cluster):
    with pytest.warns(DeprecationWarning, match="url_or_file"):
        rc = ipp.Client(url_or_file=str(cluster.url_file))
    assert rc.ids == [0, 1]
    rc.close()


# -- issue 24: negative engine indices are resolved when the view is made (ipyparallel) --


def test_negative_targets_are_resolved_to_engine_ids(rc):
    last = rc.ids[-1]
    assert rc.direct_view(-1).targets == last
    assert rc[-1].targets == last
    assert rc.load_balanced_view(-1).targets == [last]
    assert rc.broadcast_view(-1).targets == [last]
    with pytest.warns(UserWarning, match="IPython"):
        assert rc.activate(-1).targets == last
    assert rc.direct_view([0, -1]).targets == [rc.ids[0], last]
    assert rc.direct_view("all").targets == "all"
    assert rc._build_targets(-1) == ([rc.sender.engine_uuid(last).encode()], [last])
    with pytest.raises(TypeError):
        rc[None]
    with pytest.raises(IndexError):
        rc.direct_view(-99)


def test_indexing_goes_through_direct_view(rc, monkeypatch):
    """rc[key] is rc.direct_view(key), as ipyparallel (code replacing direct_view sees it)."""
    seen = []
    real = rc.direct_view
    monkeypatch.setattr(rc, "direct_view", lambda t: seen.append(t) or real(t))
    rc[:]
    list(rc)
    assert seen[0] == slice(None) and seen[1:] == rc.ids
