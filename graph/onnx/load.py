"""Load an ONNX model into Kiln's graph IR with static shapes.

`load_onnx(path_or_proto, input_shapes=None, values=None)`: parse (ModelFormatError naming the
file if that fails), run onnx.checker, check every operator is supported (one
UnsupportedOperatorError that lists them all), fix symbolic input dims (to the given shapes, or
1), run onnx shape inference as a cross-check, then convert node by node with the converters in
`onnx_ops.py`. Graph inputs that decide shapes are read from `values` (see load_onnx);
graph/runtime/dynamic.py compiles a model per input shape and value on the fly.
"""
from __future__ import annotations

import logging
import math
import os
import re
import warnings
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...te import dtype as _dt
from ...te.errors import KilnError, ModelFormatError, UnsupportedOperatorError
from ..ops import lowbit, core as ops
from . import converters  # noqa: F401 - registers every converter
from ..ir import Graph, Node, Value
from .functions import expand_functions
from .registry import CONVERTERS
from .control import subgraphs
from . import sequence as _seq
from .quant import converter_key
from ..reference import run_node

log = logging.getLogger(__name__)

_ONNX_DOMAINS = ("", "ai.onnx")


def read_model(model, source: str) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    path = os.fspath(model)
    if not os.path.exists(path):
        raise ModelFormatError(f"model file '{path}' does not exist")
    try:
        return onnx.load(path)
    except Exception as exc:  # protobuf raises DecodeError, RuntimeError, ... on bad bytes
        raise ModelFormatError(f"cannot read ONNX model '{path}': {type(exc).__name__}: {exc}. "
                               "The file is truncated or not an ONNX protobuf; re-export it."
                               ) from exc


def model_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in _ONNX_DOMAINS:
            return int(imp.version)
    return 1


def check_supported(model: onnx.ModelProto, opset: int) -> None:
    """Raise one UnsupportedOperatorError listing every unsupported op type and its nodes."""
    missing: dict[str, list[str]] = {}
    graphs = [model.graph]
    while graphs:   # the nodes of If/Loop/Scan bodies too: they are converted in place
        for k, node in enumerate(graphs.pop(0).node):
            if converter_key(node.domain, node.op_type) not in CONVERTERS:
                label = node.op_type if node.domain in _ONNX_DOMAINS else \
                    f"{node.domain}.{node.op_type}"
                missing.setdefault(label, []).append(node.name or f"#{k}")
            graphs.extend(subgraphs(node))
    if not missing:
        return
    parts = []
    for op, names in missing.items():
        word = "node" if len(names) == 1 else "nodes"
        parts.append(f"{op} ({word} " + ", ".join(f"'{n}'" for n in names) + ")")
    n = len(missing)
    staged = sorted(set(missing) & {"NonZero", "Unique", "NonMaxSuppression"})
    hint = (f" {', '.join(staged)}: kiln.compile runs these in stages (a StagedModel) when "
            "they are in the main graph or in If branches, not in a single static graph nor "
            "inside Loop/Scan bodies.") if staged else ""
    raise UnsupportedOperatorError(
        f"this model uses {n} operator type{'s' if n > 1 else ''} Kiln does not support "
        f"(opset {opset}): " + ", ".join(parts) + "." + hint)


def _resolve_inputs(model, given: Mapping[str, Sequence[int]],
                    bound: dict | None = None) -> list[Value]:
    """The graph's tensor inputs; a sequence/optional input (onnx_ops_sequence) is bound in
    `bound` to its list / Value / EMPTY, and its flat tensor Values are among those returned."""
    init = {t.name for t in model.graph.initializer}
    real = [i for i in model.graph.input if i.name not in init]
    unknown = set(given) - {i.name for i in real}
    if unknown:
        raise ModelFormatError(f"input_shapes names {sorted(unknown)} are not model inputs; "
                               f"the inputs are {[i.name for i in real]}")
    values = []
    for inp in real:
        if _seq.is_structured_type(inp.type):
            dtype = onnx_elem_dtype(_seq.element_type(inp.type).elem_type, f"input '{inp.name}'")
            value, flat = _seq.resolve_input(inp, given.get(inp.name, _seq._ABSENT), dtype)
            if bound is not None:
                bound[inp.name] = value
            values += flat
            continue
        tt = inp.type.tensor_type
        dtype = onnx_elem_dtype(tt.elem_type, f"input '{inp.name}'")
        dims = list(tt.shape.dim) if tt.HasField("shape") else None
        want = given.get(inp.name)
        if want is not None:
            want = tuple(int(d) for d in want)
            if dims is not None:
                fixed = [d.dim_value if d.HasField("dim_value") else None for d in dims]
                if len(want) != len(fixed) or any(f is not None and f != w
                                                  for f, w in zip(fixed, want)):
                    raise ModelFormatError(
                        f"input '{inp.name}': given shape {list(want)} does not match the "
                        f"model's {[f if f is not None else '?' for f in fixed]}")
            shape = want
        elif dims is None:
            raise ModelFormatError(f"input '{inp.name}' has no shape in the model; pass "
                                   f"input_shapes={{'{inp.name}': (...)}}")
        else:
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in dims)
            if any(not d.HasField("dim_value") for d in dims):
                log.info("input '%s': symbolic dims resolved to 1 -> %s", inp.name, shape)
        values.append(Value(inp.name, shape, dtype))
    return values


