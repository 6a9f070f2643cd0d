"""Tuning tasks of a model: one autotune Task per distinct fused-group DAG, weighted by how
often it occurs, so a model's ten identical conv blocks are tuned once and built once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from ...autotune.task import Task
from ...codegen.target import Target
from ...te.workload import topo_ops, workload_key
from ..ir import Graph
from ..lower_te import GroupDAG, lower_group
from ..passes.fusion import FusedGroup

# single-node groups that are a no-op on contiguous data: their output is a view of the input
ALIAS_OPS = frozenset({"reshape", "identity", "bitcast_int8x4"})
# alias ops whose output reinterprets the input's bytes as another dtype (the executor views
# the buffer with the output's dtype)
BITCAST_OPS = frozenset({"bitcast_int8x4"})


@dataclass(frozen=True)
class ModelTask:
    """A Task shared by every group in `groups` (names); `weight` is the occurrence count,
    which autotune.scheduler multiplies by the task's best latency to rank tasks."""

    task: Task
    dag: GroupDAG
    groups: tuple[str, ...]

    @property
    def weight(self) -> float:
        return float(len(self.groups))

    @property
    def name(self) -> str:
        return self.task.name


def is_alias(group: FusedGroup, graph: Graph) -> bool:
    """True when `group` needs no kernel: a lone reshape/identity whose output is internal."""
    if len(group.nodes) != 1 or group.nodes[0].op not in ALIAS_OPS:
        return False
    node = group.nodes[0]
    out = node.outputs[0]
    graph_outputs = {v.name for v in graph.outputs}
    return (out.name not in graph_outputs and node.inputs[0] is not None
            and (node.inputs[0].dtype == out.dtype or node.op in BITCAST_OPS))


def _dedup_key(dag: GroupDAG) -> tuple:
    """The workload key plus where each kernel argument sits in the DAG, so that two groups
    share a kernel only if their arguments also line up."""
    order = {op: k for k, op in enumerate(topo_ops(list(dag.outputs)))}
    return workload_key(list(dag.outputs)), tuple(order.get(t.op, -1) for t in dag.args)


def _task_name(group: FusedGroup, key: str) -> str:
    label = group.name.split("_", 1)[1] if "_" in group.name else group.name
    return f"{label[:40]}_{key[:8]}"


def extract_tasks(graph: Graph, groups: Sequence[FusedGroup], target: Target | None = None,
                  constants: Mapping[str, np.ndarray] | None = None,
                  on_task: Callable[[ModelTask], None] | None = None
                  ) -> tuple[list[ModelTask], dict[str, tuple[ModelTask, GroupDAG]]]:
    """Tasks of `groups` (alias groups excluded) and, per group name, its task and own DAG.
    `on_task(mt)` is called with each distinct task as soon as it is found (its `groups`
    not yet filled in: the returned ModelTasks have them), in graph order."""
    constants = graph.constants if constants is None else constants
    by_key: dict[tuple, ModelTask] = {}
    members: dict[tuple, list[str]] = {}
    per_group: dict[str, tuple[tuple, GroupDAG]] = {}
    for group in groups:
        if is_alias(group, graph):
            continue
        dag = lower_group(group, constants)
        key = _dedup_key(dag)
        if key not in by_key:
            # same DAG with another argument order: a distinct task that needs its own name
            taken = {mt.task.name for mt in by_key.values()}
            name = base = _task_name(group, key[0])
            suffix = len(taken)
            while name in taken:     # (adding each try to `taken` looped forever)
                name = f"{base}_{suffix}"
                suffix += 1
            task = Task(name, dag.outputs, dag.args,
                        "native" if target is None else str(target))
            by_key[key] = ModelTask(task, dag, ())
            members[key] = []
            if on_task is not None:
                on_task(by_key[key])
        members[key].append(group.name)
        per_group[group.name] = (key, dag)
    tasks = {key: ModelTask(mt.task, mt.dag, tuple(members[key])) for key, mt in by_key.items()}
    return list(tasks.values()), {name: (tasks[key], dag) for name, (key, dag) in
                                  per_group.items()}
