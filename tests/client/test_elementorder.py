"""client/elementorder.py: the order a map of elements is read in, without sockets."""

from __future__ import annotations

import threading

from tests.client.test_mapparts import _VALUE_ERROR, part
from zpar.client.elementorder import as_answered, first_error, in_order
from zpar.client.mapparts import MapWaiters, Parts
from zpar.errors import RemoteError


def positions(pairs, parts):
    return [(parts.index(p), j) for p, j in pairs]


def test_in_order_reads_every_position_in_submission_order():
    a, b = Parts(2), Parts(2)
    b.add(part(0, [20, 21]))  # the second request answered first
    a.add(part(0, [10, 11]))
    assert positions(in_order([a, b]), [a, b]) == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_as_answered_reads_parts_in_arrival_order():
    waiters = MapWaiters()
    a, b = Parts(2, waiters), Parts(2, waiters)
    b.add(part(0, [20, 21]))
    got = []
    reader = as_answered([a, b], waiters, 4)
    got.append(next(reader))
    got.append(next(reader))
    assert positions(got, [a, b]) == [(1, 0), (1, 1)]
    t = threading.Timer(0.01, lambda: (a.add(part(0, [10, 11])), waiters.notify(force=True)))
    t.start()
    got.extend(reader)  # waits on the map's condition for the first request
    t.join()
    assert positions(got, [a, b]) == [(1, 0), (1, 1), (0, 0), (0, 1)]


def test_first_error_returns_the_first_failed_element_or_none():
    waiters = MapWaiters()
    ok, bad = Parts(2, waiters), Parts(2, waiters)
    ok.add(part(0, [1, 2]))
    assert first_error([ok], waiters, None, lambda: True, lambda: 2) is None
    bad.add(part(0, [1, None], errors={"1": _VALUE_ERROR}))
    err = first_error([ok, bad], waiters, None, lambda: False, lambda: 4)
    assert isinstance(err, RemoteError) and err.ename == "ValueError"
    pending = Parts(2, waiters)
    assert first_error([pending], waiters, 0.01, lambda: False, lambda: 0) is None  # timed out
