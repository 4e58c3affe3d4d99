"""A communicator on a --curve cluster (issue 13 item 2): its members reach the hub's
rendezvous over the cluster's Curve sockets, then run collectives between engines over
Curve links (tests/comm/test_links_curve.py captures what those links carry)."""

from __future__ import annotations

import sys

import pytest

import zpar
from tests.clusters import FAST_HB, shipped_by_value

pytestmark = pytest.mark.cluster

TIMEOUT = 90.0


@pytest.fixture(autouse=True, scope="module")
def _ship_by_value():
    yield from shipped_by_value(sys.modules[__name__])


def _allreduce_rank():
    import zmq

    from zpar.namespace import current

    c = current()["comm"]
    curve = c._links.router.getsockopt(zmq.MECHANISM) == zmq.CURVE  # the links too
    return c.allreduce(c.rank + 1), c.bcast("from 0" if c.rank == 0 else None), curve


@pytest.mark.parametrize("hosts", [None, "engine"])  # one host (ipc links), one per engine (tcp)
def test_a_communicator_forms_and_runs_on_a_curve_cluster(monkeypatch, tmp_path, hosts):
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    monkeypatch.setenv("ZPAR_TRANSPORT", "tcp")
    with zpar.Cluster(n=2, curve=True, controller_args=FAST_HB, timeout=TIMEOUT) as rc:
        rc.wait_for_engines(2, timeout=TIMEOUT)
        dv = rc[:]
        info = dv.communicator(hosts=hosts, timeout=TIMEOUT)
        assert info.size == 2
        assert dv.apply_sync(_allreduce_rank) == [(3, "from 0", True), (3, "from 0", True)]
