"""A scripted tour of pgjobs: typed kinds, priorities, a delay, a deduplicated enqueue, a
transactional enqueue, a retry, a deferral and a fatal error, run by one worker to the end.

Run it with `./run demo` (it finds or starts a PostgreSQL by itself).
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import pydantic

from pgjobs import Backoff, Delayed, Fatal, JobContext, JobQueue, JobSpec, Registry
from pgjobs.devserver import find_or_start_postgres


class Email(pydantic.BaseModel):
    to: str
    subject: str


class Thumbnail(pydantic.BaseModel):
    image_id: int
    size: int = 256


registry = Registry()
log: list[str] = []


@registry.kind("send_email", input=Email, queue="mail", max_attempts=3, backoff=Backoff.fixed(0.2))
async def send_email(ctx: JobContext, email: Email) -> dict[str, str]:
    if email.to.endswith("@flaky.example") and ctx.attempts < 2:
        log.append(f"  #{ctx.id} send_email to {email.to}: SMTP timeout, attempt {ctx.attempts}")
        raise TimeoutError("SMTP server did not answer")
    if email.to.endswith("@invalid"):
        log.append(f"  #{ctx.id} send_email to {email.to}: address rejected, no retry")
        raise Fatal(f"{email.to} is not deliverable")
    log.append(f"  #{ctx.id} send_email to {email.to} (attempt {ctx.attempts})")
    return {"message_id": f"<{ctx.id}@demo>"}


@registry.kind(
    "make_thumbnail",
    input=Thumbnail,
    queue="mail",
    job_name=lambda t: f"thumb-{t.image_id}",
    max_deferrals=5,
)
async def make_thumbnail(ctx: JobContext, thumb: Thumbnail) -> dict[str, int]:
    if thumb.image_id == 7 and ctx.deferrals == 0:
        log.append(f"  #{ctx.id} {ctx.name}: source not uploaded yet, deferring (no attempt used)")
        raise Delayed(0.2, "source not ready")
    await ctx.progress({"percent": 100})
    log.append(f"  #{ctx.id} {ctx.name} at {thumb.size}px (priority {ctx.priority})")
    return {"image_id": thumb.image_id, "bytes": thumb.size * 40}


async def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    dsn = find_or_start_postgres()
    schema = f"demo_{uuid.uuid4().hex[:8]}"
    async with await JobQueue.connect(dsn, registry=registry, schema=schema) as jobs:
        await jobs.migrate()
        print(f"PostgreSQL: {dsn.split('@')[-1]}  schema: {schema}")
        await jobs.enqueue("send_email", {"to": "ada@example.com", "subject": "hello"})
        await jobs.enqueue("send_email", {"to": "bob@flaky.example", "subject": "retry me"})
        await jobs.enqueue("send_email", {"to": "nobody@invalid", "subject": "dead letter"})
        await jobs.enqueue_many(
            [JobSpec("make_thumbnail", {"image_id": i}, priority=i) for i in (3, 9, 7)]
        )
        late = await jobs.enqueue("make_thumbnail", {"image_id": 1}, delay=0.3, priority=100)
        first = await jobs.enqueue("send_email", {"to": "c@x.io", "subject": "once"}, dedup_key="c")
        again = await jobs.enqueue("send_email", {"to": "c@x.io", "subject": "once"}, dedup_key="c")
        print(f"dedup: second enqueue returned job #{again.id} (duplicate={again.duplicate})")
        assert again.id == first.id
        async with jobs.db.pool.acquire() as conn:
            try:
                async with conn.transaction():
                    await jobs.enqueue(
                        "send_email", {"to": "z@x.io", "subject": "x"}, connection=conn
                    )
                    raise RuntimeError("the business write failed")
            except RuntimeError:
                print("transactional enqueue rolled back with its transaction: no job written")
        try:
            await jobs.enqueue("make_thumbnail", {"image_id": "seven"})
        except Exception as exc:
            print(f"bad input refused: {exc}")

        print("worker running (concurrency 1, so the order is visible):")
        await jobs.worker(concurrency=1).run(until_drained=True)
        print("\n".join(log))
        rows = await jobs.db.pool.fetch(
            f"SELECT id, kind, name, status, attempts, deferrals, output FROM {schema}.jobs ORDER BY id"
        )
        print("final state:")
        for row in rows:
            print(
                f"  #{row['id']:<3} {row['name']:<12} {row['status']:<9} "
                f"attempts={row['attempts']} deferrals={row['deferrals']} output={row['output']}"
            )
        row = await jobs.get(late.id)
        assert row is not None and row.status == "completed"
        async with jobs.db.pool.acquire() as conn:
            await conn.execute(f"DROP SCHEMA {schema} CASCADE")


if __name__ == "__main__":
    asyncio.run(main())
