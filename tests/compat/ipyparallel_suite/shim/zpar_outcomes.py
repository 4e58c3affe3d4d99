"""pytest plugin of the ipyparallel suite's subprocess: each test's outcome, one JSON line.

Written per phase (setup, call, teardown) and per file that fails to import, to the file
named by $ZPAR_IPP_OUTCOMES; suite.py folds the phases into one outcome per test.
"""

import json
import os

_out = open(os.environ["ZPAR_IPP_OUTCOMES"], "a", buffering=1)


def _message(report):
    if report.passed:
        return ""
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.splitlines()[0] if crash.message else ""
    text = str(report.longrepr or "").strip().splitlines()
    return text[-1] if text else ""


def pytest_runtest_logreport(report):
    _out.write(
        json.dumps(
            {
                "nodeid": report.nodeid,
                "when": report.when,
                "outcome": report.outcome,
                "xfail": hasattr(report, "wasxfail"),
                "message": _message(report),
            }
        )
        + "\n"
    )


def pytest_collectreport(report):
    if report.failed:
        _out.write(
            json.dumps(
                {
                    "nodeid": report.nodeid,
                    "when": "collect",
                    "outcome": "failed",
                    "xfail": False,
                    "message": _message(report),
                }
            )
            + "\n"
        )