def onnx_elem_dtype(elem_type: int, what: str) -> str:
    """Kiln's dtype for an ONNX element type (a low-bit one: its storage, graph/ops/lowbit.py)."""
    if elem_type in lowbit.ONNX_FORMATS:
        return lowbit.ONNX_FORMATS[elem_type][1]
    try:
        return _dt.canonical(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KilnError, KeyError, TypeError) as exc:
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type else "UNDEFINED"
        raise ModelFormatError(f"{what} has element type {name}, which Kiln does not support; "
                               f"supported: {', '.join(_dt.DTYPES)}") from exc


def _array(t: onnx.TensorProto, what: str) -> np.ndarray:
    onnx_elem_dtype(t.data_type, what)
    arr = numpy_helper.to_array(t)
    if t.data_type in lowbit.ONNX_FORMATS:   # unpacked by numpy_helper; Kiln's storage
        return np.array(lowbit.to_storage(arr, lowbit.ONNX_FORMATS[t.data_type][0]),
                        order="C")
    return np.array(arr, order="C")


# data movement: its outputs hold its (first) low-bit input's format
_LOWBIT_MOVES = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                           "Transpose", "Concat", "Slice", "Gather", "Split", "Expand", "Tile",
                           "Pad", "Dropout"})
# ops that may read or write a low-bit value (graph/ops/lowbit.py): the conversions, and data
# movement, which is exact on the stored bytes
LOWBIT_OPS = frozenset({
    "Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "Constant", "Identity",
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Slice", "Gather",
    "Split", "Expand", "Tile", "Shape", "Size", "Pad", "Dropout", "ConstantOfShape", "IsInf",
    "IsNaN", "com.microsoft.QuantizeLinear", "com.microsoft.DequantizeLinear"})


class InputValueNeeded(ModelFormatError):
    """A node needs the value of a graph input at compile time (a shape-deciding input such
    as Reshape's shape) and none was given; `input_name` names the graph input."""

    def __init__(self, message: str, input_name: str):
        super().__init__(message)
        self.input_name = input_name

    def __reduce__(self):
        return (InputValueNeeded, (self.args[0], self.input_name))


