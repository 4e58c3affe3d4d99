"""docs/benchmarks.md opens with the table bench generates from bench/results.jsonl: the
two never disagree (a bench run rewrites the table; `python -m bench.report` does it alone)."""

from __future__ import annotations

import json

from bench import report


def test_the_docs_table_is_the_one_bench_generates_from_its_results():
    results = [json.loads(line) for line in report.RESULTS.read_text().splitlines() if line]
    text = report.DOC.read_text()
    block = text[
        text.index(report.DOCS_BEGIN) + len(report.DOCS_BEGIN) : text.index(report.DOCS_END)
    ]
    assert block.strip() == report.markdown_table(results).strip(), (
        "docs/benchmarks.md's table is stale: run `python -m bench.report`"
    )


def test_the_newest_figure_of_each_row_wins_and_names_its_run():
    old = {"date": "2026-11-01T00:00:00+00:00", "commit": "aaa", "scale": "quick"}
    new = {"date": "2026-11-02T00:00:00+00:00", "commit": "bbb", "scale": "full"}
    rows = [
        {**old, "system": "zpar", "workload": "W3", "figures": {"tasks_per_s": 100.0}},
        {**new, "system": "zpar", "workload": "W3", "figures": {"tasks_per_s": 200.0}},
        {**old, "system": "ray", "workload": "W3", "figures": {"tasks_per_s": 50.0}},
        {**new, "system": "ray", "workload": "W3", "figures": {"error": "boom"}},
    ]
    table = report.markdown_table(rows)
    line = next(x for x in table.splitlines() if x.startswith("| W3 tasks_per_s"))
    assert "200.0 [1]" in line and "50.0 [2]" in line and "4.00x better" in line
    assert "[1] 2026-11-02, commit `bbb`" in table and "[2] 2026-11-01, commit `aaa`" in table
