"""The client "host" of test_multihost.py, run inside its own namespace: prints one JSON
line of facts for the test to check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import zpar


def slow_square(x):
    import time

    time.sleep(0.25)
    return x * x


def main(url_file: str, bridge_ns: str, victim_port: str, budget: float) -> None:
    facts: dict = {}
    with zpar.Client(url_file=url_file, timeout=60) as rc:
        rc.wait_for_engines(4, timeout=90)
        facts["pids"] = rc[:].apply_sync(os.getpid)
        lview = rc.load_balanced_view()
        lview.retries = 3
        facts["first"] = lview.map_sync(lambda x: x + 1, range(16))
        before = set(rc.ids)
        ar = lview.map_async(slow_square, range(40))
        deadline = time.monotonic() + 30
        while ar.progress < 4 and time.monotonic() < deadline:  # tasks under way everywhere
            time.sleep(0.02)
        t0 = time.monotonic()
        subprocess.run(["ip", "-n", bridge_ns, "link", "set", victim_port, "down"], check=True)
        while len(rc.ids) > 2 and time.monotonic() - t0 < budget * 4 + 10:
            time.sleep(0.01)
        facts["unregistered_after"] = time.monotonic() - t0
        facts["gone"] = sorted(before - set(rc.ids))
        facts["results"] = ar.get(timeout=90)
        facts["left"] = rc[:].apply_sync(os.getpid)
    print(json.dumps(facts), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
