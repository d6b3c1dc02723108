"""The pgjobs error tree: one base, and subclasses that carry the thing at fault."""

from __future__ import annotations


class PgJobsError(Exception):
    """Base of every error pgjobs raises on purpose."""


class InvalidOption(PgJobsError, ValueError):
    """An enqueue or worker option is out of range or of the wrong type."""

    def __init__(self, option: str, message: str) -> None:
        self.option = option
        super().__init__(f"invalid option {option!r}: {message}")


class InvalidJobInput(PgJobsError, ValueError):
    """A job's payload does not satisfy its kind's input model (or is not JSON). ``index``:
    the position of the bad input in a batch (None for a single job)."""

    def __init__(self, kind: str, field: str, message: str, index: int | None = None) -> None:
        self.kind = kind
        self.field = field
        self.index = index
        self.reason = message
        where = f"field {field!r}" if field else "payload"
        if index is not None:
            where = f"input {index}: {where}"
        super().__init__(f"invalid input for kind {kind!r}: {where}: {message}")


class UnknownKind(PgJobsError, LookupError):
    """No kind of that name is registered."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(f"unknown job kind {kind!r}: register it on the Registry first")


class DuplicateKind(PgJobsError, ValueError):
    """Two kinds were registered under one name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(f"job kind {kind!r} is already registered")


class InvalidSchemaName(PgJobsError, ValueError):
    """The configured schema name is not a plain lower-case SQL identifier."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        super().__init__(
            f"invalid schema name {schema!r}: use 1-48 characters of a-z, 0-9 and _, "
            "starting with a letter or _"
        )


class SchemaMissing(PgJobsError):
    """The pgjobs schema is absent, older than this code expects, or runs function definitions
    other than this code's (``stale_definitions``)."""

    def __init__(
        self, schema: str, found: int | None, expected: int, *, stale_definitions: bool = False
    ) -> None:
        self.schema = schema
        self.found = found
        self.expected = expected
        self.stale_definitions = stale_definitions
        if found is None:
            state = f"is not installed; this code needs version {expected}"
        elif found < expected:
            state = f"is at version {found}; this code needs version {expected}"
        else:
            state = f"is at version {found} but its functions are not this code's"
        super().__init__(
            f"pgjobs schema {schema!r} {state}. "
            f"Run `pgjobs migrate --dsn ... --schema {schema}` (or `await JobQueue.migrate()`)."
        )


class MigrationFailed(PgJobsError):
    """A numbered migration could not be applied. Migrations run in one transaction, so the
    schema is left exactly as it was (at ``version - 1`` or earlier); the message says what
    PostgreSQL refused, with its detail and hint when it gave them."""

    def __init__(self, schema: str, version: int, name: str, reason: str) -> None:
        self.schema = schema
        self.version = version
        self.name = name
        self.reason = reason
        super().__init__(
            f"migration {version:04d} ({name}) of pgjobs schema {schema!r} failed and nothing "
            f"was changed: {reason}"
        )


class DedupRaceError(PgJobsError):
    """The in-flight holder of a dedup key kept changing under a bounded number of retries."""

    def __init__(self, queue: str, dedup_key: str, attempts: int) -> None:
        self.queue = queue
        self.dedup_key = dedup_key
        super().__init__(
            f"could not enqueue nor read the holder of dedup key {dedup_key!r} "
            f"in queue {queue!r} after {attempts} attempts"
        )


class JobLost(PgJobsError):
    """This worker no longer owns the job (lease expired, cancelled or purged).

    Raised inside a handler by fenced writes that cannot report a boolean, such as
    ``JobContext.transaction()``; the transaction has been rolled back.
    """

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(
            f"job {job_id} is no longer owned by this worker; its writes were discarded"
        )


class PendingPrerequisites(PgJobsError):
    """A job cannot complete while prerequisites attached to it are still open (or blocked by a
    failure): the completion was refused and nothing written; the job is still running and
    owned. The worker fails the attempt with this error, as for a handler that raised it.
    """

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} has pending prerequisites: it cannot complete")


