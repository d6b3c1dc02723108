"""How the migration reads a job's data bytes from Redis: kept as they are when jsonb can hold
them, else stored made safe with the exact bytes beside them (what the facade returns)."""

from __future__ import annotations

import base64
import json

import pytest

from migration_tools.layout import RawJob
from migration_tools.transform import Transformer


def decode(raw: bytes) -> tuple[object, str | None, object, str]:
    """The stored data, the kept bytes (base64), the exact data of a job's raw bytes, and the
    JSON text the stored payload is verified against."""
    return Transformer(False, [])._decode(RawJob("bull", "q", "1", {}, raw))


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        (b'{"s":"a\\u0000b"}', {"s": "a\\0b"}),
        (b'{"s":"\\uD800"}', {"s": "?"}),
        (b'{"n":NaN}', {"n": None}),  # Python's json writes it; jsonb has no NaN
        (b"[Infinity]", [None]),
    ],
    ids=["nul", "lone-surrogate", "nan", "infinity"],
)
def test_data_jsonb_cannot_hold_keeps_its_exact_bytes(raw: bytes, stored: object) -> None:
    safe, kept, _, expected = decode(raw)
    assert kept is not None and base64.b64decode(kept) == raw
    assert safe == stored
    assert json.loads(expected) == stored  # verified against what is stored, not the raw text


@pytest.mark.parametrize(
    "raw",
    [b'{"a":1}', '{"emoji":"😀","é":"\\ud83d\\ude00"}'.encode(), b'{"s":"NaNa","k":"info"}'],
    ids=["plain", "non-ascii-and-a-valid-pair", "words-like-nan"],
)
def test_data_jsonb_can_hold_is_kept_as_it_is(raw: bytes) -> None:
    safe, kept, exact, expected = decode(raw)
    assert kept is None and safe == exact
    # verified against BullMQ's own text: PostgreSQL parses it, not a copy made here
    assert expected == raw.decode()
