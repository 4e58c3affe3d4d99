"""Take docs/dashboard.png: a 4-engine cluster runs a few maps (one function fails now and
then) while headless Chromium shows its dashboard. ``python scripts/dashboard_screenshot.py``
"""

from __future__ import annotations

import random
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import zpar  # noqa: E402
from tests.dashboard.chromium import Browser  # noqa: E402


def simulate(x):
    import random
    import time

    time.sleep(random.uniform(0.05, 0.5))
    return x


def reduce_block(x):
    import time

    time.sleep(0.2)
    return x


def fit_model(x):
    import time

    time.sleep(0.12)
    if x % 11 == 5:
        raise ValueError(f"the fit did not converge for sample {x}")
    return x


def work(rc: zpar.Client, seconds: float) -> None:
    lv = rc.load_balanced_view()
    end = time.time() + seconds
    while time.time() < end:
        a = lv.map_async(simulate, range(24), chunksize=1)
        b = lv.map_async(reduce_block, range(8), chunksize=1)
        c = [lv.apply_async(fit_model, i) for i in range(random.randint(8, 16))]
        a.wait()
        b.wait()
        for x in c:
            x.wait()


def main() -> int:
    out = REPO / "docs" / "dashboard.png"
    with tempfile.TemporaryDirectory() as d:
        import os

        os.environ["ZPAR_DIR"] = d
        with zpar.Cluster(n=4) as rc:
            t = threading.Thread(target=work, args=(rc, 45.0))
            t.start()
            with Browser(rc.dashboard_link, width=1440, height=1000) as b:
                b.wait_for("document.body.dataset.updated")
                time.sleep(35)
                b.eval(
                    "document.querySelector('#search [name=status]').value = 'error';"
                    "document.querySelector('#search button').click(); true"
                )
                first = "document.querySelector('#tasks tbody tr[data-msg-id]')"
                b.wait_for(f"{first}?.querySelector('.status-error') != null")
                b.eval(f"{first}.click(); true")
                b.wait_for("document.getElementById('traceback').textContent.includes('converge')")
                time.sleep(1)
                b.screenshot(out)
            t.join()
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
