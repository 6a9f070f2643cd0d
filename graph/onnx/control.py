"""ONNX control flow (If, Loop, Scan) inlined into the graph at conversion time.

Kiln compiles static graphs, so a subgraph runs by being converted in place: If converts
the branch its condition selects, Loop and Scan convert their body once per iteration (the
loop unrolled), each copy's values renamed apart. The condition and the trip count must be
known at compile time: constants (or values computed from constants), or graph inputs that
decide a shape (a Loop's trip count and condition when it has scan outputs, whose length they
set) which are read like any other shape-deciding input (ctx.static). An If whose condition
is only known at run time runs both branches and selects (`where`) when their outputs agree in
shape and type; anything else run-time raises UnsupportedOperatorError naming the node.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ...te.errors import ModelFormatError, UnsupportedOperatorError
from ..ir import Value
from ..ops.lowbit import ONNX_FORMATS, to_storage
from .core import unsupported_error
from .registry import CONVERTERS, converter
from .quant import converter_key

# more copies than this of a loop body is a loop Kiln should not unroll
MAX_UNROLLED_ITERATIONS = 1024


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graph-valued attributes of `node` (If's branches, Loop/Scan bodies)."""
    found = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            found.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            found.extend(a.graphs)
    return found


def _defined_names(g: onnx.GraphProto, out: set[str]) -> None:
    out.update(i.name for i in g.input)
    out.update(t.name for t in g.initializer)
    for n in g.node:
        out.update(o for o in n.output if o)
        for sub in subgraphs(n):
            _defined_names(sub, out)


def rename(g: onnx.GraphProto, mapping: dict[str, str]) -> None:
    """Rename, in place, every value of `g` (and of its subgraphs) that `mapping` names;
    references to outer-scope values are not in `mapping` and stay as they are."""
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = mapping.get(vi.name, vi.name)
    for t in g.initializer:
        t.name = mapping.get(t.name, t.name)
    for n in g.node:
        n.input[:] = [mapping.get(x, x) for x in n.input]
        n.output[:] = [mapping.get(x, x) for x in n.output]
        for sub in subgraphs(n):
            rename(sub, mapping)


def _check_supported(ctx, g: onnx.GraphProto) -> None:
    """UnsupportedOperatorError listing the op types of `g` (and its subgraphs) that Kiln
    cannot convert (a function body's ops are not checked with the model's)."""
    missing, graphs = {}, [g]
    while graphs:
        for node in graphs.pop().node:
            if converter_key(node.domain, node.op_type) not in CONVERTERS:
                missing.setdefault(node.op_type, node.name or node.op_type)
            graphs.extend(subgraphs(node))
    if missing:
        parts = ", ".join(f"{op} (node '{name}')" for op, name in missing.items())
        raise UnsupportedOperatorError(
            f"this model uses {len(missing)} operator type{'s' if len(missing) > 1 else ''} "
            f"Kiln does not support (opset {ctx.opset}): {parts}, inside node "
            f"'{ctx.node_name}' ({ctx.op_type}).")


def inline_graph(ctx, body: onnx.GraphProto, inputs: list[Value], tag: str) -> list[Value]:
    """Convert the nodes of `body` in place with its formal inputs bound to `inputs`; returns
    the Values of its outputs. Its values get fresh names under `tag`, so the same body can
    be inlined once per loop iteration."""
    if len(inputs) != len(body.input):
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): its body takes "
                               f"{len(body.input)} inputs, {len(inputs)} are given")
    names: set[str] = set()
    _defined_names(body, names)
    g = onnx.GraphProto()
    g.CopyFrom(body)
    rename(g, {n: ctx._fresh(f"{tag}/{n}") for n in sorted(names)})
    _check_supported(ctx, g)
    saved = ctx.node_name, ctx.op_type, ctx.output_names, ctx.node_proto
    try:
        for formal, actual in zip(g.input, inputs):
            ctx.values[formal.name] = actual
        for t in g.initializer:
            ctx.onnx_dtype(t.data_type)   # a clear error for a type Kiln lacks
            arr = numpy_helper.to_array(t)
            if t.data_type in ONNX_FORMATS:     # a low-bit type: its storage (graph/ops/lowbit.py)
                arr = to_storage(arr, ONNX_FORMATS[t.data_type][0])
                ctx.lowbit[t.name] = ONNX_FORMATS[t.data_type][0]
            ctx.values[t.name] = ctx.const(np.array(arr, order="C"), name=t.name)
        for k, node in enumerate(g.node):
            node.name = f"{tag}/{node.name or f'{node.op_type}_{k}'}"
            ctx.convert(node, k)
        missing = [o.name for o in g.output if o.name not in ctx.values]
        if missing:
            raise ModelFormatError(f"node '{saved[0]}' ({saved[1]}): its subgraph's outputs "
                                   f"{missing} are never computed")
        return [ctx.values[o.name] for o in g.output]
    finally:
        ctx.node_name, ctx.op_type, ctx.output_names, ctx.node_proto = saved


