"""engine.capture: what a task printed, kept for its reply; an element run's text split per
element and per part (each element of a map is a task of its own, with its own stdout)."""

from __future__ import annotations

import sys

from zpar.engine.capture import TRUNCATED_NOTE, Capture, CapturedStream


def test_a_task_keeps_what_it_printed_and_the_real_streams_come_back():
    published = []
    cap = Capture(lambda t, c, p: published.append((c["name"], c["text"], p["msg_id"])))
    real = sys.stdout
    cap.start({"msg_id": "m1"})
    print("hello")
    print("oops", file=sys.stderr)
    assert cap.stop() == ("hello\n", "oops\n")
    assert sys.stdout is real
    assert ("stdout", "hello\n", "m1") in published


def test_a_tracked_run_gives_each_element_its_own_text_part_by_part():
    """Parts are taken while later elements run: a part has the text of its elements only
    (up to where the first element it does not answer began), each element's by position."""
    s = CapturedStream("stdout", None)
    running = [0]
    s.track(lambda: running[0])
    s.write("a0\n")
    running[0] = 1  # element 0 done; 1 prints nothing
    running[0] = 2
    s.write("b2\n")
    s.write("c2\n")
    running[0] = 3
    s.write("d3")  # element 3 is running when the part of [0, 3) is taken
    assert s.take(3) == ("a0\nb2\nc2\n", {"0": "a0\n", "2": "b2\nc2\n"})
    s.write("\n")
    running[0] = 4
    s.write("e4\n")
    assert s.take(None) == ("d3\ne4\n", {"3": "d3\n", "4": "e4\n"})
    assert s.take(None) == ("", {})


def test_text_before_any_tracked_element_belongs_to_the_part_only():
    s = CapturedStream("stdout", None)
    s.write("setup\n")
    s.track(lambda: 5)
    s.write("five\n")
    assert s.take(None) == ("setup\nfive\n", {"5": "five\n"})


def test_the_cap_counts_from_the_last_take_and_notes_what_was_cut():
    s = CapturedStream("stdout", None, limit=4)
    pos = [0]
    s.track(lambda: pos[0])
    s.write("abcdef")
    assert s.take(1) == ("abcd" + TRUNCATED_NOTE, {"0": "abcd" + TRUNCATED_NOTE})
    pos[0] = 1
    s.write("xy")  # room again after the take
    assert s.take(None) == ("xy", {"1": "xy"})


def test_reset_forgets_the_marks_and_stops_tracking():
    s = CapturedStream("stdout", None)
    s.track(lambda: 7)
    s.write("x")
    s.reset()
    s.write("y")
    assert s.take(None) == ("y", {})
