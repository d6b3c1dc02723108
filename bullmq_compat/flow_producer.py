"""FlowProducer: a BullMQ job tree becomes one pgjobs flow, written in one transaction. Each
child is a prerequisite of its parent (across queues); the child's failure options choose the
edge policy."""

from __future__ import annotations

from typing import Any

import pgjobs
from bullmq_compat.connection import Connection
from bullmq_compat.job import Job
from bullmq_compat.mapping import (
    FAILURE_OPTIONS,
    KIND,
    edge_policy,
    enqueue_options,
    facade_registry,
    json_data,
)
from bullmq_compat.queue import Queue
from pgjobs import InvalidOption


class FlowProducer:
    """``FlowProducer(opts)``; ``add(tree)`` and ``addBulk([tree, ...])`` return the tree of
    ``{"job": Job, "children": [...]}``. Without a failure option a failed child leaves its
    parent waiting (BullMQ's default) until the child is retried or removed."""

    def __init__(
        self, redisOpts: dict[str, Any] | None = None, opts: dict[str, Any] | None = None
    ) -> None:
        self.opts = {**(redisOpts or {}), **(opts or {})}
        self.prefix = self.opts.get("prefix", "bull")
        self._connection = Connection(self.opts)
        self._registry = facade_registry()
        self._queues: dict[str, Queue] = {}

    def _queue(self, name: str) -> Queue:
        if name not in self._queues:
            self._queues[name] = Queue(name, self.opts, _connection=self._connection)
        return self._queues[name]

    async def add(self, flow: dict[str, Any], opts: dict[str, Any] | None = None) -> dict[str, Any]:
        return (await self.addBulk([flow], opts))[0]

    async def addBulk(
        self, flows: list[dict[str, Any]], opts: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        jobs = await self._connection.open(self._registry)
        results = []
        async with jobs.transaction() as conn:  # every tree, or none
            for tree in flows:
                graph = pgjobs.Flow(tree.get("name"))
                nodes: list[tuple[str, dict[str, Any]]] = []
                self._build(graph, tree, "root", None, nodes, (opts or {}).get("queuesOptions", {}))
                submitted = await jobs.submit_flow(graph, connection=conn)
                results.append(self._result(tree, "root", submitted.job_ids))
        return results

    def _build(
        self,
        graph: pgjobs.Flow,
        node: dict[str, Any],
        handle: str,
        parent: str | None,
        nodes: list[tuple[str, dict[str, Any]]],
        queues_options: dict[str, Any],
    ) -> None:
        queue_name = node.get("queueName")
        if not isinstance(queue_name, str):
            raise InvalidOption(
                "queueName", f"every flow node needs a queueName (node {node.get('name')!r})"
            )
        defaults = (queues_options.get(queue_name) or {}).get("defaultJobOptions", {})
        opts = {**defaults, **(node.get("opts") or {})}
        job_opts = {k: v for k, v in opts.items() if k not in FAILURE_OPTIONS}
        options = enqueue_options(node.get("name", ""), job_opts, self.prefix, queue_name)
        graph.add(handle, KIND, json_data(node.get("data")), **options)
        nodes.append((handle, node))
        if parent is not None:
            graph.edge(handle, parent, edge_policy(opts))
        for index, child in enumerate(node.get("children") or []):
            self._build(graph, child, f"{handle}.{index}", handle, nodes, queues_options)

    def _result(self, node: dict[str, Any], handle: str, ids: dict[str, int]) -> dict[str, Any]:
        queue = self._queue(node["queueName"])
        opts = node.get("opts") or {}
        job = queue._added(node.get("name", ""), node.get("data"), opts, ids[handle])
        children = [
            self._result(child, f"{handle}.{i}", ids)
            for i, child in enumerate(node.get("children") or [])
        ]
        result: dict[str, Any] = {"job": job}
        if children:
            result["children"] = children
        return result

    async def close(self) -> None:
        await self._connection.close()


__all__ = ["FlowProducer", "Job"]