class ConvertContext:
    """State of one conversion: values by ONNX name, emitted nodes, constants."""

    def __init__(self, opset: int, input_values: Mapping[str, np.ndarray] | None = None):
        self.opset = opset
        self.input_values = input_values or {}
        self.pinned: dict[str, np.ndarray] = {}     # graph inputs whose values were read
        self._from_inputs: set[str] = set()         # static values that depend on them
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.constants: dict[str, np.ndarray] = {}
        self._producer: dict[str, Node] = {}
        self._static: dict[str, np.ndarray] = {}
        self._taken: set[str] = set()
        self.node_name = self.op_type = ""
        self.node_proto: onnx.NodeProto | None = None
        self.output_names: list[str] = []
        self.lowbit: dict[str, str] = {}          # Kiln value name -> low-bit format
        self.onnx_types: dict[str, int] = {}      # ONNX value name -> inferred element type

    def _fresh(self, hint: str) -> str:
        name, k = hint, 0
        while name in self._taken:
            k += 1
            name = f"{hint}.{k}"
        self._taken.add(name)
        return name

    def onnx_dtype(self, elem_type: int) -> str:
        return onnx_elem_dtype(elem_type, f"node '{self.node_name}' ({self.op_type})")

    def emit(self, op: str, inputs, attrs=None, n_out: int = 1, final: bool = False):
        """Append a node; `final` names its outputs after the ONNX node's outputs."""
        if final:  # ONNX names were reserved up front, so they are used as they are
            names = [n or self._fresh(f"{self.node_name}/{op}")
                     for n in self.output_names[:n_out]]
            names += [self._fresh(f"{self.node_name}/{op}") for _ in range(n_out - len(names))]
        else:
            names = [self._fresh(f"{self.node_name}/{op}") for _ in range(n_out)]
        attrs = dict(attrs or {})
        outs = ops.make_outputs(op, inputs, attrs, names, self.node_name)
        node = Node(op, tuple(inputs), outs, attrs, self._fresh(f"{self.node_name}:{op}"))
        self.nodes.append(node)
        for o in outs:
            self._producer[o.name] = node
        return outs if n_out > 1 else outs[0]

    def const(self, array, final: bool = False, name: str | None = None) -> Value:
        arr = np.array(array, order="C")
        if arr.dtype == np.float64 and not final and name is None:
            arr = arr.astype(np.float32)  # scalars made by converters follow the model's fp32
        exact = name or (self.output_names[0] if final else None)
        v = Value(exact or self._fresh(f"{self.node_name}/const"), arr.shape,
                  _dt.canonical(arr.dtype))
        self.constants[v.name] = arr
        return v

    def static(self, v: Value, what: str) -> np.ndarray:
        """The compile-time value of `v`: a constant, computed from constants, or from graph
        inputs whose values were given (`input_values`; each one read is recorded in
        `pinned`). InputValueNeeded if it depends on a graph input whose value is not given."""
        return self._evaluate(v, what, use_inputs=True)

    def try_static(self, v: Value) -> np.ndarray | None:
        """The value of `v` if it follows from constants alone, else None (a runtime value);
        never reads or pins a graph input's value."""
        return self._evaluate(v, "", use_inputs=False)

    def _evaluate(self, v: Value, what: str, use_inputs: bool) -> np.ndarray | None:
        if v.name in self.constants:
            return self.constants[v.name]
        if v.name in self._static:
            if not use_inputs and v.name in self._from_inputs:
                return None
            return self._static[v.name]
        node = self._producer.get(v.name)
        if node is None:
            return self._input_value(v, what) if use_inputs else None
        args = [None if i is None else self._evaluate(i, what, use_inputs) for i in node.inputs]
        if any(a is None and i is not None for a, i in zip(args, node.inputs)):
            return None
        tainted = any(i is not None and i.name in self._from_inputs for i in node.inputs)
        for out, arr in zip(node.outputs, run_node(node, args)):
            self._static[out.name] = arr
            if tainted:
                self._from_inputs.add(out.name)
        return self._static[v.name]

    def _input_value(self, v: Value, what: str) -> np.ndarray:
        """The given value of graph input `v` (pinned from now on)."""
        if v.name not in self.input_values:
            raise InputValueNeeded(
                f"node '{self.node_name}' ({self.op_type}) needs its '{what}' input "
                f"('{v.name}') at compile time, but it comes from graph input '{v.name}'. "
                f"Pass its value with kiln.compile(model, constants={{'{v.name}': ...}}); "
                "without it, kiln.compile specialises the model on the value seen at run "
                "time.", v.name)
        arr = np.asarray(self.input_values[v.name])
        if arr.shape != v.shape or _dt.canonical(arr.dtype) != v.dtype:
            cast = arr.astype(v.dtype) if arr.shape == v.shape else None
            if cast is None or not np.array_equal(cast, arr):
                raise ModelFormatError(
                    f"the value given for input '{v.name}' is {arr.dtype}{list(arr.shape)}; "
                    f"the model declares {v.dtype}{list(v.shape)}")
            arr = cast
        arr = np.array(arr, order="C")
        self.pinned[v.name] = self._static[v.name] = arr
        self._from_inputs.add(v.name)
        return arr

    def convert(self, node: onnx.NodeProto, index: int) -> None:
        self.node_name = node.name or f"{node.op_type}_{index}"
        self.op_type = node.op_type
        self.node_proto = node      # for converters that expand the op's ONNX function body
        self.output_names = list(node.output)
        try:
            inputs = [self.values[n] if n else None for n in node.input]
        except KeyError as exc:
            raise ModelFormatError(f"node '{self.node_name}' ({node.op_type}) reads "
                                   f"{exc.args[0]!r}, which nothing defines") from None
        while inputs and inputs[-1] is None:
            inputs.pop()
        key = converter_key(node.domain, node.op_type)
        _seq.check_inputs(self, key, inputs)
        if key == "Identity" and inputs and _seq.is_structured(inputs[0]):
            self.values[node.output[0]] = inputs[0]     # a sequence/optional: the same one
            return
        formats = self._lowbit_guard(node, key, inputs)
        attrs = {}
        made = None     # the low-bit format of a Constant/ConstantOfShape's value
        for a in node.attribute:
            val = helper.get_attribute_value(a)
            if isinstance(val, bytes):
                val = val.decode()
            elif isinstance(val, onnx.TensorProto):
                if val.data_type in lowbit.ONNX_FORMATS:
                    made = lowbit.ONNX_FORMATS[val.data_type][0]
                val = _array(val, f"attribute '{a.name}' of node '{self.node_name}'")
            elif isinstance(val, list):
                val = tuple(v.decode() if isinstance(v, bytes) else v for v in val)
            attrs[a.name] = val
        try:
            result = CONVERTERS[converter_key(node.domain, node.op_type)](self, *inputs,
                                                                         **attrs)
        except TypeError as exc:
            raise ModelFormatError(f"node '{self.node_name}' ({node.op_type}, opset "
                                   f"{self.opset}) has inputs/attributes Kiln does not expect: "
                                   f"{exc}") from exc
        results = result if isinstance(result, tuple) else (result,)
        for name, val in zip(node.output, results):
            if name:
                self.values[name] = val
                if not isinstance(val, Value):
                    continue        # a sequence or an optional (onnx_ops_sequence)
                fmt = self._lowbit_format(name)
                if fmt is None and key in ("Constant", "ConstantOfShape"):
                    fmt = made
                if fmt is None and key in _LOWBIT_MOVES and formats:
                    fmt = formats[0]     # data movement keeps its input's format
                if fmt is not None and val is not None:
                    self.lowbit.setdefault(val.name, fmt)

    def _lowbit_format(self, onnx_name: str) -> str | None:
        fmt = lowbit.ONNX_FORMATS.get(self.onnx_types.get(onnx_name, 0))
        return fmt and fmt[0]

    def _lowbit_guard(self, node: onnx.NodeProto, key: str, inputs) -> list[str]:
        """The low-bit formats `node` reads; a clean error if it reads or writes one and is
        not an op that understands them (LOWBIT_OPS)."""
        read = [(n, self.lowbit[v.name]) for n, v in zip(node.input, inputs)
                if isinstance(v, Value) and v.name in self.lowbit]
        written = [(n, f) for n in node.output if n and (f := self._lowbit_format(n))]
        if (read or written) and key not in LOWBIT_OPS:
            name, fmt = (read or written)[0]
            raise ModelFormatError(
                f"node '{self.node_name}' ({node.op_type}) {'reads' if read else 'writes'} "
                f"'{name}' of element type {lowbit.ONNX_NAME[fmt]}, which Kiln does not "
                f"support in {node.op_type}; it takes low-bit types only in Cast, CastLike, "
                "QuantizeLinear, DequantizeLinear and data movement (Reshape, Transpose, "
                "Gather, Concat, ...)")
        return [f for _, f in read]


