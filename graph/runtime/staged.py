"""Models with ops whose output length depends on the data (NonZero, Unique,
NonMaxSuppression): compiled in two stages around them.

Kiln compiles static shapes, and these ops' output lengths are known only once they ran. So
the model is split at them: the *prefix* is every node that does not depend on one of their
outputs, with each such op rewritten (onnx_ops_datadep.DOMAIN) to write its outputs padded to
their static upper bound plus an int64[1] count, computed by the same Kiln kernel; the
*suffix* is every node downstream of them. A run runs the prefix, trims the padded outputs to
their counts (a view, no computation) and runs the suffix on them: the suffix is compiled
like any model whose input shapes vary (graph/runtime/dynamic.py), one specialisation per count,
cached. A data-dependent op inside the suffix splits it again (recursively). An If whose
branches hold such an op (torchvision's batched_nms sits in `if boxes.numel() == 0`) is a cut
too: the stage before it computes its condition, and the suffix is specialised per condition
value with the chosen branch's nodes in place of the If, so the op is in the main graph of the
suffix and staged there; in Loop/Scan bodies such ops stay unsupported. The padded
buffers cost memory of the upper bound; the ops' kernels cost O(n^2) in their input size
(positions are counts of what comes before, te/ops/datadep.py).
"""
from __future__ import annotations

import warnings
from typing import Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...te.errors import KernelArgumentError, KilnError
from .executor import given_inputs, median_run_seconds
from ..onnx.control import rename, subgraphs
from ..onnx.datadep import DOMAIN, OP_TYPES

_ONNX = ("", "ai.onnx")


def is_data_dependent(node: onnx.NodeProto) -> bool:
    return node.domain in _ONNX and node.op_type in OP_TYPES


def is_gated_if(node: onnx.NodeProto) -> bool:
    """An If with a data-dependent op in its branches (at any depth): staged at its
    condition."""
    if node.domain not in _ONNX or node.op_type != "If":
        return False
    stack = subgraphs(node)
    while stack:
        for n in stack.pop().node:
            if is_data_dependent(n):
                return True
            stack.extend(subgraphs(n))
    return False


def has_data_dependent_ops(proto: onnx.ModelProto) -> bool:
    """Whether the main graph has a data-dependent-size op, or an If whose branches hold one
    (those in Loop/Scan bodies are not staged: they stay unsupported)."""
    return any(is_data_dependent(n) or is_gated_if(n) for n in proto.graph.node)


def _branch_nodes(node: onnx.NodeProto, take_then: bool) -> list[onnx.NodeProto]:
    """The nodes of the If `node`'s chosen branch as main-graph nodes: the branch's own values
    renamed apart (prefixed by the If's first output), its initializers as Constant nodes, and an
    Identity per If output from the branch's output."""
    attr = "then_branch" if take_then else "else_branch"
    branch = onnx.GraphProto()
    branch.CopyFrom(next(a.g for a in node.attribute if a.name == attr))
    tag = f"{node.output[0]}__{attr}/"     # an output name: unique in the graph
    local = {t.name for t in branch.initializer}
    local.update(o for n in branch.node for o in n.output if o)
    rename(branch, {v: tag + v for v in local})
    nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in branch.initializer]
    nodes += list(branch.node)
    for out, res in zip(node.output, branch.output):
        if out:
            nodes.append(helper.make_node("Identity", [res.name], [out]))
    return nodes


def _reads(node: onnx.NodeProto) -> set[str]:
    """Every value name `node` reads, its subgraphs' outer reads included (not the values
    its subgraphs define themselves)."""
    names, local = {n for n in node.input if n}, set()
    stack = subgraphs(node)
    while stack:
        g = stack.pop()
        local.update(i.name for i in g.input)
        local.update(t.name for t in g.initializer)
        for n in g.node:
            names.update(i for i in n.input if i)
            local.update(o for o in n.output if o)
            stack.extend(subgraphs(n))
    return names - (local - {n for n in node.input if n})


class _Cut:
    """A data-dependent op of the prefix: its outputs (all named), the count, how to trim."""

    def __init__(self, node: onnx.NodeProto, outputs: list[str], count: str):
        self.op = node.op_type
        self.outputs = outputs
        self.count = count
        self.axis = next((a.i for a in node.attribute if a.name == "axis"), None)
        self.source = node.input[0]

    def trim(self, padded: Mapping[str, np.ndarray], count: int) -> dict[str, np.ndarray]:
        out = {}
        for k, name in enumerate(self.outputs):
            a = padded[name]
            if self.op == "NonZero":
                a = a[:, :count]
            elif self.op == "NonMaxSuppression":
                a = a[:count]
            elif k == 0:    # Unique's Y: along its axis
                a = np.take(a, np.arange(count), axis=0 if self.axis is None else self.axis)
            elif k != 2:    # indices, counts (inverse_indices is exact)
                a = a[:count]
            out[name] = np.ascontiguousarray(a)
        return out