def name_outputs(ctx, values: list[Value]) -> tuple[Value, ...]:
    """Each result as an identity named after the node's output (a subgraph's output may be
    a constant, an outer value or a graph input, which the node's output must not alias)."""
    names = ctx.output_names
    out = []
    try:
        for name, v in zip(names, values):
            ctx.output_names = [name]
            # (a sequence or an optional, onnx_ops_sequence, is a compile-time structure)
            out.append(ctx.emit("identity", [v], final=True)
                       if name and isinstance(v, Value) else v)
    finally:
        ctx.output_names = names
    return tuple(out)


def _known(ctx, v: Value, what: str, shape_deciding: bool) -> np.ndarray:
    """The compile-time value of a condition or trip count; a run-time one is unsupported
    unless it decides a shape (then it is specialised by value, as Reshape's shape is)."""
    if shape_deciding:
        return ctx.static(v, what)
    value = ctx.try_static(v)
    if value is None:
        raise unsupported_error(ctx, f"a {what} known only at run time (computed from a graph "
                                "input)")
    return value


def _scalar_bool(ctx, arr: np.ndarray, what: str) -> bool:
    if arr.size != 1:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): its {what} has "
                               f"shape {list(arr.shape)}; expected one value")
    return bool(arr.reshape(-1)[0])


@converter("If")
def _if(ctx, cond, then_branch, else_branch):
    known = ctx.try_static(cond)
    if known is not None:
        branch = then_branch if _scalar_bool(ctx, known, "condition") else else_branch
        return name_outputs(ctx, inline_graph(ctx, branch, [], ctx.node_name))
    # a run-time condition: both branches, then a select per output
    then_out = inline_graph(ctx, then_branch, [], f"{ctx.node_name}/then")
    else_out = inline_graph(ctx, else_branch, [], f"{ctx.node_name}/else")
    if cond.size != 1:
        raise ModelFormatError(f"node '{ctx.node_name}' (If): its condition has shape "
                               f"{list(cond.shape)}; expected one value")
    if any(not isinstance(a, Value) or not isinstance(b, Value) or
           (a.shape, a.dtype) != (b.shape, b.dtype) for a, b in zip(then_out, else_out)):
        # the condition decides the outputs' shapes (or which sequence/optional they are):
        # read it as a shape-deciding input
        # (specialised by value); the branch not taken is left to dead-code elimination
        taken = _scalar_bool(ctx, ctx.static(cond, "cond"), "condition")
        return name_outputs(ctx, then_out if taken else else_out)
    if cond.shape != ():
        cond = ctx.emit("reshape", [cond], {"shape": ()})
    names = ctx.output_names
    out = []
    try:
        for name, a, b in zip(names, then_out, else_out):
            ctx.output_names = [name]
            out.append(ctx.emit("where", [cond, a, b], final=bool(name)))
    finally:
        ctx.output_names = names
    return tuple(out)


def stack(ctx, items: list[Value], axis: int) -> Value:
    """The values (of one shape) stacked along a new axis `axis`."""
    shape = items[0].shape
    axis = axis + len(shape) + 1 if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): scan output axis "
                               f"{axis} is out of range for rank {len(shape) + 1}")
    lifted = [ctx.emit("reshape", [v], {"shape": shape[:axis] + (1,) + shape[axis:]})
              for v in items]
    if len(lifted) == 1:
        return lifted[0]
    return ctx.emit("concat", lifted, {"axis": axis})


@converter("Loop")
def _loop(ctx, trip=None, cond=None, *carried, body):
    n_scan = len(body.output) - 1 - len(carried)
    # the iteration count sets the scan outputs' length (or a carried sequence's)
    shape_deciding = n_scan > 0 or any(not isinstance(v, Value) for v in carried)
    limit = None if trip is None else int(
        _known(ctx, trip, "trip count", shape_deciding).reshape(-1)[0])
    cond_in = ctx.const(np.array(True)) if cond is None else cond
    going = _scalar_bool(ctx, _known(ctx, cond_in, "loop condition", shape_deciding),
                         "condition")
    values, scans, i = list(carried), [[] for _ in range(n_scan)], 0
    while going and (limit is None or i < limit):
        if i >= MAX_UNROLLED_ITERATIONS:
            raise unsupported_error(ctx, f"a Loop of more than {MAX_UNROLLED_ITERATIONS} "
                                    "iterations (Kiln unrolls loops)")
        counter = ctx.const(np.array(i, dtype=np.int64))
        outs = inline_graph(ctx, body, [counter, cond_in] + values, f"{ctx.node_name}/{i}")
        cond_in, values = outs[0], outs[1:1 + len(carried)]
        for k, v in enumerate(outs[1 + len(carried):]):
            scans[k].append(v)
        going = _scalar_bool(ctx, _known(ctx, cond_in, "loop condition", shape_deciding),
                             "condition")
        i += 1
    if n_scan and i == 0:
        raise unsupported_error(ctx, "a Loop with scan outputs that runs no iteration (empty "
                                "scan outputs)")
    return name_outputs(ctx, list(values) + [stack(ctx, s, 0) for s in scans])


