"""Typed job kinds and the registry a worker and a producer share.

A kind is a stable string that routes a job to its handler, with an input type that
pydantic validates on enqueue and again on claim, and its defaults (queue, attempts,
backoff, deferral budget, priority, how to name and group a job from its input).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeGuard, TypeVar

import pydantic
import pydantic_core

from pgjobs import jsonvalue, validation
from pgjobs.backoff import Backoff
from pgjobs.errors import DuplicateKind, InvalidJobInput, InvalidOption, UnknownKind
from pgjobs.models import Keep

if TYPE_CHECKING:
    from pgjobs.context import JobContext

InputT = TypeVar("InputT")
Handler = Callable[["JobContext", Any], Awaitable[Any]]

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 3


def _first_error(exc: pydantic.ValidationError) -> tuple[str, str]:
    errors = exc.errors(include_url=False)
    first = errors[0]
    field_path = ".".join(str(part) for part in first["loc"])
    message = first["msg"]
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more error(s))"
    return field_path, message


def _stored_as_is(text: str | None) -> TypeGuard[str]:
    """Whether pydantic's JSON is the stored text: it writes NaN and infinities as null, and
    NUL as an escape jsonb refuses, so text with neither is the answer; otherwise the careful
    path (``Kind._encode_carefully``) finds and names the field."""
    return text is not None and "null" not in text and not jsonvalue.jsonb_unsafe(text)


def _batch_error(kind: str, exc: pydantic.ValidationError) -> InvalidJobInput:
    """A list adapter's error as InvalidJobInput: the first bad input's position and field."""
    first = exc.errors(include_url=False)[0]
    loc = first["loc"]
    if not loc or not isinstance(loc[0], int):  # not a list at all
        return InvalidJobInput(kind, "", f"a batch must be a JSON array: {first['msg']}")
    field_path = ".".join(str(part) for part in loc[1:])
    return InvalidJobInput(kind, field_path, first["msg"], index=loc[0])


@dataclass(frozen=True, eq=False)
class Kind(Generic[InputT]):
    """One job kind. Build it with ``Registry.kind`` (decorator) or ``Registry.declare``."""

    name: str
    input: Any
    handler: Handler | None = None
    queue: str = DEFAULT_QUEUE
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = field(default_factory=Backoff)
    max_deferrals: int = 0
    priority: int = 0
    keep_completed: Keep | None = None
    keep_dead: Keep | None = None
    job_name: Callable[[InputT], str] | None = None
    group_key: Callable[[InputT], str | None] | None = None
    adapter: pydantic.TypeAdapter[InputT] = field(init=False, repr=False)
    backoff_json: str = field(init=False, repr=False)
    """The stored JSON of ``backoff`` (``Backoff.stored_json``), computed once."""
    retention_json: str | None = field(init=False, repr=False)
    """The stored JSON of ``keep_completed``/``keep_dead`` (None: neither), computed once."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or len(self.name) > 200:
            raise InvalidOption(
                "kind", f"a kind is a non-empty string of at most 200 characters, got {self.name!r}"
            )
        validation.queue(self.queue)
        validation.max_attempts(self.max_attempts)
        validation.max_deferrals(self.max_deferrals)
        validation.priority(self.priority)
        retention = validation.retention(self.keep_completed, self.keep_dead)
        object.__setattr__(self, "backoff", validation.backoff(self.backoff))
        try:
            adapter = pydantic.TypeAdapter(self.input)
        except pydantic.PydanticUserError as exc:
            raise InvalidOption(
                "input", f"kind {self.name!r}: not a type pydantic can validate: {exc}"
            ) from None
        object.__setattr__(self, "adapter", adapter)
        object.__setattr__(self, "backoff_json", jsonvalue.dumps(self.backoff.stored_json()))
        object.__setattr__(
            self, "retention_json", jsonvalue.dumps(retention) if retention else None
        )

    def validate(self, value: Any) -> InputT:
        """The typed input, or InvalidJobInput naming this kind and the first bad field. A
        ``JsonText`` is parsed by the input type, or kept as text by a kind that stores its
        input untouched (input ``Any``, no naming or grouping function): then only its syntax
        is checked here, and jsonb's limits by ``encode``."""
        if isinstance(value, jsonvalue.JsonText):
            if not self._keeps_text:
                return self.validate_json(value.text)
            try:
                pydantic_core.from_json(value.text, allow_inf_nan=False)
            except ValueError as exc:
                raise InvalidJobInput(self.name, "", f"not JSON text: {exc}") from None
            return value  # type: ignore[return-value]  # stored as it is by encode
        try:
            return self.adapter.validate_python(value)
        except pydantic.ValidationError as exc:
            raise InvalidJobInput(self.name, *_first_error(exc)) from None

    @property
    def _keeps_text(self) -> bool:
        return self.input is Any and self.job_name is None and self.group_key is None

    def validate_json(self, text: str) -> InputT:
        """The input parsed from JSON ``text`` and validated by the kind's model; raises
        ``InvalidJobInput`` naming the kind and the field."""
        try:
            return self.adapter.validate_json(text)
        except pydantic.ValidationError as exc:
            raise InvalidJobInput(self.name, *_first_error(exc)) from None

    def encode(self, value: InputT) -> str:
        """The typed input as jsonb-safe JSON text."""
        if isinstance(value, jsonvalue.JsonText):
            if jsonvalue.jsonb_unsafe(value.text):
                raise InvalidJobInput(
                    self.name,
                    "",
                    "holds a NUL character or a lone surrogate, which jsonb cannot store",
                )
            return value.text
        try:
            text = self.adapter.dump_json(value).decode()
        except pydantic_core.PydanticSerializationError:
            text = None
        if _stored_as_is(text):
            return text
        return self._encode_carefully(value)

    def _encode_carefully(self, value: InputT) -> str:
        try:
            plain = self.adapter.dump_python(value, mode="json")
        except pydantic_core.PydanticSerializationError as exc:
            raise InvalidJobInput(self.name, "", f"not JSON-serialisable: {exc}") from None
        if None in _scalars(plain):  # JSON mode turns NaN and infinities into null: look again
            bad = jsonvalue.non_finite(self.adapter.dump_python(value))
            if bad is not None:
                raise InvalidJobInput(self.name, bad.path, bad.message)
        try:
            return jsonvalue.dumps(plain)
        except jsonvalue.NotJson as exc:
            raise InvalidJobInput(self.name, exc.path, exc.message) from None

    @functools.cached_property
    def _list_adapter(self) -> pydantic.TypeAdapter[list[InputT]]:
        return pydantic.TypeAdapter(list[self.input])  # type: ignore[name-defined]

    def validate_many(self, inputs: Sequence[Any] | jsonvalue.JsonText) -> list[Any]:
        """The typed inputs of a batch, validated at once (one pydantic pass over the list).
        ``inputs`` may be one ``JsonText`` holding a JSON array, one input per element (for a
        kind that keeps text, its parsed elements). A bad input raises InvalidJobInput with
        its position (``index``) and field."""
        if isinstance(inputs, jsonvalue.JsonText):
            if self._keeps_text:
                return self._json_array(inputs.text)
            try:
                return self._list_adapter.validate_json(inputs.text)
            except pydantic.ValidationError as exc:
                raise _batch_error(self.name, exc) from None
        if any(isinstance(value, jsonvalue.JsonText) for value in inputs):
            return [self._at(i, self.validate, value) for i, value in enumerate(inputs)]
        try:
            return self._list_adapter.validate_python(inputs)
        except pydantic.ValidationError as exc:
            raise _batch_error(self.name, exc) from None

    def encode_many(self, inputs: Sequence[Any] | jsonvalue.JsonText) -> tuple[str, list[Any]]:
        """``validate_many``, then (one JSON array text of the encodings, the typed inputs).
        Each element is what ``encode(validate(input))`` gives, but the whole list is
        serialised at once; a JsonText array is kept as it is by a kind that keeps text."""
        typed = self.validate_many(inputs)
        if isinstance(inputs, jsonvalue.JsonText) and self._keeps_text:
            if jsonvalue.jsonb_unsafe(inputs.text):  # name the element at fault
                for i, value in enumerate(typed):
                    self._at(i, self.encode, jsonvalue.JsonText(json.dumps(value)))
            return inputs.text, typed
        if any(isinstance(value, jsonvalue.JsonText) for value in typed):
            return self._join(typed), typed
        try:
            text: str | None = self._list_adapter.dump_json(typed).decode()
        except pydantic_core.PydanticSerializationError:
            text = None
        if _stored_as_is(text):
            return text, typed
        return self._join(typed), typed

    def _json_array(self, text: str) -> list[Any]:
        try:
            values = pydantic_core.from_json(text, allow_inf_nan=False)
        except ValueError as exc:
            raise InvalidJobInput(self.name, "", f"not JSON text: {exc}") from None
        if not isinstance(values, list):
            raise InvalidJobInput(self.name, "", "a batch given as JsonText must be a JSON array")
        return values

    def _join(self, typed: list[Any]) -> str:
        return (
            "[" + ",".join(self._at(i, self.encode, value) for i, value in enumerate(typed)) + "]"
        )

    def _at(self, index: int, step: Callable[[Any], Any], value: Any) -> Any:
        """``step(value)``, its InvalidJobInput given the input's position in the batch."""
        try:
            return step(value)
        except InvalidJobInput as exc:
            raise InvalidJobInput(self.name, exc.field, exc.reason, index=index) from None

    def label(self, value: InputT) -> str:
        """The job name of ``value``: ``job_name(value)``, else the kind's name."""
        return self.job_name(value) if self.job_name else self.name

    def group(self, value: InputT) -> str | None:
        """The group of ``value`` for group concurrency: ``group_key(value)``, else None."""
        return self.group_key(value) if self.group_key else None