def _value_info(name: str, typed: tuple[int, int] | None) -> onnx.ValueInfoProto:
    """A graph output declared with its element type and rank (dims free), or untyped."""
    if typed is None:
        return helper.make_empty_tensor_value_info(name)
    elem, rank = typed
    return helper.make_tensor_value_info(name, elem, [f"{name}_d{d}" for d in range(rank)])


def _elem_types(proto: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    """(ONNX element type, rank) of the graph's values, as onnx's shape inference finds
    them."""
    try:
        g = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:   # noqa: BLE001 - inference is a help here, Kiln's own checks follow
        g = proto.graph
    types = {t.name: (t.data_type, len(t.dims)) for t in g.initializer}
    for v in list(g.input) + list(g.value_info) + list(g.output):
        tt = v.type.tensor_type if v.type.HasField("tensor_type") else None
        if tt is not None and tt.elem_type and tt.HasField("shape"):
            types[v.name] = (tt.elem_type, len(tt.shape.dim))
    return types


class _NoPrefix:
    """The prefix of a model whose first cut is an If on a graph input: nothing to run."""
    input_names: list[str] = []
    output_names: list[str] = []

    def run(self, feeds):
        return []

    def set_num_threads(self, n: int) -> None:
        pass

    def summary(self) -> str:
        return "(nothing: the If's condition is a graph input)"


class StagedModel:
    """A model split at its data-dependent-size ops (module doc); `run` as CompiledModel's.
    Not thread-safe (one run at a time)."""

    def __init__(self, proto: onnx.ModelProto, compile_fn, options: dict,
                 input_shapes: Mapping | None = None, constants: Mapping | None = None):
        self.name = proto.graph.name or "model"
        self._proto = proto
        self._compile_fn = compile_fn
        self._options = options
        self._input_shapes = dict(input_shapes or {})
        self._constants = {k: np.asarray(v) for k, v in (constants or {}).items()}
        g = proto.graph
        init = {t.name: t for t in g.initializer}
        self._inputs = [i.name for i in g.input if i.name not in init]
        self.output_names = [o.name for o in g.output]
        # late: nodes downstream of a data-dependent op's outputs
        late_values: set[str] = set()
        early, late, self._cuts = [], [], []
        for node in g.node:
            if _reads(node) & late_values or is_gated_if(node):
                late.append(node)
                late_values.update(o for o in node.output if o)
                continue
            if is_data_dependent(node):
                late_values.update(o for o in node.output if o)
            early.append(node)
        # gated Ifs whose condition the prefix (or a graph input) gives: resolved per run
        self._conds = sorted({n.input[0] for n in late if is_gated_if(n)
                              and n.input[0] not in late_values})
        produced_late = {o for n in late for o in n.output if o}
        needed_late = set().union(*(_reads(n) for n in late)) - produced_late if late else set()
        # constants (initializers, Constant nodes fed only by constants) are copied into the
        # suffix rather than passed: a shape they decide stays known when it is compiled
        const_nodes, const_values = [], set(init)
        for node in early:
            if not is_data_dependent(node) and not subgraphs(node) and all(
                    i in const_values for i in node.input if i):
                const_nodes.append(node)
                const_values.update(o for o in node.output if o)
        prefix_nodes = []
        for k, node in enumerate(early):
            if not is_data_dependent(node):
                prefix_nodes.append(node)
                continue
            n_out = {"NonZero": 1, "Unique": 4, "NonMaxSuppression": 1}[node.op_type]
            outs = list(node.output) + [""] * (n_out - len(node.output))
            outs = [o or f"{node.name or node.op_type}__kiln_unused{k}_{j}"
                    for j, o in enumerate(outs)]
            count = f"{outs[0]}__kiln_count"
            rewritten = onnx.NodeProto()
            rewritten.CopyFrom(node)
            rewritten.domain = DOMAIN
            del rewritten.output[:]
            rewritten.output.extend(outs + [count])
            prefix_nodes.append(rewritten)
            self._cuts.append(_Cut(node, outs, count))
        cut_outs = {o for c in self._cuts for o in c.outputs}
        graph_inputs = set(self._inputs)
        # what the prefix must hand on: graph outputs it makes, values the suffix reads
        wanted = [o for o in self.output_names if o not in graph_inputs and o not in
                  produced_late]
        wanted += sorted(v for v in needed_late if v not in graph_inputs and v not in
                         const_values and v not in wanted)
        # a gated If's condition is read at run time, a constant one too
        wanted += [c for c in self._conds if c not in graph_inputs and c not in init
                   and c not in wanted]
        self._suffix_needs = sorted(needed_late - const_values)
        self._passed = [v for v in wanted if v not in cut_outs]
        prefix_outputs = self._passed + [o for c in self._cuts for o in c.outputs] + \
            [c.count for c in self._cuts]
        types = _elem_types(proto)
        i64 = onnx.TensorProto.INT64
        for c in self._cuts:
            types.update({o: (i64, 1) for o in c.outputs + [c.count]})
            if c.op != "Unique":
                types[c.outputs[0]] = (i64, 2)
            elif c.source in types:
                elem, rank = types[c.source]
                types[c.outputs[0]] = (elem, 1 if c.axis is None else rank)
        self._prefix_proto = self._model(prefix_nodes, list(g.input), list(g.initializer),
                                         prefix_outputs, extra_domain=True, types=types)
        self._late = late
        self._const_nodes = [n for n in const_nodes if set(n.output) & self._reach(late,
                                                                                    const_nodes)]
        self._suffixes: dict[tuple[bool, ...], object] = {}
        self._prefix = None
        self._check_supported()

    @staticmethod
    def _reach(late, const_nodes) -> set[str]:
        """The constant values that the late nodes read, directly or through constants."""
        need = set().union(*(_reads(n) for n in late)) if late else set()
        for node in reversed(const_nodes):
            if set(node.output) & need:
                need.update(i for i in node.input if i)
        return need

    def _model(self, nodes, inputs, initializers, outputs, extra_domain=False,
               types: Mapping[str, int] | None = None) -> onnx.ModelProto:
        types = types or {}
        graph = helper.make_graph(nodes, self.name, inputs, [_value_info(o, types.get(o))
                                                             for o in outputs],
                                  initializer=initializers)
        opsets = list(self._proto.opset_import)
        if extra_domain:
            opsets.append(helper.make_opsetid(DOMAIN, 1))
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = self._proto.ir_version
        model.functions.extend(self._proto.functions)
        return model

    def _check_supported(self) -> None:
        """Unsupported ops fail now, not at the first run."""
        from ..onnx.load import check_supported, model_opset
        probe = onnx.ModelProto()
        probe.CopyFrom(self._proto)
        graphs = [probe.graph]     # the main graph and, through gated Ifs, their branches
        while graphs:
            for node in graphs.pop().node:
                if is_data_dependent(node):
                    node.domain = DOMAIN
                elif is_gated_if(node):
                    graphs.extend(subgraphs(node))
        check_supported(probe, model_opset(self._proto))

    # ------------------------------------------------------------------ running
    @property
    def input_names(self) -> list[str]:
        return list(self._inputs)

    def _feeds(self, inputs) -> dict[str, np.ndarray]:
        given = given_inputs(self.name, self._inputs, self._constants, inputs)
        feeds = {**self._constants, **{k: np.asarray(v) for k, v in given.items()}}
        missing = [n for n in self._inputs if n not in feeds]
        if missing:
            raise KernelArgumentError(f"model '{self.name}': inputs {missing} were not given")
        return feeds

    def _type_prefix_outputs(self, feeds: Mapping[str, np.ndarray]) -> None:
        """Types for the prefix outputs that shape inference could not type with free input
        dims (a TopK whose k is computed): inferred again with this run's input shapes (their
        element types and ranks do not change with the shapes)."""
        untyped = [o for o in self._prefix_proto.graph.output
                   if not o.type.HasField("tensor_type")]
        if not untyped:
            return
        concrete = onnx.ModelProto()
        concrete.CopyFrom(self._proto)
        for inp in concrete.graph.input:
            if inp.name in feeds and inp.type.HasField("tensor_type"):
                shape = inp.type.tensor_type.shape
                shape.Clear()
                for d in np.shape(feeds[inp.name]):
                    shape.dim.add().dim_value = int(d)
        types = _elem_types(concrete)
        for o in untyped:
            if o.name in types:
                o.CopyFrom(_value_info(o.name, types[o.name]))

    def run(self, inputs) -> list[np.ndarray]:
        """Run the prefix, trim the data-dependent outputs to their counts, run the suffix;
        fresh arrays in graph-output order."""
        feeds = self._feeds(inputs)
        if self._prefix is None and not self._prefix_proto.graph.output:
            self._prefix = _NoPrefix()
        if self._prefix is None:
            self._type_prefix_outputs(feeds)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*is declared without a type")
                self._prefix = self._compile_fn(self._prefix_proto, self._input_shapes,
                                                self._constants)
        prefix_in = self._prefix.input_names
        outs = self._prefix.run({n: feeds[n] for n in prefix_in})
        values = dict(zip(self._prefix.output_names, outs))
        for cut in self._cuts:
            values.update(cut.trim(values, int(values[cut.count].reshape(-1)[0])))
        values.update({n: feeds[n] for n in self._inputs})
        if self._late:
            key = tuple(self._condition(c, values) for c in self._conds)
            suffix = self._suffixes.get(key)
            if suffix is None:
                suffix = self._suffixes[key] = self._build_suffix(values, dict(zip(
                    self._conds, key)))
            suffix_in = {n: values[n] for n in suffix.input_names}
            values.update(zip(suffix.output_names, suffix.run(suffix_in)))
        return [np.array(values[o]) for o in self.output_names]

    __call__ = run

    def _condition(self, name: str, values: Mapping[str, np.ndarray]) -> bool:
        if name in values:
            a = np.asarray(values[name])
        else:
            t = next((t for t in self._proto.graph.initializer if t.name == name), None)
            if t is None:
                raise KilnError(f"model '{self.name}': the condition '{name}' of an If whose "
                                "branches hold a data-dependent-size op is not known before "
                                "the If; Kiln cannot stage it")
            a = numpy_helper.to_array(t)
        if a.size != 1:
            raise KilnError(f"model '{self.name}': the If condition '{name}' has shape "
                            f"{list(a.shape)}; expected one value")
        return bool(a.reshape(-1)[0])

    def _build_suffix(self, values: Mapping[str, np.ndarray], conds: Mapping[str, bool]):
        """The suffix model for the gated Ifs' condition values `conds` (each such If
        replaced by its chosen branch), its inputs typed by the arrays of this run (dims
        free)."""
        g = self._proto.graph
        late = []
        for node in self._late:
            if is_gated_if(node) and node.input[0] in conds:
                late += _branch_nodes(node, conds[node.input[0]])
            else:
                late.append(node)
        used = set().union(*(_reads(n) for n in late + self._const_nodes))
        inits = [t for t in g.initializer if t.name in used]
        init_names = {t.name for t in inits}
        produced = {o for n in self._const_nodes for o in n.output}
        names = [v for v in self._suffix_needs if v not in init_names and v not in produced
                 and v in used]
        inputs = []
        for v in names:
            a = values[v]
            if v in self._inputs and v in self._input_shapes:
                dims = list(self._input_shapes[v])
            elif v in self._inputs:   # the model's own declaration
                spec = next(i for i in g.input if i.name == v)
                inputs.append(spec)
                continue
            else:
                dims = [f"{v}_d{d}" for d in range(a.ndim)]
            inputs.append(helper.make_tensor_value_info(
                v, helper.np_dtype_to_tensor_dtype(a.dtype), dims))
        outs = [o for o in self.output_names if o in {x for n in late for x in n.output}]
        model = self._model(self._const_nodes + late, inputs, inits, outs,
                            types=_elem_types(self._proto))
        for o in model.graph.output:     # keep the model's declared output types
            decl = next((d for d in g.output if d.name == o.name), None)
            if decl is not None and decl.type.tensor_type.HasField("shape"):
                o.CopyFrom(decl)
        constants = {k: v for k, v in self._constants.items() if k in names}
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*is declared without a type")
            return self._compile_fn(model, {}, constants)

    # ------------------------------------------------------------------ the rest
    def _needs_one(self, what: str) -> KilnError:
        return KilnError(f"model '{self.name}' has ops whose output size depends on the data "
                         f"({', '.join(sorted({c.op for c in self._cuts}))}); it runs in "
                         f"stages compiled separately, so {what} is not available")

    def export(self, path):
        raise self._needs_one("export()")

    def benchmark(self, inputs=None, repeat: int = 20, number: int = 1) -> float:
        """Median seconds of one `run` on `inputs` (required)."""
        if inputs is None:
            raise self._needs_one("benchmark() without inputs=")
        return median_run_seconds(lambda: self.run(inputs), repeat, number)

    def set_num_threads(self, n: int) -> None:
        for part in [self._prefix, *self._suffixes.values()]:
            if part is not None:
                part.set_num_threads(n)

    def summary(self) -> str:
        parts = [f"staged model '{self.name}': cut at "
                 + ", ".join([f"{c.op} -> {c.outputs[0]}" for c in self._cuts]
                             + [f"If on {c}" for c in self._conds])]
        labelled = [("prefix", self._prefix)] + [(f"suffix {k}", p) for k, p in
                                                 self._suffixes.items()]
        for label, part in labelled:
            if part is not None:
                parts.append(f"{label}:")
                parts += ["  " + line for line in part.summary().splitlines()]
        return "\n".join(parts)

    def __repr__(self) -> str:
        return (f"<StagedModel {self.name}: cut at {[c.op for c in self._cuts]}"
                f"{f' and If on {self._conds}' if self._conds else ''}>")

