"""What ipyparallel code sees when tasks cannot run: ``retries`` with ``timeout``
(TaskTimeout), dependencies on unknown or unreachable tasks (InvalidDependency,
ImpossibleDependency), an engine dying under a direct and a load-balanced view
(EngineError; the rest of the cluster carries on).

Written from ipyparallel 9.2's tests: test_lbview.py (test_retries, test_short_timeout,
test_invalid_dependency, test_impossible_dependency, test_z_crash) and test_view.py
(test_z_crash_mux), with their ``raises_remote``: ipyparallel raises these as RemoteErrors
whose ``ename`` names the error."""

from __future__ import annotations

import contextlib
import os
import time

import pytest

import zpar as ipp
from tests.clusters import FAST_HB, module_cluster
from zpar import error

pytestmark = pytest.mark.cluster


@contextlib.contextmanager
def raises_remote(etype):
    """ipyparallel's tests/clienttest.py raises_remote, as it is."""
    expected_ename = etype if isinstance(etype, str) else etype.__name__
    try:
        try:
            yield
        except error.AlreadyDisplayedError as e:
            e.original_error.raise_exception()
        except error.CompositeError as e:
            e.raise_exception()
    except error.RemoteError as e:
        tb = "\n".join(e.render_traceback())
        assert expected_ename == e.ename, (
            f"Should have raised {expected_ename}, but raised {e.ename}:\n{tb}"
        )
    else:
        pytest.fail("should have raised a RemoteError")


def crash():
    """Ungracefully exit the process"""
    os._exit(1)


def conditional_crash(condition):
    if condition:
        crash()


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory):
    yield from module_cluster(
        tmp_path_factory, "zpar-failures", 3, controller_args=FAST_HB, timeout=60, wait_timeout=60
    )


@pytest.fixture
def rc3(cluster3):
    return cluster3.client


def test_retries(rc3):
    view = rc3.load_balanced_view()

    def fail():
        raise ValueError("Failed!")

    for r in range(len(rc3) - 1):
        with view.temp_flags(retries=r), raises_remote(ValueError):
            view.apply_sync(fail)

    with view.temp_flags(retries=len(rc3), timeout=0.1), raises_remote(error.TaskTimeout):
        view.apply_sync(fail)


def test_short_timeout(rc3):
    """The timeout counts while a task waits for an engine, not while it runs (ipyparallel
    arms it whenever the task is queued): the retry finds the other engine at once."""
    view = rc3.load_balanced_view()

    def fail():
        import time

        time.sleep(0.25)
        raise ValueError("Failed!")

    with view.temp_flags(retries=1, timeout=0.01), raises_remote(ValueError):
        view.apply_sync(fail)
    # and once every engine has failed it, it waits for another until its timeout
    with view.temp_flags(retries=len(rc3), timeout=0.01), raises_remote(error.TaskTimeout):
        view.apply_sync(fail)


def test_invalid_dependency(rc3):
    view = rc3.load_balanced_view()
    with view.temp_flags(after="12345"), raises_remote(error.InvalidDependency):
        view.apply_sync(lambda: 1)


def test_impossible_dependency(rc3):
    view = rc3.load_balanced_view()
    ar1 = view.apply_async(lambda: 1)
    ar1.get()
    e1 = ar1.engine_id
    e2 = e1
    while e2 == e1:
        ar2 = view.apply_async(lambda: 1)
        ar2.get()
        e2 = ar2.engine_id

    with view.temp_flags(follow=[ar1, ar2]), raises_remote(error.ImpossibleDependency):
        view.apply_sync(lambda: 1)


def test_zpar_errors_stay_catchable_by_their_class(rc3):
    view = rc3.load_balanced_view()
    with view.temp_flags(after="12345"), pytest.raises(error.InvalidDependency):
        view.apply_sync(lambda: 1)
    with view.temp_flags(retries=len(rc3), timeout=0.1), pytest.raises(error.TaskTimeout) as e:
        view.apply_sync(lambda: 1 / 0)
    assert isinstance(e.value, error.RemoteError) and e.value.ename == "TaskTimeout"
    import pickle

    again = pickle.loads(pickle.dumps(e.value))
    assert isinstance(again, error.TaskTimeout) and again.ename == "TaskTimeout"


def test_z_crash_balanced(rc3, cluster3):
    """test graceful handling of engine death (balanced)"""
    cluster3.add_engines(1)
    rc3.wait_for_engines(4, timeout=60)
    view = rc3.load_balanced_view()
    ar = view.apply_async(crash)
    with raises_remote(error.EngineError):
        ar.get(10)
    with pytest.raises(error.EngineError):  # catchable by class too
        ar.get(10)
    eid = ar.engine_id
    tic = time.time()
    while eid in rc3.ids and time.time() - tic < 5:
        time.sleep(0.01)
    assert eid not in rc3.ids
    assert sorted(view.map_sync(lambda x: x * 2, range(8))) == list(range(0, 16, 2))


def test_z_crash_mux(rc3, cluster3):
    """test graceful handling of engine death (direct)"""
    n = len(rc3.ids) + 1
    cluster3.add_engines(1)
    rc3.wait_for_engines(n, timeout=60)
    eid = rc3.ids[-1]
    view = rc3[-2:]
    view.scatter("should_crash", [False, True], flatten=True)
    ar = view.apply_async(conditional_crash, ipp.Reference("should_crash"))
    with raises_remote(error.EngineError):
        ar.get(10)
    tic = time.perf_counter()
    while eid in rc3.ids and time.perf_counter() - tic < 5:
        time.sleep(0.05)
    assert eid not in rc3.ids
    assert rc3[:].apply_sync(lambda: "alive") == ["alive"] * len(rc3.ids)
