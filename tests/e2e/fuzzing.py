"""What the fuzz suite sends (tests/e2e/test_fuzz.py): every listening socket of a cluster,
how to reach it, and frames to throw at it, from hypothesis and from a bounded seeded
generator that mutates valid messages (cut, spliced, re-signed with the wrong key, replayed,
fields of the wrong type, batches cut or mis-indexed)."""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass

import msgpack
import zmq
from hypothesis import strategies as st

from zpar.constants import BATCH_DELIM, DELIM, PING, PROTOCOL_VERSION, SIGNAL_SUFFIX
from zpar.wire import Session, _signed_parts, batch
from zpar.wire.messages import CONTENT, MsgType
from zpar.wire.privacy import iopub_topic
from zpar.wire.transport import direct_address

#: Requests a key holder may send that stop or kill a part of the cluster on purpose: with
#: the right key they are the user's orders, not attacks, so the fuzzer never signs them.
STOPPING = {
    MsgType.SHUTDOWN_REQUEST,
    MsgType.SHUTDOWN_HUB_REQUEST,
    MsgType.SIGNAL_REQUEST,
    MsgType.ENGINE_EXITED_REQUEST,
}
SIGNABLE = sorted(t.value for t in MsgType if t not in STOPPING)


@dataclass(frozen=True)
class Target:
    """One listening socket: where it is and what kind of socket talks to it."""

    name: str
    address: str
    kind: int  # the socket type a peer connects with
    #: the routing identity a peer of this socket must have (an engine's, on engine sides)
    identity: bytes = b""
    #: frames the peer puts before a message (a relay's destination, an IOPub topic)
    prefix: tuple[bytes, ...] = ()


def targets(info, client: dict, engine: dict, engine_uuids: list[str], rundir: str):
    """Every socket a peer can reach, by name. ``client`` / ``engine``: the connection and
    registration replies' addresses (tcp); ``rundir``: the controller's run directory."""
    uuid0 = engine_uuids[0].encode()
    topic = iopub_topic(info.key)
    out = [
        Target("registration", info.registration, zmq.DEALER),
        Target("notification", client["notification"], zmq.XSUB),
        Target("mux client", client["mux"], zmq.DEALER, prefix=(uuid0,)),
        Target("control client", client["control"], zmq.DEALER, prefix=(uuid0,)),
        Target("task client", client["task"], zmq.DEALER),
        Target("iopub client", client["iopub"], zmq.XSUB),
        Target("mux engine", engine["mux"], zmq.DEALER, identity=os.urandom(8)),
        Target("control engine", engine["control"], zmq.DEALER, identity=os.urandom(8)),
        Target("task engine", engine["task"], zmq.DEALER, identity=os.urandom(8)),
        Target("iopub engine", engine["iopub"], zmq.PUB, prefix=(topic,)),
        Target("heartbeat ping", engine["heartbeat"][0], zmq.XSUB),
        Target("heartbeat pong", engine["heartbeat"][1], zmq.DEALER),
        # a report as if from an engine's signal thread (hub/status.py)
        Target("signal", info.registration, zmq.DEALER, identity=os.urandom(8) + SIGNAL_SUFFIX),
    ]
    out += [
        Target(f"direct {i}", direct_address(rundir, u), zmq.DEALER)
        for i, u in enumerate(engine_uuids)
    ]
    return {t.name: t for t in out}


def connect(ctx: zmq.Context, target: Target) -> zmq.Socket:
    s = ctx.socket(target.kind)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.SNDHWM, 100_000)
    if target.identity:
        s.setsockopt(zmq.IDENTITY, target.identity)
    s.connect(target.address)
    return s


# -- hypothesis ------------------------------------------------------------------------------

raw_frames = st.lists(st.binary(max_size=300), min_size=1, max_size=10)

msgpack_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True)
    | st.text(max_size=40)
    | st.binary(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=20,
)


#: values of the right shape for the fields most handlers read first (a few comm_ids, so
#: several messages meet in one rendezvous)
plausible = (
    st.integers(-2, 70)
    | st.sampled_from(["c1", "c2", "", "all", "task"])
    | st.floats(-1, 5)
    | st.binary(max_size=40)
    | st.lists(st.integers(-2, 5), max_size=4)
)


@st.composite
def contents(draw, msg_type: str):
    """A content map with the fields ``msg_type`` has (zpar.wire.messages), each of a plausible
    or an arbitrary value, some left out, and a few fields no message has."""
    cls = CONTENT.get(msg_type) if msg_type in MsgType.__members__.values() else None
    names = [f.name for f in dataclasses.fields(cls)] if cls is not None else []
    out = {}
    for name in names:
        choice = draw(st.integers(0, 5))
        if choice == 0:
            continue
        out[name] = draw(msgpack_value if choice == 1 else plausible)
    out.update(draw(st.dictionaries(st.text(max_size=16), msgpack_value, max_size=3)))
    return out


