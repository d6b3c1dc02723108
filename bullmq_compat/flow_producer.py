"""FlowProducer: a BullMQ job tree becomes one pgjobs flow, written in one transaction. Each
child is a prerequisite of its parent (across queues); the child's failure options choose the
edge policy. A root with ``opts.parent`` joins an existing parent job."""

from __future__ import annotations

from typing import Any, cast

import pgjobs
from bullmq_compat.connection import EngineConnection
from bullmq_compat.job import Job
from bullmq_compat.mapping import (
    KIND,
    durability,
    edge_policy,
    enqueue_options,
    facade_registry,
    node_data,
)
from bullmq_compat.queue import Queue
from bullmq_compat.types import QueueBaseOptions
from pgjobs import InvalidOption

PARENT_JOB_NOT_EXIST = -5
"""BullMQ's ErrorCode.ParentJobNotExist, carried by the error as ``code``."""


class ParentJobNotExist(Exception):
    """A flow's root names a parent job that does not exist; nothing was written."""

    code = PARENT_JOB_NOT_EXIST

    def __init__(self, parent_key: str) -> None:
        super().__init__(f"Missing key for parent job {parent_key}. addJob")
        self.parent_key = parent_key


class FlowProducer:
    """``FlowProducer(opts)`` (or ``FlowProducer(redisOpts, opts)``); ``add(tree)`` and
    ``addBulk([tree, ...])`` return the tree of ``{"job": Job, "children": [...]}``. Without a
    failure option a failed child leaves its parent waiting (BullMQ's default) until the child
    is retried or removed. After ``close()``, adds are no-ops that return None."""

    def __init__(
        self, redisOpts: dict[str, Any] | None = None, opts: dict[str, Any] | None = None
    ) -> None:
        self.opts = {**(redisOpts or {}), **(opts or {})}
        self.prefix = self.opts.get("prefix", "bull")
        self.connection = EngineConnection(self.opts)
        self.durability = durability(self.opts)
        self._registry = facade_registry()
        self._queues: dict[str, Queue] = {}
        self.closing = False

    def _queue(self, name: str) -> Queue:
        if name not in self._queues:
            self._queues[name] = Queue(
                name, cast(QueueBaseOptions, self.opts), connection=self.connection
            )
        return self._queues[name]

    async def _describe_queues(self) -> None:
        """Record each queue the flows went to as a BullMQ queue (once per queue, see
        Queue.engine), so the dashboard shows it by its BullMQ name."""
        for queue in list(self._queues.values()):
            await queue.engine()

    async def add(
        self, flow: dict[str, Any], opts: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """Write the tree, or raise (``ParentJobNotExist``, code -5, when its root's
        ``opts.parent`` names no job) with nothing written."""
        trees = await self._add([flow], opts, lenient=False)
        return None if trees is None else trees[0]

    async def addBulk(
        self, flows: list[dict[str, Any]], opts: dict[str, Any] | None = None
    ) -> list[dict[str, Any]] | None:
        """Write every tree in one transaction; a tree whose root names a missing parent is
        left out (its result has no id), as BullMQ's lenient bulk add does."""
        return await self._add(flows, opts, lenient=True)

    async def _add(
        self, flows: list[dict[str, Any]], opts: dict[str, Any] | None, *, lenient: bool
    ) -> list[dict[str, Any]] | None:
        if self.closing:
            return None
        jobs = await self.connection.open(self._registry)
        queues_options = (opts or {}).get("queuesOptions", {})
        if len(flows) == 1 and not (flows[0].get("opts") or {}).get("parent"):
            # One tree with no parent to look up: its submission is atomic by itself.
            graph = self._graph(flows[0], queues_options)
            submitted = await jobs.submit_flow(graph, durability=self.durability, reuse=True)
            await self._describe_queues()
            return [self._result(flows[0], "root", submitted.job_ids)]
        results = []
        async with jobs.transaction() as conn:  # every tree, or none
            for tree in flows:
                graph = self._graph(tree, queues_options)
                parent = await self._parent_of(jobs, tree)
                if parent is False:
                    if not lenient:
                        raise ParentJobNotExist(self._parent_key(tree))
                    results.append(self._result(tree, "root", {}))
                    continue
                submitted = await jobs.submit_flow(
                    graph, connection=conn, durability=self.durability, reuse=True
                )
                if parent is not None:
                    policy = edge_policy(tree.get("opts") or {})
                    # an existing parent stays where it is, as BullMQ's addJob leaves it: a
                    # waiting one claimable, its completion refused until its children end
                    await jobs.add_dependency(
                        submitted.job_ids["root"],
                        parent,
                        policy=policy,
                        connection=conn,
                        wait=False,
                    )
                results.append(self._result(tree, "root", submitted.job_ids))
        await self._describe_queues()
        return results

    @staticmethod
    def _parent_key(tree: dict[str, Any]) -> str:
        parent = (tree.get("opts") or {}).get("parent") or {}
        return f"{parent.get('queue')}:{parent.get('id')}"

    async def _parent_of(self, jobs: pgjobs.JobQueue, tree: dict[str, Any]) -> int | bool | None:
        """The engine id of the root's ``opts.parent``; None without one; False if missing."""
        parent = (tree.get("opts") or {}).get("parent")
        if not parent:
            return None
        if not isinstance(parent, dict) or "id" not in parent or "queue" not in parent:
            raise InvalidOption("parent", f"must be {{id, queue}}, got {parent!r}")
        name = str(parent["queue"]).rsplit(":", 1)[-1]
        found = await self._queue(name).engine_id_of(jobs, str(parent["queue"]), str(parent["id"]))
        return False if found is None else found

    def _graph(self, tree: dict[str, Any], queues_options: dict[str, Any]) -> pgjobs.Flow:
        graph = pgjobs.Flow(tree.get("name"))
        self._build(graph, tree, "root", None, queues_options)
        return graph

    def _build(
        self,
        graph: pgjobs.Flow,
        node: dict[str, Any],
        handle: str,
        parent: str | None,
        queues_options: dict[str, Any],
    ) -> None:
        queue_name = node.get("queueName")
        if not isinstance(queue_name, str):
            raise InvalidOption(
                "queueName", f"every flow node needs a queueName (node {node.get('name')!r})"
            )
        defaults = (queues_options.get(queue_name) or {}).get("defaultJobOptions")
        own = node.get("opts")
        # a node without options (the common case): nothing to merge or filter
        opts = {**(defaults or {}), **(own or {})} if defaults or own else {}
        job_opts = {k: v for k, v in opts.items() if k != "parent"}
        if job_opts:
            options = enqueue_options(node.get("name", ""), job_opts, self.prefix, queue_name)
        else:  # its queue's options for a job without options, computed once per name
            options = self._queue(queue_name)._plain(node.get("name", ""))
        graph.add(handle, KIND, node_data(node.get("data")), **options)
        if parent is not None:
            graph.edge(handle, parent, edge_policy(opts))
        for index, child in enumerate(node.get("children") or ()):
            self._build(graph, child, f"{handle}.{index}", handle, queues_options)

    def _result(
        self,
        node: dict[str, Any],
        handle: str,
        ids: dict[str, int],
        shared: dict[tuple[str, str | None], dict[str, Any]] | None = None,
        parent: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The tree of ``{"job": Job, "children": [...]}``, each child with its ``parent``
        (``{id, queue}`` of its parent's job). The jobs without options of one queue and one
        parent share the fields they do not own until read, as a bulk's do (``Job.of_bulk``)."""
        if shared is None:
            shared = {}
        queue = self._queue(node["queueName"])
        opts = node.get("opts") or {}
        if parent is not None:
            opts = {**opts, "parent": parent}
        name = node.get("name", "")
        if handle not in ids:
            job = Job(queue, name, node.get("data"), opts)
        elif set(opts) - {"parent"}:
            job = queue.added(name, node.get("data"), opts, ids[handle])
        else:
            group = (queue.name, None if parent is None else f"{parent['queue']}:{parent['id']}")
            fields = shared.get(group)
            if fields is None:
                fields = shared[group] = Job.shared_fields(queue, opts)
            job = Job.sharing(queue, name, node.get("data"), ids[handle], fields)
        result: dict[str, Any] = {"job": job}
        children = node.get("children")
        if children:
            own = {"id": job.id, "queue": queue.qualifiedName} if handle in ids else None
            result["children"] = [
                self._result(child, f"{handle}.{i}", ids, shared, own)
                for i, child in enumerate(children)
            ]
        return result

    async def close(self) -> None:
        """Idempotent; adds after it return None."""
        self.closing = True
        await self.connection.close()


__all__ = ["FlowProducer", "Job", "ParentJobNotExist"]