def load_onnx(model, input_shapes: Mapping[str, Sequence[int]] | None = None,
              name: str | None = None,
              values: Mapping[str, np.ndarray] | None = None,
              proto: onnx.ModelProto | None = None, checked: bool = False) -> Graph:
    """Convert an ONNX file path or ModelProto to a Graph with static shapes.

    proto: the ModelProto already read from the path `model` (it is not read again).
    checked: the model passed onnx.checker already (a DynamicModel checks its model once,
    graph/onnx/checked.py); it is checked again only if conversion changed it.

    input_shapes of a sequence-typed input: a list of shapes, one per element; of an
    optional-typed one: its shape, or None (or nothing) when it is empty. Such inputs become
    the tensor inputs `name[k]` (a sequence's elements) or `name`, and sequence outputs the
    tensor outputs `name[k]` (graph/onnx/sequence.py).

    values: values of graph inputs that conversion may fix at compile time. A node input that
    decides a shape (Reshape's shape, Slice's starts, Pad's pads, ...) and comes from a graph
    input reads it here; each one read is recorded in `Graph.pinned` and stays a graph input.
    Without a value, InputValueNeeded names the input. Inputs that decide no shape (Clip's
    bounds, Pad's constant value) are never read here: they stay runtime kernel arguments."""
    source = "<ModelProto>" if isinstance(model, onnx.ModelProto) else os.fspath(model)
    read = proto = read_model(model, source) if proto is None else proto
    opset = model_opset(proto)
    proto = expand_functions(proto, lambda domain, op: converter_key(domain, op) in CONVERTERS)
    check_supported(proto, opset)  # first: the most useful message for an exotic model
    proto = _fill_untyped_outputs(proto, source)
    try:
        # the file as read: the checker reads it itself (serialising the proto for it costs
        # ~0.5 s for a 100 MB model, parsing the file ~0.05 s)
        if not (checked and proto is read):
            onnx.checker.check_model(source if proto is read and source != "<ModelProto>"
                                     else proto)
    except onnx.checker.ValidationError as exc:
        raise ModelFormatError(f"ONNX model {source} is invalid: {exc}") from exc
    bound: dict = {}
    inputs = _resolve_inputs(proto, input_shapes or {}, bound)
    _check_value_names(proto, values or {}, {v.name for v in inputs})
    ctx = ConvertContext(opset, values)
    ctx._taken.update(_all_names(proto.graph))
    for t in proto.graph.initializer:
        ctx.values[t.name] = ctx.const(_array(t, f"initializer '{t.name}'"), name=t.name)
        if t.data_type in lowbit.ONNX_FORMATS:
            ctx.lowbit[t.name] = lowbit.ONNX_FORMATS[t.data_type][0]
    for v in inputs:
        ctx.values[v.name] = v
    ctx.values.update(bound)
    inferred = _cross_check_shape_inference(proto, inputs, source)
    ctx.onnx_types = _element_types(proto if inferred is None else inferred)
    for v in inputs:
        if (fmt := ctx._lowbit_format(v.name)) is not None:
            ctx.lowbit[v.name] = fmt
    for k, node in enumerate(proto.graph.node):
        ctx.convert(node, k)
    outputs = []
    for o in proto.graph.output:
        if o.name not in ctx.values:
            raise ModelFormatError(f"graph output '{o.name}' of {source} is never computed")
        value = ctx.values[o.name]
        if isinstance(value, Value) and (value.name == o.name or
                                         not _seq.is_structured_type(o.type)):
            outputs.append(value)
            continue
        # a sequence/optional output: one tensor output per element (onnx_ops_sequence)
        items = value if isinstance(value, list) else [] if value is _seq.EMPTY else [value]
        ctx.node_name, ctx.op_type = f"output {o.name}", "Identity"
        for flat, v in zip(_seq.flat_output_names(o.name, value), items):
            if flat != o.name and flat in ctx._taken:
                raise ModelFormatError(f"graph output '{o.name}' is a sequence, whose "
                                       f"element output '{flat}' clashes with a value name")
            ctx._taken.add(flat)
            ctx.output_names = [flat]
            outputs.append(ctx.emit("identity", [v], final=True))
    graph_name = name or proto.graph.name or "model"
    io_formats = (tuple(ctx.lowbit.get(v.name) for v in inputs),
                  tuple(ctx._lowbit_format(o.name) for o in proto.graph.output))
    return Graph(tuple(inputs), tuple(ctx.nodes), tuple(outputs), ctx.constants, graph_name,
                 pinned=ctx.pinned,
                 io_formats=io_formats if any(io_formats[0] + io_formats[1]) else None)


