"""A real cluster for the ipyparallel-compatibility tests: code here is written the way
ipyparallel users write it (``import zpar as ipp``, functions defined in the tests)."""

from __future__ import annotations

import pytest

from tests.clusters import module_cluster, ready_client, shipped_by_value
from zpar.testing import inprocess_cluster  # noqa: F401 - a fixture


@pytest.fixture(autouse=True, scope="module")
def _ship_test_module_by_value(request):
    yield from shipped_by_value(request.module)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from module_cluster(tmp_path_factory, "zpar-compat", 2, timeout=60, log_level="INFO")


def _rc(request):
    """The real cluster's client for a test marked ``cluster`` (it checks what engine
    processes do: deaths, signals, time limits), the in-process cluster's otherwise."""
    if request.node.get_closest_marker("cluster"):
        return ready_client(request.getfixturevalue("cluster"), 2, timeout=30)
    rc = request.getfixturevalue("inprocess_cluster").client
    rc.clear(block=True)
    return rc


_rc.real_fixture = "cluster"  # tests/conftest.py: marks, and orders, the real one
rc = pytest.fixture(name="rc")(_rc)