class PoolClosed(PgJobsError):
    """The connection pool under a worker, an event stream or a scheduler was closed while it
    ran, so it stopped (it retries a database out of reach, never a pool that is gone). A
    worker stops as a killed one would: the handlers it was running are cancelled and their
    jobs stay leased to it until the lease ends, then are rescued and run again. Stop them
    before closing their pool (``JobQueue.close`` stops the workers it made)."""

    def __init__(self, user: str, consequence: str) -> None:
        self.user = user
        super().__init__(f"the pool of {user} was closed while it ran: {consequence}")


class DatabaseTimeout(PgJobsError, TimeoutError):
    """PostgreSQL did not answer a statement within its deadline (``pgjobs.Timeouts``): the
    network or the server went silent. The connection was closed, so nothing more can happen
    on it; whether the statement took effect before the silence is unknown. The engine's loops
    retry on a new connection (their writes are fenced); a caller decides for its own calls.
    A TimeoutError, hence one of ``TRANSIENT_ERRORS``."""

    def __init__(self, statement: str, seconds: float) -> None:
        self.statement = statement
        self.seconds = seconds
        super().__init__(
            f"no answer from PostgreSQL to {statement!r} within {seconds:g}s (pgjobs.Timeouts): "
            "the connection was closed; whether the statement took effect is unknown"
        )


class InvalidFlow(PgJobsError, ValueError):
    """A flow is malformed: an edge names a node never added, a node is added twice, ..."""


class FlowCycle(InvalidFlow):
    """The flow's edges form a cycle; nothing was written."""

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = nodes
        super().__init__(f"the flow has a cycle through node(s) {nodes}; nothing was written")


class FlowConflict(PgJobsError):
    """A flow node's job key or dedup key is already held by another job; nothing was written."""

    def __init__(
        self, node: str, existing_id: int | None, job_key: str | None, dedup_key: str | None
    ) -> None:
        self.node = node
        self.existing_id = existing_id
        key = f"job key {job_key!r}" if job_key else f"dedup key {dedup_key!r}"
        held = f" (held by job {existing_id})" if existing_id is not None else ""
        super().__init__(f"flow node {node!r}: {key} is already taken{held}; nothing was written")


class PrerequisiteTaken(PgJobsError):
    """The existing job an ``add_prerequisite(..., sole_dependent=True)`` named by its job key
    already has another dependent; nothing was written."""

    def __init__(self, job_id: int, dependent_id: int) -> None:
        self.job_id = job_id
        self.dependent_id = dependent_id
        super().__init__(f"job {job_id} already has dependent {dependent_id}; nothing was written")


class FlowNotFound(PgJobsError, LookupError):
    """No flow has this id, or it belongs to another tenant (``flow_id``)."""

    def __init__(self, flow_id: int) -> None:
        self.flow_id = flow_id
        super().__init__(f"no flow {flow_id} (or it belongs to another tenant)")


class FlowRunning(PgJobsError):
    """A flow cannot be re-driven in place while one of its nodes runs."""

    def __init__(self, flow_id: int, running: list[int]) -> None:
        self.flow_id = flow_id
        self.running = running
        super().__init__(
            f"flow {flow_id} has running node(s) {running}; wait for them or cancel them"
        )


class ScheduleTickTaken(PgJobsError):
    """A materialized schedule's run could not be made: the job key of its tick is another
    job's (``tries`` ticks were tried); nothing was written."""

    def __init__(self, schedule: str, job_key: str, tries: int) -> None:
        self.schedule = schedule
        self.job_key = job_key
        self.tries = tries
        super().__init__(
            f"schedule {schedule!r}: its run's job key {job_key!r} is another job's"
            + (f" (and so were the {tries - 1} ticks after it)" if tries > 1 else "")
            + "; nothing was written"
        )


class QueueRunning(PgJobsError):
    """A queue cannot be obliterated while jobs of it run, unless told to cancel them
    (``force``); nothing was removed."""

    def __init__(self, queue: str, running: int) -> None:
        self.queue = queue
        self.running = running
        super().__init__(
            f"queue {queue!r} has {running} running job(s): pass force=True to cancel them "
            "with the rest; nothing was removed"
        )
