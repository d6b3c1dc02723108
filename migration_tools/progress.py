"""Progress: a bar on a terminal, plain lines otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total = total  # may grow as queues are found
        self.label = label
        self.stream = stream or sys.stderr
        self.done = 0
        self.tty = self.stream.isatty()
        self._last_line = -1
        self._start = time.monotonic()

    def advance(self, n: int) -> None:
        self.done += n
        pct = min(100, self.done * 100 // max(self.total, 1))
        rate = self.done / max(time.monotonic() - self._start, 1e-9)
        if self.tty:
            bar = "#" * (pct // 4) + "." * (25 - pct // 4)
            self.stream.write(
                f"\r{self.label} [{bar}] {pct:3d}% {self.done}/{self.total} ({rate:,.0f}/s)"
            )
            self.stream.flush()
        elif pct // 10 != self._last_line or self.done >= self.total:
            self._last_line = pct // 10
            self.stream.write(f"{self.label}: {self.done}/{self.total} jobs ({pct}%)\n")

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
