"""Outbox: sends of one pass gathered per route, out as lone messages or wire batches."""

from __future__ import annotations

from zpar.constants import MAX_BATCH
from zpar.schedulers.outbox import Outbox
from zpar.wire import Session, is_batch, split_messages

SESSION = Session("k" * 64)


def message(n: int) -> list:
    return SESSION.serialize("apply_request", {"n": n}, buffers=[b"x" * n])[1]


def unpacked(route, multipart):
    idents, messages = split_messages([*route, *multipart])
    return idents, [SESSION.unpack(m, idents, replay=False).content["n"] for m in messages]


def test_a_lone_message_goes_as_a_batch_of_one_and_several_as_one_batch_per_route():
    box: Outbox[int] = Outbox()
    box.add((b"e1", b"c1"), message(1), 1)
    box.add((b"e2", b"c1"), message(2), 2)
    box.add((b"e1", b"c1"), message(3), 3)
    assert len(box) == 3 and box.holds(b"c1", 1) and not box.holds(b"c2", 1)
    sent = list(box.take())
    assert not box
    assert [(route, items) for route, _, items in sent] == [
        ((b"e1", b"c1"), [1, 3]),
        ((b"e2", b"c1"), [2]),
    ]
    (r1, batched, _), (r2, lone, _) = sent
    assert unpacked(r1, batched) == ([b"e1", b"c1"], [1, 3])
    assert is_batch(lone) and is_batch(batched)  # small: packed (wire.batch)
    assert unpacked(r2, lone) == ([b"e2", b"c1"], [2])


def test_take_of_one_key_leaves_the_other_routes():
    box: Outbox[None] = Outbox()
    box.add((b"c1", b"e1"), message(1), None)
    box.add((b"c2", b"e1"), message(2), None)
    assert [route for route, _, _ in box.take(b"c2", 0)] == [(b"c2", b"e1")]
    assert len(box) == 1 and box.holds(b"c1", 0)


def test_more_than_max_batch_messages_go_in_several_batches_in_order():
    box: Outbox[int] = Outbox()
    for n in range(MAX_BATCH + 3):
        box.add((b"e", b"c"), message(n % 7), n)
    sent = list(box.take())
    assert [len(items) for _, _, items in sent] == [MAX_BATCH, 3]
    assert [i for _, _, items in sent for i in items] == list(range(MAX_BATCH + 3))
    assert unpacked(*sent[1][:2])[1] == [n % 7 for n in range(MAX_BATCH, MAX_BATCH + 3)]


def test_max_bytes_bounds_each_batch_and_a_larger_message_goes_alone():
    box: Outbox[int] = Outbox(max_bytes=3000)
    sizes = [1000, 1000, 1000, 5000, 100, 100]
    for i, n in enumerate(sizes):
        box.add((b"c", b"e"), message(n), i)
    sent = list(box.take())
    # each message is ~1 KB of buffer plus its head: two fit under 3,000 bytes, not three
    assert [items for _, _, items in sent] == [[0, 1], [2], [3], [4, 5]]
    assert [len(split_messages(m)[1]) for _, m, _ in sent] == [2, 1, 1, 2]
    assert [n for route, m, _ in sent for n in unpacked(route, m)[1]] == sizes
