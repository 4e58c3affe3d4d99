"""The IOPub relay of a keyed cluster: engines' output reaches only subscribers of the
cluster's topic (zpar.wire.privacy.iopub_topic), which only key holders can compute.

::

    engine XPUB ──► XSUB ══ gate ══ XPUB (manual) ◄── client SUB (topic)

The client-side XPUB is in manual mode: each subscription comes to this loop, which applies
it only if it is exactly the topic (a subscription to everything, or to a guess, is refused,
counted and never applied), and tells the engines' side when the first subscriber arrives
and when the last one leaves, so an engine nobody watches publishes nothing.
"""

from __future__ import annotations

import logging
from collections import Counter

import zmq

log = logging.getLogger(__name__)

#: Messages moved from one side before the other is looked at (a flood cannot starve it).
GATE_BATCH = 256


class IOPubGate:
    def __init__(self, xsub: zmq.Socket, xpub: zmq.Socket, topic: bytes) -> None:
        """``xpub`` must have XPUB_MANUAL set before it binds."""
        self.xsub = xsub
        self.xpub = xpub
        self.topic = topic
        self.subscribers = 0
        #: subscriptions refused (not the cluster's topic), by kind
        self.refused: Counter[str] = Counter()

    def on_subscription(self, event: bytes) -> None:
        """One subscribe (b"\\x01" + topic) or unsubscribe (b"\\x00" + topic) message."""
        kind, topic = event[:1], event[1:]
        if kind == b"\x01":
            if topic != self.topic:
                self.refused["subscription"] += 1
                log.warning(
                    "IOPub: refused a subscription to %r, not the cluster's topic (a peer "
                    "without the key; %d refused)",
                    topic[:40],
                    self.refused["subscription"],
                )
                return
            self.xpub.setsockopt(zmq.SUBSCRIBE, topic)
            self.subscribers += 1
            if self.subscribers == 1:
                self.xsub.send(event)
        elif kind == b"\x00" and topic == self.topic and self.subscribers:
            try:
                self.xpub.setsockopt(zmq.UNSUBSCRIBE, topic)
            except zmq.ZMQError:
                pass  # a subscriber gone: libzmq has already dropped its subscription
            self.subscribers -= 1
            if self.subscribers == 0:
                self.xsub.send(event)

    def run(self) -> None:
        """Until the context is terminated."""
        poller = zmq.Poller()
        poller.register(self.xsub, zmq.POLLIN)
        poller.register(self.xpub, zmq.POLLIN)
        while True:
            ready = dict(poller.poll())
            if self.xsub in ready:
                for _ in range(GATE_BATCH):
                    try:
                        frames = self.xsub.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    self.xpub.send_multipart(frames, copy=False)
            if self.xpub in ready:
                for _ in range(GATE_BATCH):
                    try:
                        event = self.xpub.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self.on_subscription(event)