def take_index(ctx, x: Value, axis: int, index: int) -> Value:
    """x[..., index, ...] along `axis`, the axis dropped."""
    rank = len(x.shape)
    starts, ends = [0] * rank, list(x.shape)
    starts[axis], ends[axis] = index, index + 1
    y = ctx.emit("slice", [x], {"starts": tuple(starts), "ends": tuple(ends),
                                "steps": (1,) * rank})
    return ctx.emit("reshape", [y], {"shape": x.shape[:axis] + x.shape[axis + 1:]})


def _scan_once(ctx, body, states, scan_inputs, in_axes, in_dirs, out_axes, out_dirs, tag):
    """One Scan (opset 9 form) over `scan_inputs`; returns final states + scan outputs."""
    lengths = {x.shape[a] for x, a in zip(scan_inputs, in_axes)}
    if len(lengths) != 1:
        raise ModelFormatError(f"node '{ctx.node_name}' (Scan): scan inputs have different "
                               f"lengths {sorted(lengths)} along their scan axes")
    steps = lengths.pop()
    if steps == 0 or steps > MAX_UNROLLED_ITERATIONS:
        raise unsupported_error(ctx, f"a Scan of {steps} iterations (Kiln unrolls 1 to "
                                f"{MAX_UNROLLED_ITERATIONS})")
    n_scan_out = len(body.output) - len(states)
    collected = [[] for _ in range(n_scan_out)]
    for t in range(steps):
        slices = [take_index(ctx, x, a, steps - 1 - t if d else t)
                  for x, a, d in zip(scan_inputs, in_axes, in_dirs)]
        outs = inline_graph(ctx, body, list(states) + slices, f"{tag}/{t}")
        states = outs[:len(states)]
        for k, v in enumerate(outs[len(states):]):
            collected[k].append(v)
    stacked = [stack(ctx, c[::-1] if d else c, a)
               for c, a, d in zip(collected, out_axes, out_dirs)]
    return list(states) + stacked


def _norm_axes(ctx, axes, n: int, ranks: list[int], what: str) -> list[int]:
    axes = list(axes) if axes is not None else [0] * n
    if len(axes) != n:
        raise ModelFormatError(f"node '{ctx.node_name}' (Scan): {what} has {len(axes)} "
                               f"entries for {n} values")
    out = []
    for a, r in zip(axes, ranks):
        if not -r <= a < r:
            raise ModelFormatError(f"node '{ctx.node_name}' (Scan): {what} {a} is out of "
                                   f"range for rank {r}")
        out.append(a % r)
    return out


@converter("Scan")
def _scan(ctx, *inputs, body, num_scan_inputs, scan_input_axes=None,
          scan_input_directions=None, scan_output_axes=None, scan_output_directions=None,
          directions=None):
    m = int(num_scan_inputs)
    if ctx.opset < 9:
        return _scan8(ctx, inputs, body, m, directions)
    states, scan_inputs = list(inputs[:len(inputs) - m]), list(inputs[len(inputs) - m:])
    n_out = len(body.output) - len(states)
    in_axes = _norm_axes(ctx, scan_input_axes, m, [len(x.shape) for x in scan_inputs],
                         "scan_input_axes")
    in_dirs = list(scan_input_directions or [0] * m)
    out_dirs = list(scan_output_directions or [0] * n_out)
    out_axes = list(scan_output_axes or [0] * n_out)
    return name_outputs(ctx, _scan_once(ctx, body, states, scan_inputs, in_axes, in_dirs,
                                         out_axes, out_dirs, ctx.node_name))


def _scan8(ctx, inputs, body, m: int, directions):
    """Scan-8: a leading batch axis on every input and output, time along axis 1, and an
    optional sequence_lens input (only full lengths are supported)."""
    lens, rest = inputs[0], list(inputs[1:])
    states, scan_inputs = rest[:len(rest) - m], rest[len(rest) - m:]
    batch = (states + scan_inputs)[0].shape[0]
    if lens is not None:
        known = ctx.try_static(lens)
        full = scan_inputs[0].shape[1] if scan_inputs else 0
        if known is None or np.any(known != full):
            raise unsupported_error(ctx, "Scan-8 with sequence_lens shorter than the sequence")
    dirs = list(directions or [0] * m)
    n_out = len(body.output) - len(states)
    results = []
    for b in range(batch):
        per = _scan_once(ctx, body, [take_index(ctx, s, 0, b) for s in states],
                         [take_index(ctx, x, 0, b) for x in scan_inputs], [0] * m, dirs,
                         [0] * n_out, [0] * n_out, f"{ctx.node_name}/b{b}")
        results.append(per)
    return name_outputs(ctx, [stack(ctx, [r[k] for r in results], 0)
                               for k in range(len(results[0]))])

