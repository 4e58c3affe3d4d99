"""The PostgreSQL task store under hostile records and a killed controller (issue 26):
values PostgreSQL refuses (NUL in text, a msg_id past its VARCHAR(128)) are refused alone
and the rest of their batch written; the controller SIGKILLed with tasks in flight and
started again on the same store finds every record, none left pending."""

from __future__ import annotations

import os
import signal

import pytest
import zmq

import zpar
from tests.e2e.conftest import FAST_HB, wait_until
from zpar.cluster.connection import read_connection_file
from zpar.serialize import pack_apply
from zpar.wire import Session
from zpar.wire.messages import MsgType

pytestmark = pytest.mark.cluster


def _nul_output():
    import sys

    sys.stdout.write("before\x00after")
    return 1


def _work(x):
    import time

    time.sleep(0.02)
    return x * x


def test_postgres_store_refuses_bad_records_alone_and_survives_a_killed_controller(
    make_cluster, pg_database
):
    url, _stop = pg_database
    c = make_cluster(2, cluster_id="pg-hostile", controller_args=[*FAST_HB, "--db", url])
    rc = c.client
    rc.wait_for_engines(2, timeout=60)
    lv = rc.load_balanced_view()
    good = lv.map_async(abs, range(-20, 0))
    assert good.get(60) == list(range(20, 0, -1))  # positive control
    nul = lv.apply_async(_nul_output)
    assert nul.get(60) == 1
    # a signed request whose msg_id fits the wire (<= 256) but not PostgreSQL's column
    info = read_connection_file(c.url_file)
    session = Session(info.key)
    long_id = "L" * 200
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        q = zmq.Context.instance().socket(zmq.DEALER)
        q.setsockopt(zmq.LINGER, 0)
        q.connect(info.registration)
        session.send(q, MsgType.CONNECTION_REQUEST, {})
        assert q.poll(20_000)
        addrs = session.feed(q.recv_multipart()).content
        q.close()
        sock.connect(addrs["task"])
        header = session.make_header(MsgType.APPLY_REQUEST, msg_id=long_id, dest="task")
        session.send(
            sock, MsgType.APPLY_REQUEST, {}, header=header, buffers=pack_apply(abs, (-5,), {})
        )
        assert sock.poll(30_000)
        reply = session.feed(sock.recv_multipart())
        assert reply.content["status"] == "ok"
    finally:
        sock.close()
    after = lv.map_async(abs, range(-10, 0))
    assert after.get(60) == list(range(10, 0, -1))
    ids = [*good.msg_ids, *nul.msg_ids, *after.msg_ids]
    wait_until(
        lambda: len(rc.db_query({"msg_id": {"$in": ids}}, ["msg_id"])) == len(ids),
        "every sound record in PostgreSQL",
        60,
    )
    st = rc.store_status()
    assert st["ok"], st  # refusals of records are no store failure
    rec = rc.db_query({"msg_id": nul.msg_ids[0]}, ["stdout", "metadata", "status"])[0]
    assert rec["stdout"] is None and "unstorable" in rec["metadata"]  # a stub, saying why
    status = rc.controller_status()["refused"]
    assert status["store"].get("store-stub", 0) >= 1
    assert status["store"].get("store-dropped", 0) >= 1  # the long msg_id: no stub fits

    # SIGKILL the controller with tasks in flight, start it again on the same store
    ars = [lv.apply_async(_work, i) for i in range(200)]
    wait_until(lambda: rc.store_status()["saved"] >= len(ids) + 20, "records saved", 60)
    pid = c.launcher.controller.pid
    os.kill(pid, signal.SIGKILL)
    c.launcher.controller.wait(30)
    for ar in ars:
        try:
            ar.get(timeout=60)
        except zpar.ControllerLost:
            pass
    c.launcher.start_controller(timeout=60)
    new = c.connect_client()
    try:
        new.wait_for_engines(2, timeout=90)
        assert new.load_balanced_view().map_sync(_work, range(5)) == [0, 1, 4, 9, 16]
        records = new.db_query({"msg_id": {"$in": [a.msg_ids[0] for a in ars]}}, ["completed"])
        assert records and all(r["completed"] is not None for r in records)
        assert len(new.db_query({"msg_id": {"$in": ids}}, ["msg_id"])) == len(ids)
        assert new.store_status()["ok"]
    finally:
        new.close()