class Registry:
    """The kinds an application knows. Hand it to the JobQueue; never a module global."""

    def __init__(self) -> None:
        self._kinds: dict[str, Kind[Any]] = {}

    def add(self, kind: Kind[Any]) -> Kind[Any]:
        """Register ``kind`` and return it; a second kind of the same name raises
        ``DuplicateKind``."""
        if kind.name in self._kinds:
            raise DuplicateKind(kind.name)
        self._kinds[kind.name] = kind
        return kind

    def declare(self, name: str, *, input: Any, **options: Any) -> Kind[Any]:
        """Register a kind without a handler (a producer that only enqueues it)."""
        return self.add(Kind(name, input, None, **options))

    def kind(self, name: str, *, input: Any, **options: Any) -> Callable[[Handler], Kind[Any]]:
        """Decorator: register ``async def handler(ctx, input)`` as the handler of kind ``name``.

        Options: ``queue``, ``max_attempts``, ``backoff``, ``max_deferrals``, ``priority``,
        ``job_name(input) -> str``, ``group_key(input) -> str | None``.

        >>> registry = Registry()
        >>> @registry.kind("send_email", input=Email, queue="mail", max_attempts=5)
        ... async def send_email(ctx, email): ...
        """

        def register(handler: Handler) -> Kind[Any]:
            return self.add(Kind(name, input, handler, **options))

        return register

    def get(self, name: str) -> Kind[Any]:
        """The kind named ``name``; raises ``UnknownKind`` if there is none."""
        try:
            return self._kinds[name]
        except (KeyError, TypeError):
            raise UnknownKind(str(name)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[Kind[Any]]:
        return iter(self._kinds.values())

    def names(self) -> list[str]:
        """The names of the registered kinds, in registration order."""
        return list(self._kinds)


def _scalars(value: Any) -> list[Any]:
    """Every scalar of a JSON-mode value (to spot a null that may have been a NaN)."""
    if isinstance(value, dict):
        return [s for item in value.values() for s in _scalars(item)]
    if isinstance(value, list):
        return [s for item in value for s in _scalars(item)]
    return [value]
