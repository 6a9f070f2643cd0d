"""Kiln as an ONNX backend (`onnx.backend.base.Backend`): what onnx's backend test runner and
other ONNX tooling call to compile a model with Kiln and run it.

    rep = kiln.backend.prepare(model)          # kiln.compile(model, db=None, jobs=1)
    outputs = rep.run([x, y])                  # a tuple, by position or by output name

Every output is computed by Kiln-compiled kernels (or is a view of a kernel's result, or a
graph input passed through). The only values evaluated at compile time are those that depend
on no graph input (initializers, Constant nodes, shapes); `prepare` checks that, so a model
never silently runs in a numpy executor.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from .compile import compile as _compile
from .graph.runtime.executor import CompiledModel
from .te.errors import InternalError, KernelArgumentError, ModelFormatError

# ops whose output depends on their input's shape (or a sequence's length, whether an
# optional holds a value), never on its values
_SHAPE_ONLY_OPS = frozenset({"Shape", "Size", "EyeLike", "SequenceLength",
                             "OptionalHasElement"})


def _data_dependent_outputs(graph: onnx.GraphProto) -> set[str]:
    """Names of the graph's values that depend on the value of some graph input (not only on
    its shape): those must be computed by a kernel at run time, never folded."""
    initializers = {t.name for t in graph.initializer}
    dependent = {i.name for i in graph.input if i.name not in initializers}
    for node in graph.node:
        if node.op_type in _SHAPE_ONLY_OPS and node.domain in ("", "ai.onnx"):
            continue
        if any(name in dependent for name in node.input if name) or _reads_outer(node,
                                                                                 dependent):
            outputs = list(node.output)
            if node.op_type == "Dropout" and not _training(node, graph):
                outputs = outputs[:1]       # the inference mask is all ones: a shape
            dependent.update(name for name in outputs if name)
    return dependent


def _training(node: onnx.NodeProto, graph: onnx.GraphProto) -> bool:
    """Whether a Dropout may run in training mode (its mask then depends on a draw)."""
    return len(node.input) > 2 and bool(node.input[2]) and node.input[2] not in {
        t.name for t in graph.initializer if not numpy_helper.to_array(t).any()}


def _reads_outer(node: onnx.NodeProto, dependent: set[str]) -> bool:
    """True if a subgraph attribute of `node` (If/Loop/Scan bodies) reads a dependent value."""
    for attr in node.attribute:
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            if any(name in dependent for n in sub.node for name in n.input):
                return True
    return False


class KilnBackendRep(BackendRep):
    """A model compiled by Kiln, ready to run repeatedly (onnx's BackendRep)."""

    def __init__(self, compiled: CompiledModel, output_names: Sequence[str]):
        self.compiled = compiled
        self.output_names = list(output_names)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Run on `inputs` (a list in graph-input order, one array, or a dict by name);
        returns the outputs as a namedtuple that can also be indexed by output name (a
        sequence output: a list of arrays; an empty optional: None)."""
        if kwargs:
            raise KernelArgumentError(f"KilnBackendRep.run takes no options, got "
                                      f"{sorted(kwargs)}")
        if not isinstance(inputs, (Mapping, np.ndarray)):
            # a sequence input is a list of arrays, an empty optional None
            inputs = [x if x is None else [np.asarray(a) for a in x]
                      if isinstance(x, (list, tuple)) else np.asarray(x) for x in inputs]
        outputs = self.compiled.run(inputs)
        return namedtupledict("Outputs", self.output_names)(*outputs)


class KilnBackend(Backend):
    """Kiln's ONNX backend: CPU only; `prepare` compiles with `kiln.compile` (no tuning
    database unless `db=` is given; kernels compiled in this process unless `jobs=` is)."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            return Device(device).type == DeviceType.CPU
        except AttributeError:  # an unknown device type name
            return False

    @classmethod
    def prepare(cls, model: onnx.ModelProto | str, device: str = "CPU",
                **kwargs: Any) -> KilnBackendRep:
        """Compile `model`; `kwargs` go to kiln.compile (db, jobs, threads, input_shapes,
        layout, ...; untiered unless tiered=True is given)."""
        if not cls.supports_device(device):
            raise ModelFormatError(f"Kiln's ONNX backend runs on the CPU only; device "
                                   f"{device!r} was asked (use device='CPU')")
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load(model)
        options = {"db": None, "jobs": 1, "tiered": False, **kwargs}    # one tier
        compiled = _compile(proto, **options)
        cls._check_nothing_folded(proto, compiled)
        return KilnBackendRep(compiled, [o.name for o in proto.graph.output])

    @staticmethod
    def _check_nothing_folded(proto: onnx.ModelProto, compiled) -> None:
        """Every output that depends on a graph input's values is computed at run time."""
        plan = getattr(compiled, "plan", None)
        if plan is None or not hasattr(plan, "buffers"):
            return  # a wrapper that compiles per input shape checks its own; a generic model
            # (graph/generic) runs every node it holds
        kinds = {b.name: b.kind for b in plan.buffers}
        dependent = _data_dependent_outputs(proto.graph)
        folded = [name for name in plan.outputs
                  if kinds.get(name) == "constant" and name in dependent]
        if folded:
            raise InternalError(f"outputs {folded} of model '{plan.name}' depend on graph "
                                "inputs but were folded to constants at compile time; this "
                                "is a bug in Kiln")

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        """Run one node on `inputs` (arrays, in the node's input order; empty names are
        omitted optional inputs): wrapped in a one-node model and compiled."""
        opset = kwargs.pop("opset_version", None)
        arrays = [np.asarray(x) for x in inputs]
        names = [n for n in node.input if n]
        if len(names) != len(arrays):
            raise KernelArgumentError(f"node '{node.name or node.op_type}' has {len(names)} "
                                      f"inputs, {len(arrays)} arrays were given")
        graph_inputs = [helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in zip(names, arrays)]
        outs = [n for n in node.output if n]
        if outputs_info is not None:
            graph_outputs = [helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape)
                for n, (dt, shape) in zip(outs, outputs_info)]
        else:  # no output types: Kiln infers them (an output type without shape is accepted)
            graph_outputs = [helper.make_empty_tensor_value_info(n) for n in outs]
        graph = helper.make_graph([node], f"{node.op_type}_node", graph_inputs, graph_outputs)
        opsets = [helper.make_opsetid("", opset)] if opset else None
        model = helper.make_model(graph, opset_imports=opsets) if opsets else \
            helper.make_model(graph)
        with warnings.catch_warnings():   # the untyped outputs are ours, not the user's
            warnings.filterwarnings("ignore", message=".*is declared without a type")
            return cls.run_model(model, arrays, device, **kwargs)


prepare = KilnBackend.prepare
run_model = KilnBackend.run_model
run_node = KilnBackend.run_node
supports_device = KilnBackend.supports_device

__all__ = ["KilnBackend", "KilnBackendRep", "prepare", "run_model", "run_node",
           "supports_device"]
