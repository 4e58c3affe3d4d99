"""The workloads W1-W7 and W9, written once against the system adapters (bench.systems).

Each returns a dict of figures; times are medians over repetitions unless named otherwise.
"""

from __future__ import annotations

import gc
import os
import signal
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import psutil

from . import tasks

MB = 2**20


def w1_start(system: Any, n: int = 2) -> dict[str, Any]:
    t = time.perf_counter()
    system.start(n)
    return {"start_s": time.perf_counter() - t}


def w2_latency(system: Any, count: int) -> dict[str, Any]:
    for _ in range(min(100, count)):
        system.call(tasks.noop)
    ts = []
    for _ in range(count):
        t = time.perf_counter()
        system.call(tasks.noop)
        ts.append(time.perf_counter() - t)
    ts.sort()
    return {
        "rtt_median_us": statistics.median(ts) * 1e6,
        "rtt_p99_us": ts[int(0.99 * (len(ts) - 1))] * 1e6,
        "rtt_min_us": ts[0] * 1e6,
    }


def w3_tasks(system: Any, count: int) -> dict[str, Any]:
    client = psutil.Process()
    gc.collect()
    rss0 = client.memory_info().rss
    t = time.perf_counter()
    handles = [system.submit(tasks.noop) for _ in range(count)]
    for h in handles:
        system.result(h)
    dt = time.perf_counter() - t
    del handles
    gc.collect()
    return {
        "tasks_per_s": count / dt,
        "client_growth_mb": (client.memory_info().rss - rss0) / MB,
        "controller_mb": _rss(system.controller_processes()),
        "controller_pss_mb": _pss(system.controller_processes()),
    }


def w4_map(system: Any, count: int) -> dict[str, Any]:
    seq = range(count)
    t = time.perf_counter()
    out = system.map(tasks.identity, seq)
    default = count / (time.perf_counter() - t)
    assert list(out) == list(seq), "map returned wrong results"
    t = time.perf_counter()
    out = system.map(tasks.identity, seq, chunksize=100)
    chunked = count / (time.perf_counter() - t)
    assert list(out) == list(seq), "chunked map returned wrong results"
    return {"default_tasks_per_s": default, "chunk100_tasks_per_s": chunked}


def w5_bandwidth(system: Any, reps: int) -> dict[str, Any]:
    a = np.random.default_rng(0).random(100 * MB // 8)
    system.call(tasks.identity, a[:10])
    rt, pp = [], []
    for _ in range(reps):
        t = time.perf_counter()
        back = system.call(tasks.identity, a)
        rt.append(time.perf_counter() - t)
        assert back.shape == a.shape and back[-1] == a[-1]
        del back
        t = time.perf_counter()
        system.push("a", a)
        back = system.pull("a")
        pp.append(time.perf_counter() - t)
        del back
    return {
        "roundtrip_gbs": 2 * a.nbytes / min(rt) / 1e9,
        "push_pull_gbs": 2 * a.nbytes / min(pp) / 1e9,
    }


def w6_scatter_gather(system: Any, reps: int) -> dict[str, Any]:
    a = np.arange(10**7, dtype=np.float64)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        back = system.scatter_gather(a)
        ts.append(time.perf_counter() - t)
        assert len(back) == len(a) and back[-1] == a[-1]
    return {"scatter_gather_s": statistics.median(ts)}


def w7_memory(system: Any, count: int) -> dict[str, Any]:
    """Controller RSS after `count` more tasks (in batches, results consumed)."""
    procs = system.controller_processes()
    before = _rss(procs)
    hub_before = _rss(procs[:1])  # the hub (controller main process): the store's side
    done = 0
    batch = 2000
    while done < count:
        k = min(batch, count - done)
        handles = [system.submit(tasks.noop) for _ in range(k)]
        for h in handles:
            system.result(h)
        done += k
    return {
        "controller_mb_before": before,
        "controller_mb_after": _rss(system.controller_processes()),
        "controller_pss_mb_after": _pss(system.controller_processes()),
        "hub_mb_before": hub_before,
        "hub_mb_after": _rss(system.controller_processes()[:1]),
        "tasks": count,
    }


def w9_engine_death(system: Any) -> dict[str, Any]:
    """Seconds from SIGKILL of the engine running a task (load-balanced) until the client's
    result raises or arrives from a resubmission."""
    with tempfile.TemporaryDirectory() as d:
        marker = os.path.join(d, "started")
        h = system.submit(tasks.spin_once, marker, 60.0)
        deadline = time.monotonic() + 30
        while not os.path.exists(marker):
            if time.monotonic() > deadline:
                raise RuntimeError("the spinning task never started")
            time.sleep(0.005)
        with open(marker) as f:
            pid = int(f.read())
        t = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        try:
            outcome = f"result: {system.result(h, timeout=60)}"
        except Exception as e:
            outcome = f"raised {type(e).__name__}"
        return {"detect_s": time.perf_counter() - t, "outcome": outcome}


def _pss(procs: list[psutil.Process]) -> float | None:
    """Proportional set size: like RSS, but a page shared by n processes counts 1/n in
    each, so a multi-process controller's shared libraries count once (RSS counts them in
    every process). None where the platform cannot tell (no smaps)."""
    total = 0
    try:
        for p in procs:
            try:
                total += p.memory_full_info().pss
            except psutil.NoSuchProcess:
                pass
    except (AttributeError, psutil.AccessDenied):
        return None
    return total / MB


def _rss(procs: list[psutil.Process]) -> float:
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / MB
