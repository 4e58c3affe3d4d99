"""Count the project files and function calls one load-balanced ``lv.apply(f, x).get()``
passes through, from the call to the resolved future, client to engine and back.

The cluster is zpar.testing's in-process one (hub, task scheduler and 2 engines as
threads of this process), so one profile hook sees every thread on the path. The hook is
installed (threading.setprofile, sys.setprofile) before any of those threads starts, and
counts only while one task runs, after ``--warmup`` tasks; each task is counted ``--runs``
times and the run with the fewest calls is reported (a heartbeat or a poll timeout that
falls inside one run adds calls that are not the task's). A call is counted when its code
lives in a file of this repository (scripts/ and zpar/testing.py, the harness, excluded).

    python scripts/callpath.py [--runs 5] [--warmup 20] [--files] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: the counter and the in-process rig are not on a user's path
EXCLUDED = (str(ROOT / "scripts") + os.sep, str(ROOT / "zpar" / "testing.py"))
#: frames of comprehensions and generator expressions: calls to CPython 3.11, not to a reader
INLINE_SCOPES = ("<listcomp>", "<setcomp>", "<dictcomp>", "<genexpr>")


class Counter:
    """A profile hook that counts project calls while ``active``."""

    def __init__(self) -> None:
        self.active = False
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()
        self._root = str(ROOT) + os.sep
        self._lock = threading.Lock()

    def hook(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or not self.active:
            return
        path = frame.f_code.co_filename
        if not path.startswith(self._root) or path.startswith(EXCLUDED):
            return
        with self._lock:
            self.calls[(path[len(self._root) :], frame.f_code.co_qualname)] += 1


def task(x: int) -> int:
    return x + 1


def count(runs: int, warmup: int) -> dict[str, Any]:
    counter = Counter()
    threading.setprofile(counter.hook)  # every thread started from now on
    sys.setprofile(counter.hook)
    from zpar.testing import InProcessCluster

    try:
        with InProcessCluster(n=2) as cluster:
            lv = cluster.client.load_balanced_view()
            for i in range(warmup):
                lv.apply(task, i).get(timeout=30)
            best: collections.Counter[tuple[str, str]] | None = None
            for i in range(runs):
                counter.calls = collections.Counter()
                counter.active = True
                result = lv.apply(task, i).get(timeout=30)
                counter.active = False
                if result != i + 1:
                    raise AssertionError(f"task({i}) returned {result!r}")
                if best is None or sum(counter.calls.values()) < sum(best.values()):
                    best = counter.calls
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    assert best is not None
    files = sorted({path for path, _ in best})
    named = {k: n for k, n in best.items() if not k[1].endswith(INLINE_SCOPES)}
    return {
        "commit": _commit(),
        "files": len(files),
        "calls": sum(best.values()),
        "functions": len(best),
        "named_calls": sum(named.values()),
        "named_functions": len(named),
        "runs": runs,
        "file_list": files,
        "call_list": sorted(f"{p}:{q} x{n}" for (p, q), n in best.items()),
    }


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--files", action="store_true", help="list the files and calls")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = count(args.runs, args.warmup)
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return
    sys.stdout.write(
        f"{out['commit']}: lv.apply(f, x).get() passes {out['files']} files, "
        f"{out['calls']} calls of {out['functions']} functions; without comprehensions "
        f"{out['named_calls']} calls of {out['named_functions']} (fewest of {out['runs']} runs)\n"
    )
    if args.files:
        sys.stdout.write("\n".join(out["call_list"]) + "\n")


if __name__ == "__main__":
    main()