def _element_types(proto: onnx.ModelProto) -> dict[str, int]:
    """ONNX value name -> element type, for every typed value of the main graph."""
    g = proto.graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(g.input) + list(g.value_info) + list(g.output)
             if v.type.HasField("tensor_type")}
    types.update({t.name: t.data_type for t in g.initializer})
    return types


def _check_value_names(proto: onnx.ModelProto, values: Mapping[str, np.ndarray],
                       flat: set[str] = frozenset()) -> None:
    init = {t.name for t in proto.graph.initializer}
    real = [i.name for i in proto.graph.input if i.name not in init]
    unknown = sorted(set(values) - set(real) - flat)   # flat: a sequence's element inputs
    if unknown:
        raise ModelFormatError(f"constants names {unknown}, which are not inputs of the "
                               f"model; its inputs are {real}")


def _fill_untyped_outputs(proto: onnx.ModelProto, source: str) -> onnx.ModelProto:
    """A copy of `proto` whose graph outputs declared without a type or without a shape
    (onnx.checker requires both; onnxruntime infers them) carry the type onnx's shape
    inference gives them, with a warning; `proto` itself when every output is typed.
    An output whose type inference cannot tell stays as it is (the checker then names it)."""
    def untyped(o: onnx.ValueInfoProto) -> bool:
        if not o.type.HasField("tensor_type"):
            return not o.type.HasField("sequence_type") and not o.type.HasField(
                "optional_type") and not o.type.HasField("map_type")
        return not o.type.tensor_type.HasField("shape")
    missing = [o.name for o in proto.graph.output if untyped(o)]
    if not missing:
        return proto
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        return proto
    found = {v.name: v.type for v in list(inferred.graph.value_info) +
             list(inferred.graph.output)}
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    for out in fixed.graph.output:
        if out.name not in missing:
            continue
        t = found.get(out.name)
        if t is None or not t.tensor_type.elem_type or not t.tensor_type.HasField("shape"):
            continue
        declared = out.type.tensor_type.elem_type
        if declared and declared != t.tensor_type.elem_type:
            continue  # a contradiction the checker/inference will report
        out.type.CopyFrom(t)
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in t.tensor_type.shape.dim]
        message = (f"{source}: graph output '{out.name}' is declared without a "
                   f"{'shape' if declared else 'type'}; using the inferred "
                   f"{onnx.TensorProto.DataType.Name(t.tensor_type.elem_type)}{dims}")
        warnings.warn(message, stacklevel=2)
    return fixed


