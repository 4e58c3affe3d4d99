"""Client.history / View.history with a map's elements (client.clientcompat.History):
ipyparallel's histories list each task of a default map, in the order sent; zpar adds a
map's element ids as a run, made into ids when first read, keeping only the newest the
bound allows. No processes: the fast tier."""

from __future__ import annotations

import copy
import pickle
import threading

from zpar.client.clientcompat import History


def test_runs_read_as_element_ids_in_order():
    h = History(maxlen=100)
    h.append("a")
    h.add_elements("m", 3)
    h.append("b")
    assert list(h) == ["a", "m#0", "m#1", "m#2", "b"]
    assert len(h) == 5 and h[1] == "m#0" and h[-2:] == ["m#2", "b"] and "m#1" in h
    h.add_elements("q", 2)
    assert list(reversed(h))[:2] == ["q#1", "q#0"]
    assert h.index("q#0") == 5 and h.count("a") == 1


def test_the_bound_keeps_the_newest_and_makes_no_more():
    h = History(maxlen=4)
    h.add_elements("big", 1_000_000)
    h.append("c")
    assert list(h) == ["big#999997", "big#999998", "big#999999", "c"]
    h.add_elements("r", 2)
    assert list(h) == ["big#999999", "c", "r#0", "r#1"]


def test_every_other_use_sees_the_runs():
    h = History()
    h.add_elements("u", 2)
    assert h == History(["u#0", "u#1"]) and bool(h)
    assert list(copy.copy(h)) == ["u#0", "u#1"]
    h.add_elements("v", 1)
    assert list(pickle.loads(pickle.dumps(h))) == ["u#0", "u#1", "v#0"]
    assert h.pop() == "v#0"
    h.add_elements("w", 1)
    h.clear()
    assert len(h) == 0 and list(h) == []


def test_concurrent_senders_lose_nothing():
    h = History()

    def send(k):
        for i in range(200):
            h.append(f"{k}-{i}") if i % 2 else h.add_elements(f"{k}-{i}", 2)
            if i % 50 == 0:
                len(h)  # a reader settles meanwhile

    threads = [threading.Thread(target=send, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(h) == 4 * (100 + 100 * 2)
    for k in range(4):  # each sender's ids in the order it sent them
        mine = [m for m in h if m.startswith(f"{k}-")]
        assert mine[:3] == [f"{k}-0#0", f"{k}-0#1", f"{k}-1"]
