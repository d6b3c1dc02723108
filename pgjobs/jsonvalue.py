"""JSON encoding that PostgreSQL's jsonb accepts, with errors that name the offending field."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import pydantic_core

# jsonb rejects the NUL character and unpaired UTF-16 surrogates; json.dumps lets both through.
_JSONB_UNSAFE = re.compile("[\x00\ud800-\udfff]")


class NotJson(ValueError):
    """``value`` cannot be stored as jsonb; ``path`` says where (``a.b[2]``, empty for the root)."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path or 'value'}: {message}")


def _locate(value: Any, path: str) -> NotJson | None:
    if isinstance(value, str):
        if _JSONB_UNSAFE.search(value):
            return NotJson(
                path, "contains a NUL character or an unpaired surrogate, which jsonb rejects"
            )
        return None
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else NotJson(path, f"{value!r} is not a JSON number")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return NotJson(path, f"object key {key!r} is not a string")
            child = f"{path}.{key}" if path else key
            found = _locate(key, child) or _locate(item, child)
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _locate(item, f"{path}[{index}]")
            if found:
                return found
        return None
    return NotJson(path, f"a {type(value).__name__} is not JSON")


def non_finite(value: Any, path: str = "") -> NotJson | None:
    """Where ``value`` (Python objects, before any JSON conversion) holds a NaN or an infinity,
    which a JSON conversion would silently turn into null."""
    if isinstance(value, float):
        return None if math.isfinite(value) else NotJson(path, f"{value!r} is not a JSON number")
    if isinstance(value, dict):
        for key, item in value.items():
            found = non_finite(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = non_finite(item, f"{path}[{index}]")
            if found:
                return found
    return None


@dataclass(frozen=True, slots=True)
class JsonText:
    """A job input given as JSON text you already encoded (``json.dumps``): a kind whose input
    is ``Any`` (and that names and groups jobs without reading it) stores the text as it is,
    after checking that it is JSON jsonb can hold; any other kind parses and validates it. It
    saves parsing and re-encoding data that arrives as JSON."""

    text: str


def jsonb_unsafe(text: str) -> bool:
    """Whether JSON ``text`` holds what jsonb rejects: an escaped NUL, a NUL or a lone surrogate."""
    return "\\u0000" in text or _JSONB_UNSAFE.search(text) is not None


_COMPACT = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))
"""What ``json.dumps`` with these arguments builds for every call (an encoder object), once."""


def dumps(value: Any) -> str:
    """Encode ``value`` as compact JSON that jsonb will store unchanged, or raise NotJson."""
    try:
        text = _COMPACT.encode(value)
    except (TypeError, ValueError):
        text = None
    if text is None or jsonb_unsafe(text):
        problem = _locate(value, "")
        if problem is not None:
            raise problem
        if text is None:  # pragma: no cover - _locate covers every reason json.dumps fails
            raise NotJson("", "not JSON-serialisable")
    return text


def loads(text: str | None) -> Any:
    """JSON text (as PostgreSQL renders jsonb) as Python values: pydantic-core's parser (about
    three times json's speed; the same values for every text jsonb renders), json's for
    anything it refuses (a lone surrogate escape, which jsonb never holds)."""
    if text is None:
        return None
    try:
        return pydantic_core.from_json(text)
    except ValueError:
        return json.loads(text)


def strip_nul(text: str) -> str:
    """Free text (log lines, error messages) as PostgreSQL text can hold it: NUL shown as
    ``\\0``, unpaired surrogates replaced."""
    return text.replace("\x00", "\\0").encode("utf-8", "replace").decode("utf-8")


def jsonb_problem(value: Any) -> NotJson | None:
    """Why jsonb cannot hold ``value`` unchanged (a NUL, a lone surrogate, NaN, a value that is
    not JSON), naming where; None when it can."""
    try:
        dumps(value)
    except NotJson as exc:
        return exc
    return None


def jsonb_safe(value: Any) -> Any:
    """``value`` with every string and key made storable (``strip_nul``) and every NaN or
    infinity made null (as JavaScript's JSON.stringify writes them), recursively."""
    if isinstance(value, str):
        return strip_nul(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list | tuple):
        return [jsonb_safe(v) for v in value]
    if isinstance(value, dict):
        return {jsonb_safe(k): jsonb_safe(v) for k, v in value.items()}
    return value
