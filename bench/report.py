"""The comparison table: one row per figure, one column per system, zpar vs the best peer."""

from __future__ import annotations

import json
from pathlib import Path
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
    # ipyparallel semantics: one task per element, as its default chunksize=1
    ("W4", "default_tasks_per_s", "tasks/s", True, 400_000),
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
    ("W10", "skew_makespan_s", "s", False, None),
    ("W10", "skew_ideal_s", "s", False, None),
    ("W10", "skew_over_ideal", "x", False, 1.10),
    ("W10", "uneven_total_s", "s", False, None),
    ("W10", "uneven_ideal_s", "s", False, None),
    ("W10", "uneven_first_s", "s", False, None),
    # python -m bench.comm: engine communicators against mpi4py + MPICH, ranks on one host
    # (targets are relative to mpi4py in the same run: docs/benchmarks.md)
    ("comm n=2", "pingpong_8B_us", "us", False, None),
    ("comm n=2", "pingpong_obj_us", "us", False, None),
    ("comm n=2", "allreduce_8B_us", "us", False, None),
    ("comm n=2", "bandwidth_64MB_GBps", "GB/s", True, None),
    ("comm n=4", "pingpong_8B_us", "us", False, None),
    ("comm n=4", "pingpong_obj_us", "us", False, None),
    ("comm n=4", "allreduce_8B_us", "us", False, None),
    ("comm n=4", "bandwidth_64MB_GBps", "GB/s", True, None),
]
TARGETS = {(w, f): t for w, f, _, _, t in ROWS}
PEERS = ["ipyparallel", "dask", "ray", "mpi4py"]


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


def versus_best_peer(z: Any, peers: list[Any], higher: bool) -> str:
    """zpar's figure against the best peer's: "1.50x better" (empty when either is missing)."""
    peers = [p for p in peers if isinstance(p, int | float) and p > 0]
    if not (isinstance(z, int | float) and z > 0 and peers):
        return ""
    best = max(peers) if higher else min(peers)
    factor = z / best if higher else best / z
    return f"{factor:.2f}x {'better' if factor >= 1 else 'worse'}"


def against_target(z: Any, target: float | None, higher: bool, marks: tuple[str, ...]) -> str:
    """The target and whether zpar meets it; ``marks``: (at least, at most, ok, missed)."""
    if target is None:
        return ""
    out = f"{marks[0] if higher else marks[1]} {_fmt(target)}"
    if isinstance(z, int | float):
        out += f" {marks[2]}" if (z >= target if higher else z <= target) else f" {marks[3]}"
    return out


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
        z = got.get((w, fig, "zpar"))
        ratio = versus_best_peer(z, [got.get((w, fig, p)) for p in PEERS], higher) or "-"
        tgt = against_target(z, target, higher, (">=", "<=", "ok", "MISS")) or "-"
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


#: the generated block of docs/benchmarks.md lies between these two lines
DOCS_BEGIN = (
    "<!-- current figures: generated by `python -m bench.report` from bench/results.jsonl -->"
)
DOCS_END = "<!-- end of generated figures -->"
#: the systems of the docs table, in its column order
DOCS_SYSTEMS = ["zpar", "ipyparallel", "dask", "ray", "zmq", "mpi4py"]


def newest(results: list[dict]) -> dict[tuple[str, str], dict]:
    """The newest result of each (system, workload) in results.jsonl's lines (a later line
    of the same date wins: the file is appended to)."""
    out: dict[tuple[str, str], dict] = {}
    for r in results:
        if "error" in r.get("figures", {}):
            continue
        key = (r["system"], r["workload"])
        if key not in out or r["date"] >= out[key]["date"]:
            out[key] = r
    return out


def markdown_table(results: list[dict]) -> str:
    """docs/benchmarks.md's opening table: each figure's newest value for every system, with
    the run it comes from (date, commit, quick/full/scale), zpar's target and its ratio
    against the best peer."""
    latest = newest(results)
    systems = [s for s in DOCS_SYSTEMS if any(k[0] == s for k in latest)]
    runs: dict[tuple[str, str, str], str] = {}

    def run_of(r: dict) -> str:
        key = (r["date"][:10], r["commit"], r.get("command") or f"python -m bench --{r['scale']}")
        return runs.setdefault(key, f"[{len(runs) + 1}]")

    head = ["row", "unit", *systems, "target", "zpar vs best peer"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for w, fig, unit, higher, target in ROWS:
        cells = []
        for s in systems:
            r = latest.get((s, w))
            v = r["figures"].get(fig) if r else None
            cells.append("" if v is None else f"{_fmt(v)} {run_of(r)}")
        if not any(cells):
            continue
        zr = latest.get(("zpar", w))
        z = zr["figures"].get(fig) if zr else None
        peers = [latest.get((p, w)) for p in PEERS]
        ratio = versus_best_peer(z, [p["figures"].get(fig) for p in peers if p], higher)
        tgt = against_target(z, target, higher, ("≥", "≤", "ok", "**miss**"))
        lines.append("| " + " | ".join([f"{w} {fig}", unit, *cells, tgt, ratio]) + " |")
    notes = [
        f"{tag} {date}, commit `{commit}`, `{command}`"
        for (date, commit, command), tag in runs.items()
    ]
    return "\n".join(lines) + "\n\n" + "; ".join(notes) + "."


def update_docs(doc: Path, results_file: Path) -> bool:
    """Rewrite the generated block of ``doc`` from ``results_file``; True if it changed."""
    results = [json.loads(line) for line in results_file.read_text().splitlines() if line.strip()]
    text = doc.read_text()
    start, end = text.index(DOCS_BEGIN) + len(DOCS_BEGIN), text.index(DOCS_END)
    new = text[:start] + "\n" + markdown_table(results) + "\n" + text[end:]
    if new != text:
        doc.write_text(new)
    return new != text


ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results.jsonl"

if __name__ == "__main__":
    print("updated" if update_docs(DOC, RESULTS) else "unchanged", DOC)
