"""A real cluster for the ipyparallel-compatibility tests: code here is written the way
ipyparallel users write it (``import zpar as ipp``, functions defined in the tests)."""

from __future__ import annotations

import pytest

from tests.clusters import module_cluster, ready_client, shipped_by_value


@pytest.fixture(autouse=True, scope="module")
def _ship_test_module_by_value(request):
    yield from shipped_by_value(request.module)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from module_cluster(tmp_path_factory, "zpar-compat", 2, timeout=60, log_level="INFO")


@pytest.fixture
def rc(cluster):
    return ready_client(cluster, 2, timeout=30)