@st.composite
def signed_messages(draw, key: bytes, dest: str | None = None):
    """A message signed with the cluster's key (or, one time in four, another key) whose
    type, header fields, content and buffers are drawn at random: it gets past the
    signature and into each process's checks and handlers."""
    wrong_key = draw(st.integers(0, 3)) == 0
    session = Session(b"not the cluster key" if wrong_key else key)
    msg_type = draw(st.sampled_from(SIGNABLE) | st.text(max_size=30))
    content = draw(contents(msg_type))
    buffers = draw(st.lists(st.binary(max_size=200), max_size=3))
    header = session.make_header(msg_type)
    if dest is not None:
        header["dest"] = dest
    for k, v in draw(
        st.dictionaries(st.sampled_from(sorted(header)), msgpack_value, max_size=2)
    ).items():
        header[k] = v
    metadata = draw(st.dictionaries(st.text(max_size=12), msgpack_value, max_size=3))
    if draw(st.integers(0, 4)) == 0:  # past zpar.wire.bounds: refused by reason, signed
        chain: list = []
        for _ in range(draw(st.integers(60, 1000))):
            chain = [chain]
        (content if draw(st.booleans()) else metadata)["deep"] = chain
    try:
        _, frames = session.serialize(
            msg_type if isinstance(msg_type, str) else "x",
            content,
            header=header,
            metadata=metadata,
            buffers=buffers,
        )
    except Exception:  # a draw our own sender refuses to send: signed by hand if it packs
        try:
            env = msgpack.packb([header, {}, metadata, content, [b""] * len(buffers)])
            frames = [DELIM, session.sign([env, *buffers]), env, *buffers]
        except Exception:
            env = msgpack.packb([header, {}, {}, {}, []], default=repr)
            frames = [DELIM, os.urandom(32), env]
    return [bytes(f) if not isinstance(f, bytes) else f for f in frames]


# -- the bounded random-frame generator ------------------------------------------------------


def _framed(messages: list[list[bytes]]) -> list[bytes]:
    """A batch of ``messages`` (each from its delimiter on) in the framed layout, index and
    all, whatever their size (zpar.wire.batch packs small ones into one frame)."""
    counts = [len(m) - 3 for m in messages]
    return [BATCH_DELIM, msgpack.packb(counts), *[f for m in messages for f in m[1:]]]


def _batch_mutation(frames: list[bytes], kind: int, rng: random.Random) -> list[bytes]:
    """A batch (zpar.wire.batch) of two copies of a message cut short (11), or whose index
    lies about its messages' frame counts (12)."""
    if kind == 11:
        packed = [bytes(f) for f in batch([frames, frames])]
        if len(packed) == 2 and rng.randrange(2):  # its packed frame cut
            return [packed[0], packed[1][: rng.randrange(len(packed[1]))]]
        framed = _framed([frames, frames])
        return framed[: rng.randrange(2, len(framed))]
    framed = _framed([frames, frames])
    framed[1] = msgpack.packb(rng.choice([[1], [99, 1], [], [0, 0], "x", [len(frames)] * 10_000]))
    return framed


def mutations(valid: list[bytes], key: bytes, rng: random.Random, n: int) -> list[list[bytes]]:
    """``n`` multiparts made from one valid message (after its delimiter) by the faults a
    peer or the network could produce, each drawn from ``rng`` (seeded: reproducible)."""
    wrong = Session(b"another key")
    out: list[list[bytes]] = []
    for _ in range(n):
        frames = [bytes(f) for f in valid]
        kind = rng.randrange(13)
        if kind == 0:  # cut short
            frames = frames[: rng.randrange(len(frames))] or [b""]
        elif kind == 1:  # a byte flipped somewhere
            i = rng.randrange(len(frames))
            if frames[i]:
                j = rng.randrange(len(frames[i]))
                b = bytearray(frames[i])
                b[j] ^= 1 << rng.randrange(8)
                frames[i] = bytes(b)
        elif kind == 2:  # frames repeated or swapped
            i, j = rng.randrange(len(frames)), rng.randrange(len(frames))
            frames[i], frames[j] = frames[j], frames[i]
            frames.insert(rng.randrange(len(frames) + 1), frames[rng.randrange(len(frames))])
        elif kind == 3:  # replayed whole
            pass
        elif kind == 4:  # envelope replaced by random bytes of the same length
            frames[2] = rng.randbytes(len(frames[2]))
        elif kind == 5:  # re-signed with the wrong key
            frames[1] = wrong.sign([frames[2], *frames[3:]])
        elif kind == 6:  # extra delimiters and empty frames
            frames = [DELIM, b"", *frames]
        elif kind == 7:  # garbage buffers appended
            frames += [rng.randbytes(rng.randrange(0, 2000)) for _ in range(rng.randrange(1, 4))]
        elif kind == 8:  # random frames
            frames = [rng.randbytes(rng.randrange(0, 100)) for _ in range(rng.randrange(1, 8))]
        elif kind == 9:  # an envelope of another protocol version, signed right
            env = msgpack.unpackb(frames[2], raw=False, strict_map_key=False)
            env[0]["version"] = rng.choice(["1.0", "3.0", 2, None, PROTOCOL_VERSION + "x"])
            frames[2] = msgpack.packb(env)
            frames[1] = Session(key).sign(_signed_parts(frames[2], frames[3:]))
        elif kind == 10:  # a heartbeat-like payload
            frames = [PING + str(rng.randrange(-5, 10**12)).encode()]
        else:  # kinds 11, 12: a batch gone wrong
            frames = _batch_mutation(frames, kind, rng)
        out.append(frames)
    return out
