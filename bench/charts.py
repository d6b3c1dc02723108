"""Charts of the latest benchmark run for the documentation: `python -m bench.charts`.

Reads bench/results/latest.json (written by `./run bench` next to latest.md) and writes one
SVG per peer into docs/charts/: for each workload, the ratio of each pgjobs system to that
peer (higher is better: throughput over the peer's, the peer's latency or storage over the
system's), on a log scale with 1 marked. Ratios against the bench's two bases (BullMQ on
Redis, BullMQ on PostgreSQL) are the report's own; against other peers they are ratios of the
medians. Needs matplotlib (the ``docs`` extra).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "latest.json"
CHARTS = ROOT / "docs" / "charts"
SYSTEMS = (
    "pgjobs engine",
    "pgjobs engine, async",
    "bullmq_compat facade",
    "bullmq_compat facade, async",
)
PEERS = ("bullmq on Redis", "bullmq on PostgreSQL", "pgqueuer")
LOWER_IS_BETTER = ("ms", "dead tuples", "MiB")


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def ratios(figures: dict[str, Any], peer: str) -> dict[str, dict[str, float | None]]:
    """ratios[workload][system] of each pgjobs system to ``peer``, None where there is none."""
    if peer in figures["ratios"]:
        stored: dict[str, dict[str, float | None]] = figures["ratios"][peer]
        return {w: {s: row.get(s) for s in SYSTEMS} for w, row in stored.items()}
    out: dict[str, dict[str, float | None]] = {}
    for workload in figures["workloads"]:
        values = workload["values"]
        base = values.get(peer)
        row: dict[str, float | None] = {}
        for system in SYSTEMS:
            mine = values.get(system)
            if not base or not mine or not base["median"] or not mine["median"]:
                row[system] = None
            elif workload["unit"] in LOWER_IS_BETTER:
                row[system] = base["median"] / mine["median"]
            else:
                row[system] = mine["median"] / base["median"]
        out[workload["workload"]] = row
    return out


def chart(figures: dict[str, Any], peer: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "pgjobs"  # the same SVG for the same figures
    table = ratios(figures, peer)
    workloads = [w for w, row in table.items() if any(v for v in row.values())]
    height = 0.8 / len(SYSTEMS)
    fig, ax = plt.subplots(figsize=(9, 0.55 * len(workloads) + 2.2))
    for i, system in enumerate(SYSTEMS):
        ys = [
            len(workloads) - 1 - n + (len(SYSTEMS) / 2 - i - 0.5) * height
            for n in range(len(workloads))
        ]
        xs = [table[w][system] or 0.0 for w in workloads]
        bars = ax.barh(ys, xs, height=height, label=system)
        for bar, x in zip(bars, xs, strict=True):
            if x:
                ax.annotate(
                    f"{x:.2f}×",
                    (x, bar.get_y() + bar.get_height() / 2),
                    xytext=(3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=7,
                )
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(workloads)), list(reversed(workloads)), fontsize=8)
    ax.set_xlabel(f"ratio to {peer} (log scale; higher is better, 1× marked)")
    ax.set_title(f"pgjobs against {peer}, run of {figures['run']['date']}", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    ax.grid(axis="x", which="both", linewidth=0.3)
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.charts", description=__doc__)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=CHARTS)
    args = parser.parse_args(argv)
    figures = json.loads(args.results.read_text(encoding="utf-8"))
    args.out.mkdir(parents=True, exist_ok=True)
    for peer in PEERS:
        if peer in figures["systems"]:
            path = args.out / f"against-{slug(peer)}.svg"
            chart(figures, peer, path)
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
