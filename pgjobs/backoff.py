"""Backoff policies: pure functions from an attempt number to a delay in seconds."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Literal

from pgjobs.errors import InvalidOption

BackoffType = Literal["fixed", "exponential"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry number ``attempt`` (1-based: the attempt that just failed).

    ``fixed``: always ``delay``. ``exponential``: ``delay * 2 ** (attempt - 1)``, capped
    at ``max_delay``. ``jitter`` in [0, 1] spreads the delay uniformly over
    ``[d * (1 - jitter), d]`` so a burst of failures does not retry in lockstep.
    """

    type: BackoffType = "exponential"
    delay: float = 1.0
    max_delay: float | None = 3600.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.type not in ("fixed", "exponential"):
            raise InvalidOption(
                "backoff.type", f"must be 'fixed' or 'exponential', got {self.type!r}"
            )
        if not (
            isinstance(self.delay, int | float) and math.isfinite(self.delay) and self.delay >= 0
        ):
            raise InvalidOption(
                "backoff.delay", f"must be a finite number >= 0, got {self.delay!r}"
            )
        if self.max_delay is not None and not (
            isinstance(self.max_delay, int | float)
            and math.isfinite(self.max_delay)
            and self.max_delay >= 0
        ):
            raise InvalidOption(
                "backoff.max_delay", f"must be a finite number >= 0, got {self.max_delay!r}"
            )
        if not (isinstance(self.jitter, int | float) and 0.0 <= self.jitter <= 1.0):
            raise InvalidOption("backoff.jitter", f"must be between 0 and 1, got {self.jitter!r}")

    @classmethod
    def fixed(cls, delay: float, jitter: float = 0.0) -> Backoff:
        """The same ``delay`` (seconds) before every retry, shortened by up to ``jitter`` (0 to 1)
        of it at random. Bad values raise ``InvalidOption``."""
        return cls("fixed", delay, None, jitter)

    @classmethod
    def exponential(
        cls, delay: float, max_delay: float | None = 3600.0, jitter: float = 0.0
    ) -> Backoff:
        """``delay`` seconds before the first retry, doubled for each attempt after it, capped at
        ``max_delay`` (None: no cap), shortened by up to ``jitter`` (0 to 1) of it at random. Bad
        values raise ``InvalidOption``."""
        return cls("exponential", delay, max_delay, jitter)

    def seconds(self, attempt: int) -> float:
        """How long to wait before retrying after failed attempt number ``attempt`` (1 for the
        first)."""
        if self.type == "fixed":
            base = self.delay
        else:
            base = self.delay * 2.0 ** min(max(attempt - 1, 0), 62)
        if self.max_delay is not None:
            base = min(base, self.max_delay)
        if self.jitter:
            base *= 1.0 - self.jitter * random.random()
        return base

    def to_json(self) -> dict[str, Any]:
        """Every field (what the tracking API shows)."""
        return {
            "type": self.type,
            "delay": self.delay,
            "max_delay": self.max_delay,
            "jitter": self.jitter,
        }

    def stored_json(self) -> dict[str, Any]:
        """The fields that differ from the defaults (``{}`` for the default policy): what a
        job row holds. The default document was 97 of a default job row's 344 bytes, written
        to the table and the WAL for every job."""
        return {key: value for key, value in self.to_json().items() if _DEFAULTS[key] != value}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Backoff:
        """Read ``to_json`` or ``stored_json``: a missing field takes its default (a
        ``max_delay`` of None, no cap, is always written out)."""
        defaults = _DEFAULTS
        return cls(
            data.get("type", defaults["type"]),
            data.get("delay", defaults["delay"]),
            data.get("max_delay", defaults["max_delay"]),
            data.get("jitter", defaults["jitter"]),
        )


_DEFAULTS = Backoff().to_json()
