"""zpar.wire.refusals and hub.status: when a process reports its refusal counts, and how the hub
keeps them (sans-IO)."""

from __future__ import annotations

import pytest

from zpar.hub.status import RefusalBook
from zpar.wire.refusals import RefusalReporter, checked_counts, merged


def test_merged_sums_reasons_and_drops_zeros():
    assert merged([{"a": 1, "b": 0}, {"a": 2, "c": 3}]) == {"a": 3, "c": 3}


def test_a_report_goes_only_when_counts_changed_and_the_interval_passed():
    counts = {}
    r = RefusalReporter(lambda: dict(counts), interval=0.5)
    assert r.due(0.0) is None  # nothing refused yet: nothing to say
    counts["bad-signature"] = 1
    assert r.due(0.1) == {"refused": {"bad-signature": 1}}
    counts["bad-signature"] = 5
    assert r.due(0.3) is None  # within the interval
    assert r.due(0.7) == {"refused": {"bad-signature": 5}}
    assert r.due(5.0) is None  # unchanged
    counts["bad-signature"] = 6
    assert r.due(5.01) is None  # unchanged at 5.0: looked at again a tenth of an interval later
    assert r.due(5.06) == {"refused": {"bad-signature": 6}}


@pytest.mark.parametrize(
    "bad, what",
    [
        ([], "map"),
        ({1: 2}, "short string"),
        ({"": 2}, "short string"),
        ({"x" * 65: 1}, "short string"),
        ({"a": -1}, "int >= 0"),
        ({"a": True}, "int >= 0"),
        ({"a": "1"}, "int >= 0"),
        ({f"r{i}": 1 for i in range(65)}, "at most"),
    ],
)
def test_malformed_counts_are_refused_naming_what_is_wrong(bad, what):
    with pytest.raises(ValueError, match=what):
        checked_counts(bad)


def test_the_book_keeps_each_process_last_report_and_reads_parts_when_asked():
    book = RefusalBook(kept=2)
    live = {"malformed": 0}
    book.add_part("heartbeat", lambda: live)
    book.record("scheduler", {"refused": {"replayed": 2}})
    book.record("scheduler", {"refused": {"replayed": 3}})
    book.record("engine 0", {"refused": "garbage"})  # dropped, logged
    live["malformed"] = 4
    assert book.snapshot() == {"heartbeat": {"malformed": 4}, "scheduler": {"replayed": 3}}
    book.record("engine 0", {"refused": {"misrouted": 1}})
    book.record("engine 1", {"refused": {}})
    assert set(book.snapshot()) == {"heartbeat", "engine 0", "engine 1"}  # oldest dropped
