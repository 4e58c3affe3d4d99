"""ipyparallel 9.2.0's own client tests, run against zpar: fetch, extract, run, read results.

The wheel comes from the package index through pip, version and sha256 pinned
(``--require-hashes``), cached in ``.wheels/`` beside this file (not committed). Its
``ipyparallel/tests/`` is extracted into a run folder with the ``ipyparallel`` shim
(``shim/ipyparallel``: zpar under ipyparallel's name) and our ``tests/__init__.py``
(``shim/tests_init.py``: zpar processes where ipyparallel starts its own), and pytest runs
the test files in subprocesses whose working directory is that run folder, outside the
checkout (a checkout's top-level folders must not shadow installed packages there).

The tests that do not apply to zpar are listed, each with its reason, in one table of
docs/api.md ("ipyparallel's own tests"); ``not_applicable()`` reads it from there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
API_MD = REPO / "docs" / "api.md"
WHEEL_CACHE = HERE / ".wheels"

#: the release whose tests zpar answers to, and its wheel's sha256 (from PyPI, 2026-11-28)
IPYPARALLEL = "ipyparallel==9.2.0"
WHEEL_NAME = "ipyparallel-9.2.0-py3-none-any.whl"
WHEEL_SHA256 = "3d62ffa1f7bb6372c325e4e59798d2ad4ef4c8a43fb7461b97adba7d7951cadd"

#: ipyparallel's test files that exercise the client (views, results, remote functions,
#: magics, executors, dependencies, labels, joblib), as groups run side by side: each
#: group is one pytest subprocess; each module starts its own controller and engines.
GROUPS: tuple[tuple[str, ...], ...] = (
    (
        "test_view.py",
        "test_lbview.py",
        "test_dependency.py",
        "test_remotefunction.py",
        "test_view_broadcast.py",
        "test_executor.py",
        "test_joblib.py",
    ),
    ("test_client.py", "test_asyncresult.py", "test_magics.py", "test_label.py"),
)
FILES = tuple(f for g in GROUPS for f in g)

#: the heading of docs/api.md's table of tests that do not apply
NA_HEADING = "## ipyparallel's own tests"
_NA_ROW = re.compile(r"^\|\s*`(test_[\w]+\.py::[^`]+)`\s*\|\s*(.+?)\s*\|\s*$")

#: seconds one group may take (the suite's budget is 25 minutes for everything)
GROUP_TIMEOUT = 900


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_wheel(cache: Path = WHEEL_CACHE) -> Path:
    """The pinned wheel: from the cache when its hash matches, else through pip."""
    wheel = cache / WHEEL_NAME
    if wheel.exists() and _sha256(wheel) == WHEEL_SHA256:
        return wheel
    cache.mkdir(parents=True, exist_ok=True)
    req = cache / "requirements.txt"
    req.write_text(f"{IPYPARALLEL} --hash=sha256:{WHEEL_SHA256}\n")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--require-hashes",
        "--only-binary=:all:",
        "-r",
        str(req),
        "-d",
        str(cache),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode or not wheel.exists():
        raise RuntimeError(f"pip could not fetch {IPYPARALLEL}:\n{proc.stdout}\n{proc.stderr}")
    if _sha256(wheel) != WHEEL_SHA256:
        raise RuntimeError(f"{wheel} does not have the pinned sha256 {WHEEL_SHA256}")
    return wheel


def prepare_run_dir(wheel: Path, run: Path) -> Path:
    """``run/ipyparallel`` = the shim; ``run/ipyparallel/tests`` = the wheel's tests, with
    our ``__init__.py``; ``run/pytest.ini`` = the subprocess' configuration."""
    pkg = run / "ipyparallel"
    shutil.copytree(
        HERE / "shim" / "ipyparallel", pkg, ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copyfile(HERE / "shim" / "zpar_outcomes.py", run / "zpar_outcomes.py")
    tests = pkg / "tests"
    tests.mkdir()
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith("ipyparallel/tests/") and not name.endswith("/"):
                (tests / name.rsplit("/", 1)[1]).write_bytes(zf.read(name))
    if not (tests / "clienttest.py").exists():
        raise RuntimeError(f"{wheel.name} holds no ipyparallel/tests/clienttest.py")
    shutil.copyfile(HERE / "shim" / "tests_init.py", tests / "__init__.py")
    (run / "pytest.ini").write_text(
        "[pytest]\n"
        "addopts = -p no:cacheprovider\n"
        "timeout = 120\n"
        "markers =\n    asyncio: an async test (pytest-asyncio)\n"
    )
    return run


@dataclass(frozen=True)
class Outcome:
    test_id: str  # "test_client.py::TestClient::test_ids"
    status: str  # passed, failed, error, skipped
    message: str


def _short_id(nodeid: str) -> str:
    """ "ipyparallel/tests/test_client.py::TestClient::test_ids" -> "test_client.py::TestClient::test_ids"."""
    return nodeid.rsplit("/", 1)[-1]


def fold_outcomes(lines: list[str]) -> list[Outcome]:
    """One outcome per test from the plugin's per-phase lines (shim/zpar_outcomes.py):
    a failed call is 'failed', a failed setup or teardown (or import) 'error', an expected
    failure 'xfailed', a skip in any phase 'skipped'."""
    phases: dict[str, list[dict]] = {}
    for line in lines:
        r = json.loads(line)
        phases.setdefault(r["nodeid"], []).append(r)
    out = []
    for nodeid, reports in phases.items():
        status, message = "passed", ""
        for r in reports:
            if r["outcome"] == "failed" and not r["xfail"]:
                status = "failed" if r["when"] == "call" else "error"
                message = r["message"]
                break
        else:
            for r in reports:
                if r["xfail"]:
                    status, message = "xfailed", r["message"]
                    break
                if r["outcome"] == "skipped":
                    status, message = "skipped", r["message"]
                    break
        out.append(Outcome(_short_id(nodeid), status, message))
    return out


#: The variable every process of a group inherits (its outcomes file): how the reaper knows
#: them, daemons and re-executed engines included.
MARKER = "ZPAR_IPP_OUTCOMES"

#: The reaper (start_reaper): waits for its stdin to close, which happens when the runner
#: is done or dies in any way (SIGKILL included), then ends every process carrying one of
#: the markers given: SIGTERM, then SIGKILL after 5 s.
_REAPER = f"""
import os, sys
import psutil
markers = set(sys.argv[1:])
sys.stdin.read()
me = os.getpid()
procs = []
for p in psutil.process_iter():
    try:
        if p.pid != me and p.environ().get({MARKER!r}) in markers:
            procs.append(p)
            p.terminate()
    except (psutil.Error, OSError):
        pass
_, alive = psutil.wait_procs(procs, timeout=5)
for p in alive:
    try:
        p.kill()
    except psutil.Error:
        pass
"""


def start_reaper(markers: list[str]) -> subprocess.Popen:
    """A process that ends every process carrying one of ``markers`` (MARKER's value)
    once the caller closes its stdin or dies: a run cut short (a timeout, SIGTERM,
    KeyboardInterrupt, SIGKILL) leaves no controller or engine of profile ``iptest``.
    A session of its own, so a terminal's Ctrl-C does not end it first."""
    env = {k: v for k, v in os.environ.items() if k != MARKER}
    return subprocess.Popen(
        [sys.executable, "-c", _REAPER, *markers],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
        text=True,
    )


def run_suite(run: Path, groups=GROUPS) -> tuple[list[Outcome], str]:
    """Run each group in its own pytest subprocess, side by side; outcomes and logs.
    Whatever ends the run, the reaper ends what the groups started."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the run folder (cwd) first, then the installed packages
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    markers = [str(run / f"outcomes-{k}.jsonl") for k in range(len(groups))]
    reaper = start_reaper(markers)
    try:
        return _run_groups(run, groups, env)
    finally:
        reaper.stdin.close()  # the groups are done or cut short: end what is left
        try:
            reaper.wait(30)
        except subprocess.TimeoutExpired:
            reaper.kill()
            reaper.wait()


def _run_groups(run: Path, groups, env: dict[str, str]) -> tuple[list[Outcome], str]:
    procs = []
    for k, files in enumerate(groups):
        results = run / f"outcomes-{k}.jsonl"
        group_env = {**env, MARKER: str(results)}
        log = (run / f"pytest-{k}.log").open("w")
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rfEs",
            "--continue-on-collection-errors",
            "-c",
            str(run / "pytest.ini"),
            "--rootdir",
            str(run),
            "-p",
            "zpar_outcomes",
            *[f"ipyparallel/tests/{f}" for f in files],
        ]
        procs.append(
            (
                subprocess.Popen(
                    cmd,
                    cwd=run,
                    env=group_env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                ),
                results,
                log,
            )
        )
    outcomes: list[Outcome] = []
    logs = []
    for proc, results, log in procs:
        try:
            proc.wait(GROUP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()
        logs.append(Path(log.name).read_text(errors="replace"))
        if results.exists():
            outcomes.extend(fold_outcomes(results.read_text().splitlines()))
    return outcomes, "\n".join(logs)


def _table(heading: str, api_md: Path, unless: str | None = None) -> dict[str, str]:
    """The rows (test id -> text) of docs/api.md's table under ``heading``."""
    rows: dict[str, str] = {}
    inside = False
    for line in api_md.read_text().splitlines():
        if line.startswith("## "):
            inside = line.startswith(heading) and not (unless and line.startswith(unless))
            continue
        m = _NA_ROW.match(line) if inside else None
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def not_applicable(api_md: Path = API_MD) -> dict[str, str]:
    """docs/api.md's table of ipyparallel tests that do not apply: test id -> reason."""
    return _table(NA_HEADING, api_md, unless=OPEN_HEADING)


#: docs/api.md's table of ipyparallel tests that still fail on zpar: open defects, not
#: excuses (issue 24 stays open while it has rows)
OPEN_HEADING = "## ipyparallel's own tests that still fail"


def still_failing(api_md: Path = API_MD) -> dict[str, str]:
    """docs/api.md's register of ipyparallel tests known to fail on zpar: test id -> cause.
    Such a test may pass (then its row should go); any other failure fails the suite."""
    return _table(OPEN_HEADING, api_md)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.compat.ipyparallel_suite.suite [test_x.py ...]``: run the suite
    (or the files named) in a temporary folder and print every test that did not pass."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("files", nargs="*", help="test files (default: all of FILES)")
    parser.add_argument("--keep", help="run in this folder and keep it (logs, outcomes)")
    args = parser.parse_args(argv)
    run = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ipp-suite-"))
    run.mkdir(parents=True, exist_ok=True)
    prepare_run_dir(fetch_wheel(), run)
    groups = (tuple(args.files),) if args.files else GROUPS
    outcomes, _ = run_suite(run, groups)
    na = not_applicable()
    counts: dict[str, int] = {}
    for o in outcomes:
        status = "n/a" if o.test_id in na and o.status != "passed" else o.status
        counts[status] = counts.get(status, 0) + 1
        if status not in ("passed", "n/a"):
            print(f"{o.status:8} {o.test_id}  {o.message[:160]}")
    print(", ".join(f"{v} {k}" for k, v in sorted(counts.items())), f"(logs in {run})")
    if not args.keep:
        shutil.rmtree(run, ignore_errors=True)
    return 0 if set(counts) <= {"passed", "n/a", "xfailed"} else 1


if __name__ == "__main__":
    sys.exit(main())