def _all_names(g: onnx.GraphProto) -> set[str]:
    names = {t.name for t in g.initializer} | {i.name for i in g.input}
    for n in g.node:
        names.update(n.input)
        names.update(n.output)
        names.add(n.name)
    return names


# Initializers of more elements than this are given to the shape-inference cross-check as
# typed graph inputs, not as data: no shape depends on their values (those inputs, a
# Reshape's shape or a Slice's starts, are short), and onnx serialises the whole model and
# parses it back (ResNet-50's 100 MB of weights: 0.45 s of a cold compile's serial start).
CROSS_CHECK_MAX_ELEMENTS = 1024


def _without_large_initializers(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `proto` whose large initializers that are not graph inputs are typed
    graph inputs instead (same types and shapes for shape inference, no data)."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    declared = {i.name for i in fixed.graph.input}
    inits = fixed.graph.initializer
    for k in range(len(inits) - 1, -1, -1):
        t = inits[k]
        if t.name not in declared and math.prod(t.dims) > CROSS_CHECK_MAX_ELEMENTS:
            fixed.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type,
                                                                   list(t.dims)))
            del inits[k]
    return fixed


def _cross_check_shape_inference(proto: onnx.ModelProto, inputs: list[Value], source: str):
    """Run onnx shape inference with the resolved input shapes; it must not find a conflict."""
    fixed = _without_large_initializers(proto)
    shapes = {v.name: v.shape for v in inputs}
    for inp in fixed.graph.input:
        if inp.name in shapes and inp.type.HasField("tensor_type"):
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for d in shapes[inp.name]:
                dims.add().dim_value = d
    try:
        return onnx.shape_inference.infer_shapes(fixed, check_type=True, strict_mode=True)
    except onnx.shape_inference.InferenceError as exc:
        inner = re.search(r"\(op_type:(\w+)\): \[ShapeInferenceError\] Inference error\(s\): "
                          r"\(op_type:", str(exc))
        if inner:   # inside onnx's own function body of an op Kiln converts itself
            log.warning("ONNX shape inference fails inside the function body of %s on %s "
                        "(an onnx issue; Kiln's own inference decides the shapes): %s",
                        inner.group(1), source, exc)
            return None
        raise ModelFormatError(f"ONNX shape inference failed on {source} with input shapes "
                               f"{shapes}: {exc}") from exc
