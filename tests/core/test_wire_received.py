"""wire.LazyReply: a checked reply that keeps its content decoded (what reading a
result needs) and the other maps as msgpack bytes until read, as wire.LazyMessage."""

from __future__ import annotations

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
