"""Run the benchmark: `./run bench [--quick] [--systems engine,engine-async,facade,...]
[--workloads enqueue_single,...]`.

Systems are interleaved (A B A B ...) for 3 repetitions so that a noisy neighbour hits all
of them alike; each figure is the median with min-max. Results go to stdout and to
bench/results/latest.md and, with the same figures for `python -m bench.charts`, latest.json
(latest-partial.* for a run of some workloads). Needs a PostgreSQL
(PGJOBS_DSN, a local server on 127.0.0.1:5432, or the embedded one, see pgjobs.devserver)
and, for the BullMQ peer, Redis on 127.0.0.1:6379 (start one with `redis-server --daemonize
yes --save ''`). The bounds of bench/bounds.py run only when named in --systems.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.bounds import BOUNDS
from bench.systems import SYSTEMS
from pgjobs.devserver import find_or_start_postgres

RESULTS = Path(__file__).with_name("results")


STORAGE_AFTER = "process 10k no-op, concurrency 10"
DEAD = "dead tuples right after processing 10k (c=10)"
SIZE = "tables' size right after processing 10k (c=10)"


def workloads(quick: bool) -> list[tuple[str, str, tuple[Any, ...], str]]:
    scale = 5 if quick else 1
    return [
        ("enqueue one by one", "enqueue_single", (3000 // scale,), "jobs/s"),
        ("enqueue, 10 concurrent tasks", "enqueue_concurrent", (5000 // scale, 10), "jobs/s"),
        ("enqueue bulk (1,000 per call)", "enqueue_bulk", (20000 // scale, 1000), "jobs/s"),
        ("process 10k no-op, concurrency 1", "process", (10000 // scale, 1), "jobs/s"),
        ("process 10k no-op, concurrency 10", "process", (10000 // scale, 10), "jobs/s"),
        ("process 10k no-op, concurrency 50", "process", (10000 // scale, 50), "jobs/s"),
        ("enqueue-to-start latency (idle worker)", "latency", (200 // scale,), "ms"),
        ("flows (1 parent + 10 children): add", "flow_add", (200 // scale, 10), "flows/s"),
        ("flows (1 parent + 10 children): process", "flow_process", (200 // scale, 10), "jobs/s"),
    ]


def answers(system: Any, method: str) -> bool:
    """Whether ``system`` runs workload ``method``: a system may name the only ones it runs
    (``workloads``, bench/bounds.py); it has no figure for the others."""
    return method in getattr(system, "workloads", (method,))


def _ratio(numerator: list[float], denominator: list[float]) -> str:
    top = [v for v in numerator if not math.isnan(v)]
    bottom = [v for v in denominator if not math.isnan(v)]
    if not top or not bottom or statistics.median(bottom) == 0 or statistics.median(top) == 0:
        return "—"  # nothing to compare (Redis has no dead tuples)
    return f"{statistics.median(top) / statistics.median(bottom):.2f}×"


def fmt(values: list[float]) -> str:
    clean = [v for v in values if not math.isnan(v)]
    if not clean:
        return "n/a"
    return f"{statistics.median(clean):,.1f} ({min(clean):,.1f}–{max(clean):,.1f})"


def summary(values: list[float]) -> dict[str, float] | None:
    """The median with min and max of ``values`` (as ``fmt`` shows them), None for none."""
    clean = [v for v in values if not math.isnan(v)]
    if not clean:
        return None
    return {"median": statistics.median(clean), "min": min(clean), "max": max(clean)}


def latency_summary(pairs: list[tuple[float, float]]) -> dict[str, Any] | None:
    """``summary`` of the medians, with the ``summary`` of the p95s under "p95"."""
    median = summary([v[0] for v in pairs])
    return median and {**median, "p95": summary([v[1] for v in pairs])}


def ratio(numerator: list[float], denominator: list[float]) -> float | None:
    """``_ratio`` as a number (unrounded): None where it shows "—"."""
    top, bottom = summary(numerator), summary(denominator)
    if top is None or bottom is None or top["median"] == 0 or bottom["median"] == 0:
        return None
    return top["median"] / bottom["median"]


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--quick", action="store_true", help="a fifth of the work, for a smoke run")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument(
        "--workloads",
        default=",".join(method for _, method, _, _ in workloads(False)),
        help="the System methods to run (enqueue_single, process, ...)",
    )
    args = parser.parse_args(argv)
    known = SYSTEMS | BOUNDS
    unknown = [n for n in args.systems.split(",") if n not in known]
    if unknown:
        parser.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(known)}")
    chosen = set(args.workloads.split(","))
    unknown = sorted(chosen - {method for _, method, _, _ in workloads(False)})
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}")
    plan = [w for w in workloads(args.quick) if w[1] in chosen]
    dsn = find_or_start_postgres()
    systems = [known[name]() for name in args.systems.split(",")]
    for system in systems:
        await system.setup(dsn)
    # results[workload][system] -> list of values (latency: (median, p95) pairs)
    results: dict[str, dict[str, list[Any]]] = {}
    try:
        for rep in range(args.reps):
            for label, method, params, unit in plan:
                for system in systems:
                    if not answers(system, method):
                        results.setdefault(label, {}).setdefault(system.name, []).append(
                            (math.nan, math.nan) if unit == "ms" else math.nan
                        )
                        if label == STORAGE_AFTER:
                            for row in (DEAD, SIZE):
                                results.setdefault(row, {}).setdefault(system.name, []).append(
                                    math.nan
                                )
                        continue
                    value = await getattr(system, method)(*params)
                    results.setdefault(label, {}).setdefault(system.name, []).append(value)
                    shown = (
                        f"{value[0]:.2f}/{value[1]:.2f} ms"
                        if unit == "ms"
                        else f"{value:,.0f} {unit}"
                    )
                    print(f"rep {rep + 1}  {label:<42} {system.name:<20} {shown}", flush=True)
                    if label == STORAGE_AFTER:
                        dead, mib = await system.storage()
                        results.setdefault(DEAD, {}).setdefault(system.name, []).append(dead)
                        results.setdefault(SIZE, {}).setdefault(system.name, []).append(mib)
                        print(f"rep {rep + 1}  {'  storage':<42} {system.name:<20} "
                              f"{dead:,.0f} dead tuples, {mib:,.1f} MiB", flush=True)  # fmt: skip
    finally:
        for system in systems:
            await system.teardown()

    names = [s.name for s in systems]
    rows = [(label, unit) for label, _, _, unit in plan]
    if STORAGE_AFTER in results:
        rows += [(DEAD, "dead tuples"), (SIZE, "MiB")]
    now = datetime.now(UTC)
    figures: dict[str, Any] = {
        "run": {
            "date": f"{now:%Y-%m-%d %H:%M} UTC",
            "host": platform.node() or "host",
            "cores": os.cpu_count(),
            "python": f"{platform.python_implementation()} {platform.python_version()}",
            "repetitions": args.reps,
        },
        "systems": names,
        "workloads": [],
        "ratios": {},
    }
    lines = [
        f"Run {now:%Y-%m-%d %H:%M} UTC on {platform.node() or 'host'}: "
        f"{os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}, "
        f"{args.reps} interleaved repetitions, median (min–max).",
        "",
        "| workload | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for label, unit in rows:
        row = results[label]
        if unit == "ms":
            cells = [
                fmt([v[0] for v in row[n]]) + " ms, p95 " + fmt([v[1] for v in row[n]])
                for n in names
            ]
            values = {n: latency_summary(row[n]) for n in names}
        else:
            cells = [fmt(row[n]) + f" {unit}" for n in names]
            values = {n: summary(row[n]) for n in names}
        figures["workloads"].append({"workload": label, "unit": unit, "values": values})
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    # Ratio tables: every other system against BullMQ on Redis, then on PostgreSQL (those that
    # ran; else against the last system).
    bases = [b for b in ("bullmq on Redis", "bullmq on PostgreSQL") if b in names] or [names[-1]]
    for base in bases:
        others = [n for n in names if n not in bases]
        lines += [
            "",
            f"Against {base} (higher is better):",
            "",
            "| workload | " + " | ".join(f"{n} / {base}" for n in others) + " |",
            "|---" * (len(others) + 1) + "|",
        ]
        against: dict[str, dict[str, float | None]] = {}
        for label, unit in rows:
            row = results[label]
            if unit in ("dead tuples", "MiB"):  # lower is better: base / system
                pairs = [(row[base], row[n]) for n in others]
            elif unit == "ms":  # latency: base / system, so higher is better here too
                pairs = [([v[0] for v in row[base]], [v[0] for v in row[n]]) for n in others]
            else:
                pairs = [(row[n], row[base]) for n in others]
            lines.append(f"| {label} | " + " | ".join(_ratio(*pair) for pair in pairs) + " |")
            against[label] = {n: ratio(*pair) for n, pair in zip(others, pairs, strict=True)}
        figures["ratios"][base] = against
    lines.append("")
    lines.append(
        "Ratios of medians; for latency and storage the base's median over the system's."
        " Storage is read right after the concurrency-10 run, before any vacuum: dead tuples"
        " counted by pgstattuple, size with indexes, over every table of the system; for Redis,"
        ' MEMORY USAGE of the queue\'s keys. "async" systems commit enqueues and outcomes with'
        ' synchronous_commit off (durability="async").'
    )
    report = "\n".join(lines)
    print("\n" + report)
    RESULTS.mkdir(exist_ok=True)
    # a run of some workloads only leaves the full run's report in place
    output = "latest" if len(plan) == len(workloads(args.quick)) else "latest-partial"
    (RESULTS / f"{output}.md").write_text(report + "\n", encoding="utf-8")
    (RESULTS / f"{output}.json").write_text(
        json.dumps(figures, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    asyncio.run(main())
