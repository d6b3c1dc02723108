"""Drain live BullMQ queues out of Redis into pgjobs, once, losing nothing.

>>> report = await migrate(MigrationOptions(redis_url="redis://...", postgres_dsn="postgresql://..."))
>>> print(report.render()); report.exit_code

The CLI (``bullmq-to-pgjobs``, ``python -m migration_tools``) is a thin layer over this.
"""

from migration_tools.run import ExitCode, MigrationOptions, Report, migrate

__all__ = ["ExitCode", "MigrationOptions", "Report", "migrate"]
