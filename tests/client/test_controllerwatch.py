"""client.controllerwatch.ControllerWatch: a lost query connection is a lost controller,
a refused signature a wrong key naming the connection file; over sockets on loopback."""

from __future__ import annotations

import zmq

from zpar.client.controllerwatch import ControllerWatch
from zpar.errors import ControllerLost, WrongKey


def test_a_closed_connection_is_a_lost_controller_named_with_its_file():
    ctx = zmq.Context.instance()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer = ctx.socket(zmq.DEALER)
    watch = ControllerWatch(dealer, "/p/zpar-client.json", "at tcp://x (pid 7)")
    try:
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealer.send(b"hello")
        assert router.poll(10_000)  # connected
        router.close(linger=0)
        error = None
        while error is None:
            assert watch.socket.poll(10_000), "no monitor event"
            error = watch.on_event()
        assert isinstance(error, ControllerLost)
        assert "pid 7" in str(error) and "/p/zpar-client.json" in str(error)
    finally:
        watch.end()
        assert watch.socket is None
        dealer.close(linger=0)


def test_a_refused_signature_names_the_connection_file():
    ctx = zmq.Context.instance()
    sockets = [ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)]
    watches = [ControllerWatch(sockets[0], "/p/zpar-client.json"), ControllerWatch(sockets[1])]
    try:
        error = watches[0].signature_refused()
        assert isinstance(error, WrongKey) and "/p/zpar-client.json" in str(error)
        assert "the connection file" in str(watches[1].signature_refused())
    finally:
        for watch, sock in zip(watches, sockets, strict=True):
            watch.end()
            sock.close(linger=0)
