"""A real cluster for the ipyparallel-compatibility tests: code here is written the way
ipyparallel users write it (``import zpar as ipp``, functions defined in the tests)."""

from __future__ import annotations

import time

import cloudpickle
import pytest

import zpar as ipp


def wait_until(condition, what, timeout=30.0):
    """Poll ``condition`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.01)


@pytest.fixture(autouse=True, scope="module")
def _ship_test_module_by_value(request):
    """Engines cannot import test modules: their functions travel by value, as a notebook's."""
    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ZPAR_DIR", str(tmp_path_factory.mktemp("zpar-compat")))
    c = ipp.Cluster(n=2, timeout=60, log_level="INFO")
    c.start()
    yield c
    c.stop()
    mp.undo()


@pytest.fixture
def rc(cluster):
    client = cluster.client
    client.wait_for_engines(2, timeout=30)
    client.clear(block=True)
    return client
