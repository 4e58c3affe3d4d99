"""The comparison table: one row per figure, one column per system, zpar vs the best peer."""

from __future__ import annotations

from typing import Any

#: (workload, figure, unit, higher is better, zpar's target)
ROWS: list[tuple[str, str, str, bool, float | None]] = [
    ("W1", "start_s", "s", False, 0.5),
    ("W2", "rtt_median_us", "us", False, 320),
    ("W2", "rtt_p99_us", "us", False, 1000),
    ("W3", "tasks_per_s", "tasks/s", True, 10_000),
    ("W3", "cpu_us_per_task_total", "us", False, 200),
    ("W3", "client_growth_mb", "MB", False, 30),
    ("W3", "controller_mb", "MB", False, None),
    ("W3", "controller_pss_mb", "MB", False, 60),
    ("W3x8", "tasks_per_s", "tasks/s", True, None),
    ("W3x8", "cpu_us_per_task_total", "us", False, None),
    ("W4", "default_tasks_per_s", "tasks/s", True, 2_000_000),
    ("W4", "chunk100_tasks_per_s", "tasks/s", True, 400_000),
    ("W5", "roundtrip_gbs", "GB/s", True, 1.3),
    ("W5", "push_pull_gbs", "GB/s", True, None),
    ("W6", "scatter_gather_s", "s", False, 0.15),
    ("W7", "controller_pss_mb_before", "MB", False, None),
    ("W7", "pss_mb_at_5000", "MB", False, 60),
    ("W7", "pss_mb_at_10000", "MB", False, 60),
    ("W7", "pss_mb_at_20000", "MB", False, 60),
    ("W7", "pss_mb_at_100000", "MB", False, 60),
    ("W7", "pss_mb_at_1000000", "MB", False, 60),
    ("W7", "pss_growth_mb", "MB", False, None),
    ("W7", "controller_mb_after", "MB", False, None),
    ("W7", "hub_mb_before", "MB", False, None),
    ("W7", "hub_mb_after", "MB", False, None),
    ("W7", "client_mb_after", "MB", False, None),
    ("W8", "relay_rtt_us", "us", False, None),
    ("W8", "relay_msgs_per_s", "msgs/s", True, None),
    ("W8", "bw_tcp_gbs", "GB/s", True, None),
    ("W8", "bw_ipc_gbs", "GB/s", True, None),
    ("W9", "detect_s", "s", False, 3.0),
]
TARGETS = {(w, f): t for w, f, _, _, t in ROWS}
PEERS = ["ipyparallel", "dask", "ray"]


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v[:18]
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def format_table(rows: list[dict], targets: dict) -> str:
    got: dict[tuple[str, str, str], Any] = {}
    systems: list[str] = []
    for r in rows:
        if r["system"] not in systems:
            systems.append(r["system"])
        for k, v in r["figures"].items():
            got[(r["workload"], k, r["system"])] = v
    head = ["row", "unit", *systems, "target", "zpar vs best peer"]
    lines = [head]
    for w, fig, unit, higher, target in ROWS:
        vals = [got.get((w, fig, s)) for s in systems]
        if all(v is None for v in vals):
            continue
        ratio = "-"
        z = got.get((w, fig, "zpar"))
        peers = [got.get((w, fig, p)) for p in PEERS]
        peers = [p for p in peers if isinstance(p, int | float) and p > 0]
        if isinstance(z, int | float) and z > 0 and peers:
            best = max(peers) if higher else min(peers)
            factor = z / best if higher else best / z
            ratio = f"{factor:.2f}x {'better' if factor >= 1 else 'worse'}"
        tgt = "-" if target is None else f"{'>=' if higher else '<='} {_fmt(target)}"
        if isinstance(z, int | float) and target is not None:
            met = z >= target if higher else z <= target
            tgt += " ok" if met else " MISS"
        lines.append([f"{w} {fig}", unit, *[_fmt(v) for v in vals], tgt, ratio])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    out = []
    for i, line in enumerate(lines):
        out.append(" | ".join(str(c).ljust(widths[j]) for j, c in enumerate(line)))
        if i == 0:
            out.append("-+-".join("-" * w for w in widths))
    return "\n".join(out)


def format_cpu(rows: list[dict]) -> str:
    """Where W3's CPU goes: microseconds of CPU per task in each process (user + system,
    all its threads), one line per system and W3 row."""
    out = []
    for r in rows:
        cpu = r["figures"].get("cpu_us_per_task")
        if r["workload"] not in ("W3", "W3x8") or not isinstance(cpu, dict):
            continue
        engines = {k: v for k, v in cpu.items() if k.startswith("engine ")}
        others = {k: v for k, v in cpu.items() if k not in engines}
        parts = [f"{k} {v:.0f}" for k, v in others.items()]
        if engines:
            each = " / ".join(f"{v:.0f}" for v in engines.values())
            parts.append(f"{len(engines)} engines {sum(engines.values()):.0f} ({each})")
        total = r["figures"].get("cpu_us_per_task_total", 0)
        out.append(f"{r['system']} {r['workload']}: {total:.0f} us/task = " + ", ".join(parts))
    return "\n".join(out)
