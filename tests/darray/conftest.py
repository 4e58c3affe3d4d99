"""A real cluster of 4 engines on 127.0.0.1 shared by a module's distributed-array tests."""

from __future__ import annotations

import pytest

from tests.clusters import FAST_HB, module_cluster, ready_client, shipped_by_value


@pytest.fixture(autouse=True, scope="module")
def _ship_test_module_by_value(request):
    yield from shipped_by_value(request.module)


@pytest.fixture(scope="module")
def cluster4(tmp_path_factory):
    yield from module_cluster(
        tmp_path_factory, "zpar-darray", 4, controller_args=FAST_HB, timeout=90, log_level="INFO"
    )


@pytest.fixture
def rc(cluster4):
    return ready_client(cluster4, 4, timeout=60, clear=False)


@pytest.fixture
def ns():
    """A fresh engine namespace, current for darray's engine side, and an empty buffer pool
    (the unit tests of darray/engine.py run it in this process)."""
    from zpar import namespace
    from zpar.darray import bufferpool

    bufferpool.clear()
    space = namespace.new_namespace()
    namespace.set_current(space)
    yield space
    namespace.set_current(None)
    bufferpool.clear()
