"""docs/api.md's list of ipyparallel tests that do not apply to zpar: well formed (fast tier)."""

from __future__ import annotations

import re

from . import suite

#: reasons that are no reason: the row must say why the test has no meaning in zpar
NON_REASONS = re.compile(r"not (yet )?implemented|todo|later|fails", re.IGNORECASE)


def test_each_row_names_a_test_of_the_suite_and_a_reason():
    rows = suite.not_applicable()
    for test_id, reason in rows.items():
        assert test_id.split("::", 1)[0] in suite.FILES, f"{test_id}: not a file the suite runs"
        assert len(reason) >= 30, f"{test_id}: give the reason a user would accept: {reason!r}"
        assert not NON_REASONS.search(reason), f"{test_id}: {reason!r} is not a reason"


def test_the_table_is_found(tmp_path):
    md = tmp_path / "api.md"
    md.write_text(
        "## Other\n| `test_view.py::TestView::test_x` | not this one |\n"
        f"{suite.NA_HEADING} (not applicable)\n\n| test | why |\n|---|---|\n"
        "| `test_view.py::TestView::test_y` | zpar has no traitlets configuration |\n"
        "## After\n"
    )
    assert suite.not_applicable(md) == {
        "test_view.py::TestView::test_y": "zpar has no traitlets configuration"
    }


def test_the_register_of_open_failures_is_apart_from_the_exclusions(tmp_path):
    known, na = suite.still_failing(), suite.not_applicable()
    assert na, "the exclusions are read (docs/api.md)"
    assert not known.keys() & na.keys()
    # the register is read (docs/api.md's may be empty: a row goes when its test passes)
    sample = tmp_path / "api.md"
    sample.write_text(
        f"{suite.OPEN_HEADING}\n\n| test | what is wrong |\n|---|---|\n"
        "| `test_view.py::TestView::test_x` | what is wrong with it |\n\n## Next\n"
    )
    assert suite.still_failing(sample) == {
        "test_view.py::TestView::test_x": "what is wrong with it"
    }
    for test_id, cause in known.items():
        assert test_id.split("::", 1)[0] in suite.FILES, f"{test_id}: not a file the suite runs"
        assert len(cause) >= 10, f"{test_id}: say what is wrong"
