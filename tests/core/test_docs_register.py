"""docs/decisions.md is a register (issue 25): one ``### entry`` per decision, each with its
date and its parts in one form, no title twice; and the project's docs and code speak of
the project, by dates and commits, not of who worked on it or when ("today")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DECISIONS = ROOT / "docs" / "decisions.md"
#: words of a journal, not of a reference: a reader cannot tell when "today" was
JOURNAL = re.compile(
    r"\b(?:[Tt]oday|[Yy]esterday|this session|[Ss]itting|[Ee]ngineers?|[Ww]e did)\b"
)
#: where the rule applies: the docs, the README, and the product's code and comments
PLACES = (
    ("docs", "README.md", "bench/README.md")
    + tuple(f"{d}/" for d in ("zpar", "hub", "engine", "client", "schedulers", "typed"))
    + ("communicator/", "darray/", "dashboard/")
)


def entries(text: str) -> dict[str, str]:
    """title -> body of each ``### `` entry (up to the next entry or room)."""
    out: dict[str, str] = {}
    for chunk in re.split(r"\n(?=### )", text)[1:]:
        title, _, body = chunk.partition("\n")
        out.setdefault(title, "")
        out[title] += "\n" + body.split("\n## ")[0]
    return out


def test_every_decision_has_its_date():
    undated = [t for t, body in entries(DECISIONS.read_text()).items() if "**Date.**" not in body]
    assert not undated, f"entries without a '- **Date.**' bullet: {undated}"


PARTS = ("Decision", "Why", "Evidence", "Date")


def parts(body: str) -> list[str]:
    """The entry's top-level bullets, by their bold label (``- **Why.** ...`` -> ``Why``);
    a bullet without one of the four labels counts as its first words."""
    out = []
    for line in body.splitlines():
        if line.startswith("- "):
            m = re.match(r"- \*\*(\w+)\.\*\*", line)
            out.append(m.group(1) if m else line[2:40])
    return out


def test_every_entry_has_its_four_parts_in_order():
    """Each entry is ``**Decision.**`` / ``**Why.**`` / ``**Evidence.**`` / ``**Date.**``,
    each once, in that order; sub-decisions and figures nest under them (issue 25 item 6)."""
    odd = {
        t: found
        for t, body in entries(DECISIONS.read_text()).items()
        if (found := parts(body)) != list(PARTS)
    }
    assert not odd, f"entries whose top-level bullets are not {PARTS}: {odd}"


def test_the_parts_check_sees_a_missing_or_stray_part():
    whole = "- **Decision.** x\n- **Why.** y\n  - nested\n- **Evidence.** z\n- **Date.** d\n"
    assert parts(whole) == list(PARTS)
    assert parts(whole.replace("- **Why.** y\n", "")) != list(PARTS)
    assert parts(whole + "- **Rejected.** r\n") != list(PARTS)
    assert parts("- **Nesting 64.** a\n" + whole) != list(PARTS)


#: paths an entry names that are not this repository's: ipyparallel's own test helper, and
#: the name the ipyparallel suite gives its shim in the temporary folder it runs from
FOREIGN_PATHS = {"tests/clienttest.py", "tests/__init__.py"}


def test_the_evidence_named_exists():
    """Every file of tests/, bench/, scripts/ or docs/ an entry names exists, and every
    section of docs/benchmarks.md it quotes is a heading there: evidence is not invented."""
    text = re.sub(r"\s+", " ", DECISIONS.read_text())
    named = set(
        re.findall(r"(?<![\w/.-])((?:tests|bench|scripts|docs)/[\w/.-]*\w\.(?:py|sh|md))", text)
    )
    missing = sorted(p for p in named - FOREIGN_PATHS if not (ROOT / p).exists())
    assert not missing, f"files named in docs/decisions.md that do not exist: {missing}"
    heads = [
        re.sub(r"\s+", " ", h)
        for h in re.findall(r"^#{2,3} (.+)$", (ROOT / "docs" / "benchmarks.md").read_text(), re.M)
    ]
    quoted = re.findall(r'benchmarks(?:\.md)?,? \(?"([^"]+)"', text)
    unknown = [q for q in quoted if not any(q in h for h in heads)]
    assert quoted and not unknown, f"benchmarks.md sections quoted but not there: {unknown}"


def test_the_parts_are_written_one_way():
    """``**Decision.**``, not ``**Decision:**`` nor a bare date: one form to search for."""
    text = DECISIONS.read_text()
    odd = re.findall(
        r"^- \*\*(?:Decision|Why|Evidence|Date):\*\*.*$|^- \d{4}-\d\d-\d\d.*$", text, re.M
    )
    assert not odd, f"parts written another way: {odd}"


def test_no_title_twice():
    titles = re.findall(r"^### (.+)$", DECISIONS.read_text(), re.M)
    assert len(titles) == len(set(titles)), sorted({t for t in titles if titles.count(t) > 1})


def _journal_lines() -> list[str]:
    found = []
    for place in PLACES:
        path = ROOT / place
        files = (
            [path] if path.is_file() else sorted(path.rglob("*.md" if place == "docs" else "*.py"))
        )
        for f in files:
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if JOURNAL.search(line):
                    found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    return found


def test_the_docs_and_code_speak_of_the_project_only():
    assert _journal_lines() == []


def test_the_journal_check_sees_a_journal_line():
    assert JOURNAL.search("measured today at load 3")
    assert JOURNAL.search("the engineer's sections")
    assert not JOURNAL.search("This Session's key signs it")
    assert not JOURNAL.search("measured on 2026-11-28 at 6d9ee9b")
