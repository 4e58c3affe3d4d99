"""ipyparallel.datapub: ``publish_data`` on engines, ``ar.data`` on the client. Written from
ipyparallel 9.2's tests: test_view.py (test_data_pub_single, test_data_pub) and
test_asyncresult.py (test_await_data), with zpar's import path."""

from __future__ import annotations

import time

import pytest

import zpar as ipp

pytestmark = pytest.mark.cluster

PUBLISH_5 = "\n".join(
    [
        "from zpar.datapub import publish_data",
        "for i in range(5):",
        "  publish_data(dict(i=i))",
    ]
)


def test_data_pub_single(rc):
    view = rc[-1]
    ar = view.execute(PUBLISH_5, block=False)
    assert isinstance(ar.data, dict)
    ar.get(5)
    assert ar.wait_for_output(5)
    assert ar.data == dict(i=4)


def test_data_pub(rc):
    view = rc[:]
    ar = view.execute(PUBLISH_5, block=False)
    assert all(isinstance(d, dict) for d in ar.data)
    ar.get(5)
    assert ar.wait_for_output(5)
    assert ar.data == [dict(i=4)] * len(ar)


def test_await_data(rc):
    """asking for ar.data shows what was published so far, while the task runs"""
    v = rc[-1]
    ar = v.execute(
        "\n".join(
            [
                "import time",
                "from zpar.datapub import publish_data",
                "for i in range(5):",
                "    publish_data(dict(i=i))",
                "    time.sleep(0.1)",
            ]
        ),
        block=False,
    )
    found = set()
    tic = time.time()
    while time.time() <= tic + 10:
        if ar.data:
            i = ar.data["i"]
            found.add(i)
            if i == 4:
                break
        time.sleep(0.05)
    ar.get(5)
    assert 4 in found
    assert len(found) > 1, f"should have seen data multiple times, but got: {found}"


def test_a_load_balanced_task_publishes_and_another_client_reads_it(rc, cluster):
    def progress():
        from zpar.engine.datapub import publish_data  # ipyparallel.engine.datapub's path

        publish_data({"step": 1})
        publish_data({"step": 2, "total": 2})
        return "done"

    ar = rc.load_balanced_view().apply_async(progress)
    assert ar.get(10) == "done"
    assert ar.data == {"step": 2, "total": 2}
    other = ipp.Client(str(cluster.url_file))
    try:
        fetched = other.get_result(ar.msg_ids[0])
        assert fetched.get(10) == "done"
        assert fetched.data == {"step": 2, "total": 2}
    finally:
        other.close()
