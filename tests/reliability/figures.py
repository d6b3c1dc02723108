"""The reliability suite's figures table.

Each fault scenario records what it injected and what it measured; with
``pytest --reliability-report`` the session rewrites the table between the markers of
docs/guarantees.md (``./run reliability`` does this), so the documentation shows what the
suite itself measured, on the machine it names.
"""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

START = "<!-- reliability-figures:start -->"
END = "<!-- reliability-figures:end -->"


@dataclass(frozen=True, slots=True)
class Figure:
    scenario: str
    faults: str
    jobs: int
    lost: int
    duplicated: str
    recovery: str


RECORDED: list[Figure] = []


def record(figure: Figure) -> None:
    RECORDED.append(figure)


def seconds(values: list[float]) -> str:
    """Median and maximum of recovery times (each one when three or fewer), "-" for none."""
    if not values:
        return "-"
    ordered = sorted(values)
    if len(ordered) <= 3:
        return ", ".join(f"{v:.2f} s" for v in ordered)
    return f"median {ordered[len(ordered) // 2]:.2f} s, max {ordered[-1]:.2f} s"


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def render(figures: list[Figure], server_version: str) -> str:
    lines = [
        f"Measured by `./run reliability` on {datetime.now(UTC):%Y-%m-%d}, {_machine()}, "
        f"PostgreSQL {server_version}.",
        "",
        "| scenario | faults injected | jobs | lost | duplicated | recovery, or bounds under load |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {f.scenario} | {f.faults} | {f.jobs:,} | {f.lost} | {f.duplicated} | {f.recovery} |"
        for f in sorted(figures, key=lambda f: f.scenario)
    ]
    return "\n".join(lines)


def write_into(page: Path, table: str) -> None:
    """Replace the text between the markers; refuse (loudly) if they are missing."""
    text = page.read_text()
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise RuntimeError(f"{page} has no {START} ... {END} section to write the figures into")
    page.write_text(pattern.sub(lambda _m: f"{START}\n{table}\n{END}", text))
