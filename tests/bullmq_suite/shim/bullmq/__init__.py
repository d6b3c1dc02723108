"""``import bullmq`` for BullMQ's suite: the facade, module by module. The real package's
private helpers that a few tests import are present only to fail when called (those tests are
among the excluded ones)."""

import importlib
import sys
import types as _types
from typing import Any

from bullmq_compat import *  # noqa: F403

for _name in (
    "custom_errors",
    "job",
    "flow_producer",
    "queue",
    "queue_events",
    "types",
    "abort_controller",
):
    sys.modules[f"bullmq.{_name}"] = importlib.import_module(f"bullmq_compat.{_name}")
    globals()[_name] = sys.modules[f"bullmq.{_name}"]


def _private_helper(*_args: Any, **_kwargs: Any) -> Any:
    raise NotImplementedError("a private helper of the real package, not provided")


def _module(name: str, source: str, **extra: Any) -> _types.ModuleType:
    module = _types.ModuleType(f"bullmq.{name}")
    module.__dict__.update(importlib.import_module(source).__dict__)
    module.__dict__.update(extra, __name__=f"bullmq.{name}")
    sys.modules[f"bullmq.{name}"] = module
    globals()[name] = module
    return module


_module("worker", "bullmq_compat.worker", getCompleted=_private_helper,
        _postgres_connection_error_types=())  # fmt: skip
_module("job_scheduler", "bullmq_compat.job_scheduler", _transform_scheduler_data=_private_helper)
