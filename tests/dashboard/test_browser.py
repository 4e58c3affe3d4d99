"""The dashboard in a real browser: headless Chromium on the page while a cluster works.

What a person would see is checked, each by waiting (generously) for the page to show it:
the engine count, one bar per task run, an engine killed shown dead, a failed task's
traceback found by its msg_id. The browser is Debian's chromium, installed by
scripts/ensure_system_packages.sh when missing (tests/dashboard/chromium.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import zpar
from tests.clusters import module_cluster
from tests.dashboard.chromium import Browser

pytestmark = pytest.mark.cluster

TASKS = 24


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three engines in a ZPAR_DIR of the module's own (the autouse one is per test)."""
    yield from ((c, c.client) for c in module_cluster(tmp_path_factory, "zpar-browser", 3))


@pytest.fixture(scope="module")
def page(cluster):
    c, rc = cluster
    with Browser(rc.dashboard_link) as b:
        b.wait_for("document.body.dataset.updated")
        yield b


def text(b: Browser, element_id: str) -> str:
    return b.eval(f"document.getElementById({element_id!r}).textContent")


def test_the_page_shows_the_engines(page, cluster):
    _, rc = cluster
    page.wait_for("document.getElementById('engine-count').textContent === '3'")
    rows = page.eval(
        "[...document.querySelectorAll('#engines tbody tr')].map(r => r.dataset.engine)"
    )
    assert sorted(int(r) for r in rows) == sorted(rc.ids)
    assert page.eval("document.getElementById('live').textContent") == "live"


def test_one_bar_per_task_run_coloured_by_its_function(page, cluster):
    _, rc = cluster

    def count_bars(x):  # defined here: sent by value (the engines cannot import tests)
        return x + 1

    lv = rc.load_balanced_view()
    assert lv.map_sync(count_bars, range(TASKS), chunksize=1) == list(range(1, TASKS + 1))
    # the bars of this function, as drawn by the chart (its elements, not the data sent)
    drawn = (
        "(() => { const c = Chart.getChart('stream'); let n = 0;"
        " c.data.datasets.forEach((d, i) => { if (d.label === 'count_bars')"
        " n += c.getDatasetMeta(i).data.length; }); return n; })()"
    )
    page.wait_for(f"{drawn} === {TASKS}")
    assert "count_bars" in text(page, "legend")


def test_a_failed_task_is_found_by_msg_id_with_its_traceback(page, cluster):
    _, rc = cluster

    def fail_loudly(x):
        raise ValueError(f"the input {x} is not acceptable")

    ar = rc.load_balanced_view().apply_async(fail_loudly, 7)
    with pytest.raises(zpar.RemoteError):
        ar.get(timeout=30)
    msg_id = ar.msg_ids[0]
    page.wait_for("document.getElementById('failed-count').textContent !== '0'")
    page.eval(
        f"document.querySelector('#search [name=msg_id]').value = {json.dumps(msg_id)};"
        "document.querySelector('#search button').click(); true"
    )
    row = json.dumps(f'#tasks tr[data-msg-id="{msg_id}"]')
    page.wait_for(f"document.querySelector({row}) !== null")
    page.wait_for("document.getElementById('traceback').textContent.includes('not acceptable')")
    shown = text(page, "traceback")
    assert "ValueError" in shown and "fail_loudly" in shown
    assert msg_id in text(page, "detail-title")


def test_the_token_guards_the_page_and_the_api(cluster):
    _, rc = cluster
    base = rc.dashboard_link.split("?")[0]
    for path in ("", "api/state", "api/tasks?func=count_bars", "ws"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + path, timeout=10)
        assert e.value.code == 403
        assert "count_bars" not in e.value.read().decode()


def test_zpar_top_shows_the_same_engines(cluster):
    c, rc = cluster
    # the cluster lives in the ZPAR_DIR of the module's first test
    zpar_dir = Path(c.url_file).parents[3]
    assert (zpar_dir / "profile_default").is_dir()
    env = {**os.environ, "COLUMNS": "120", "ZPAR_DIR": str(zpar_dir)}
    out = subprocess.run(
        [sys.executable, "-m", "zpar", "top", "--once", "--cluster-id", c.cluster_id],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    assert f"engines {len(rc.ids)}" in out.stdout
    for eid in rc.ids:
        assert f" {eid} " in out.stdout


def test_status_start_and_notebook_carry_the_link(cluster):
    c, rc = cluster
    assert rc.dashboard_link.startswith("http://127.0.0.1:")
    assert "?token=" in rc.dashboard_link
    assert rc.dashboard_link == c.dashboard_link
    assert f'href="{rc.dashboard_link}"' in rc._repr_html_()
    assert f'href="{rc.dashboard_link}"' in c._repr_html_()
    assert rc.controller_status()["dashboard"] == rc.dashboard_link


def test_aborting_through_the_api_needs_the_cluster_key(cluster):
    from zpar.cluster.connection import read_connection_file

    c, rc = cluster
    base, token = rc.dashboard_link.split("?token=")
    key = read_connection_file(c.url_file).key
    dv = rc[rc.ids[0]]

    def nap():
        import time

        time.sleep(2)
        return "slept"

    running, queued = dv.apply_async(nap), dv.apply_async(nap)

    def post(body: dict) -> int:
        req = urllib.request.Request(
            base + "api/abort",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert post({"msg_ids": queued.msg_ids}) == 403  # the token alone only looks
    assert post({"msg_ids": queued.msg_ids, "key": key}) == 200
    with pytest.raises(zpar.TaskAborted):
        queued.get(timeout=60)
    assert running.get(timeout=60) == "slept"


def test_a_killed_engine_is_shown_dead(page, cluster):
    # last: it takes an engine away from the module's cluster
    _, rc = cluster
    pids = rc[:].apply_sync(os.getpid)
    victim, pid = rc.ids[-1], pids[-1]
    os.kill(pid, signal.SIGKILL)
    page.wait_for(
        f"document.querySelector('#engines tr[data-engine=\"{victim}\"]')?.dataset.state === 'dead'"
    )
    page.wait_for("document.getElementById('engine-count').textContent === '2'")
