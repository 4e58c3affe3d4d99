"""zpar.wire.received: wire.LazyMessage routes by its parent's msg_id and decodes its maps
when read; wire.LazyReply, a checked reply, keeps its content decoded (what reading a
result needs) and the other maps as msgpack bytes until read."""

from __future__ import annotations

import msgpack

from tests.wirerig import envelope_header, frames_of, signed_frames
from zpar.client.asyncresult import decode_reply
from zpar.serialize import serialize_object
from zpar.wire import LazyMessage, LazyReply, Session

KEY = b"replies-test-key"


def _reply(session: Session, value: object) -> LazyReply:
    _, frames = session.serialize(
        "apply_reply",
        {"status": "ok"},
        parent={"msg_id": "req-1", "msg_type": "apply_request"},
        metadata={"engine_id": 3, "status": "ok"},
        buffers=serialize_object(value),
    )
    (msg,) = Session(KEY).feed_all([b"engine-uuid", *frames], "test")
    return LazyReply(msg)


def test_a_reply_reads_as_the_message_it_was_made_from():
    reply = _reply(Session(KEY), {"x": [1, 2]})
    assert isinstance(reply, LazyMessage)
    assert reply.parent_msg_id == "req-1" and reply.idents == [b"engine-uuid"]
    assert decode_reply(reply) == {"x": [1, 2]}
    assert reply.content == {"status": "ok"}
    assert reply._parts is None  # the envelope is not decoded again to read a result
    assert reply.metadata == {"engine_id": 3, "status": "ok"}  # decoded when first read
    assert reply.msg_type == "apply_reply" and reply.parent_header["msg_type"] == "apply_request"
    assert reply.content == {"status": "ok"}


def test_lazy_message_routes_by_parent_and_decodes_on_read():
    parent = Session(KEY).make_header("apply_request")
    _, frames = Session(KEY).serialize(
        "apply_reply",
        {"status": "ok"},
        parent=parent,
        metadata={"engine_id": 2},
        buffers=[b"buffer"],
    )
    msg = Session(KEY).feed_lazy([b"engine", *frames])
    assert msg is not None and msg.parent_msg_id == parent["msg_id"]
    assert msg.idents == [b"engine"]
    assert msg._parts is None  # nothing decoded yet but the routing key
    assert msg.content == {"status": "ok"} and msg.metadata == {"engine_id": 2}
    assert msg.msg_type == "apply_reply" and msg.parent_header == parent
    assert msg.buffers == [b"buffer"] and msg.content is msg.content  # decoded once


def test_lazy_message_refuses_what_feed_refuses():
    frames = frames_of(Session(KEY))
    frames[2] = frames[2] + b"x"
    receiver = Session(KEY)
    assert receiver.feed_lazy(frames) is None and receiver.refused == {"bad-signature": 1}
    env = msgpack.packb([envelope_header(), {"msg_id": 5}, {}, {}, []])
    assert (
        receiver.feed_lazy(signed_frames(env, Session(KEY))) is None
    )  # the parent header is checked too
    assert receiver.refused == {"bad-signature": 1, "malformed": 1}


# -- batches: several signed messages in one multipart ---------------------------------------
