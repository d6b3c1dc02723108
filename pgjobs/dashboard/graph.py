"""Layout of a flow's DAG for the browser: nodes in columns by depth (prerequisites to the left
of what they feed), long columns wrapped, drawn as one SVG. Linear in nodes and edges, so a
1,000-node flow renders in milliseconds and stays readable by scrolling."""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

from pgjobs.models import FlowEdge, FlowNode

NODE_W, NODE_H, GAP_X, GAP_Y = 170, 40, 50, 10
MAX_PER_COLUMN = 36

COLOURS = {
    "ready": "#6c9bd2",
    "delayed": "#b8a9d9",
    "retry": "#e0a458",
    "waiting_children": "#c9c9c9",
    "active": "#f2d45c",
    "completed": "#7cc47c",
    "failed": "#e06c6c",
    "cancelled": "#999999",
}


@dataclass(frozen=True)
class Placed:
    node: FlowNode
    x: int
    y: int


def layout(nodes: list[FlowNode], edges: list[FlowEdge]) -> tuple[list[Placed], int, int]:
    """Positions of every node, and the drawing's width and height."""
    incoming: dict[int, list[int]] = defaultdict(list)
    outgoing: dict[int, list[int]] = defaultdict(list)
    for edge in edges:
        incoming[edge.dependent].append(edge.prerequisite)
        outgoing[edge.prerequisite].append(edge.dependent)
    depth = {node.id: 0 for node in nodes}
    pending = {node.id: len(incoming[node.id]) for node in nodes}
    queue = deque(node.id for node in nodes if pending[node.id] == 0)
    while queue:  # longest path from a root, in topological order (flows are acyclic)
        current = queue.popleft()
        for nxt in outgoing[current]:
            if nxt in depth:
                depth[nxt] = max(depth[nxt], depth[current] + 1)
                pending[nxt] -= 1
                if pending[nxt] == 0:
                    queue.append(nxt)
    columns: dict[int, list[FlowNode]] = defaultdict(list)
    for node in nodes:
        columns[depth[node.id]].append(node)
    placed: list[Placed] = []
    x_slot = 0
    height = 0
    for level in sorted(columns):
        members = columns[level]
        for start in range(0, len(members), MAX_PER_COLUMN):
            for row, node in enumerate(members[start : start + MAX_PER_COLUMN]):
                y = GAP_Y + row * (NODE_H + GAP_Y)
                placed.append(Placed(node, GAP_X // 2 + x_slot * (NODE_W + GAP_X), y))
                height = max(height, y + NODE_H + GAP_Y)
            x_slot += 1
    width = x_slot * (NODE_W + GAP_X) + GAP_X // 2
    return placed, max(width, NODE_W + GAP_X), max(height, NODE_H + 2 * GAP_Y)
