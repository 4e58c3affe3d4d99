"""Results are stored up to STORE_RESULT_LIMIT on both paths, whatever their size below it,
and another client reads them back through the hub (issue 13: load-balanced results between
64 KiB and 1 MiB were never stored: the hub's handler of the large-result message called
decode() on a zmq.Frame)."""

from __future__ import annotations

import pytest

import zpar
from zpar.constants import STORE_INLINE_LIMIT, STORE_RESULT_LIMIT

KIB = 1024
#: bytes results; a pickle frame of a few dozen bytes travels with each
STORED = [
    0,
    1,
    KIB,
    STORE_INLINE_LIMIT - 200,
    STORE_INLINE_LIMIT,
    STORE_INLINE_LIMIT + 1,
    200 * KIB,
    512 * KIB,
    STORE_RESULT_LIMIT - 4 * KIB,
]
NOT_STORED = [STORE_RESULT_LIMIT + 1, 2 * STORE_RESULT_LIMIT]


def _blob(n):
    return bytes(i % 251 for i in range(n))


@pytest.mark.parametrize("path", ["direct", "load-balanced"])
def test_results_of_every_size_are_read_back_by_another_client(cluster, rc, path):
    view = rc[0] if path == "direct" else rc.load_balanced_view()
    sent = {}
    for n in STORED + NOT_STORED:
        ar = view.apply_async(_blob, n)
        assert len(ar.get(timeout=60)) == n
        sent[ar.msg_ids[0]] = n
    other = cluster.connect_client()
    try:
        for msg_id, n in sent.items():
            ar = other.get_result(msg_id)
            if n in STORED:
                assert ar.get(timeout=60) == _blob(n), f"{path} result of {n} B not stored"
            else:
                with pytest.raises(zpar.RemoteError, match="ResultNotStored"):
                    ar.get(timeout=60)
        sizes = {
            r["msg_id"]: r["result_size"]
            for r in other.db_query({"msg_id": {"$in": list(sent)}}, keys=["result_size"])
        }
        for msg_id, n in sent.items():
            if n in STORED and n:
                assert n <= sizes[msg_id] <= STORE_RESULT_LIMIT
            elif n not in STORED:
                assert sizes[msg_id] is None
    finally:
        other.close()
