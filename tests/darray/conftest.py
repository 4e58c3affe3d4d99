"""A real cluster of 4 engines on 127.0.0.1 shared by a module's distributed-array tests."""

from __future__ import annotations

import cloudpickle
import pytest

import zpar

FAST_HB = ["--hb-period", "0.1", "--hb-misses", "4"]


@pytest.fixture(autouse=True, scope="module")
def _ship_test_module_by_value(request):
    """Engines cannot import test modules: send their functions and classes by value."""
    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)


@pytest.fixture(scope="module")
def cluster4(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ZPAR_DIR", str(tmp_path_factory.mktemp("zpar-darray")))
    c = zpar.Cluster(n=4, controller_args=FAST_HB, timeout=90, log_level="INFO")
    c.start()
    yield c
    c.stop()
    mp.undo()


@pytest.fixture
def rc(cluster4):
    client = cluster4.client
    client.wait_for_engines(4, timeout=60)
    return client
