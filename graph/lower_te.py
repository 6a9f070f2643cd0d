"""Fused graph groups -> TE compute DAGs: one lowering function per graph op, in a table.

Every external input of a group becomes a placeholder (kernel argument), constants included, so
identical groups with different weights produce the same workload key and share one tuning
task. The only exception are 0-d float constants read by binary arithmetic (the `1/sqrt(d)` of
attention, GELU's 0.5): they are folded into the expression as immediates.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from ..te import expr as E
from ..te import ops
from ..te.errors import InternalError, TEError, UnsupportedOperatorError
from ..te.ops import tags, winograd
from ..te.tensor import Tensor, compute, placeholder, reduce_axis
from ..te.tensor import sum as te_sum
from ..te.workload import topo_ops
from .ir import Node, Value
from .passes.fusion import FusedGroup

Operand = Tensor | float | None
Lowering = Callable[[Node, list[Operand]], list[Tensor]]
LOWERINGS: dict[str, Lowering] = {}

# ops whose operands may be Python scalars (they broadcast through te.ops' read_broadcast)
_SCALAR_OPERAND_OPS = frozenset({"add", "sub", "mul", "div", "pow", "max", "min"})


def _lowering(*names: str):
    def deco(fn: Lowering) -> Lowering:
        for name in names:
            LOWERINGS[name] = fn
        return fn
    return deco


def _one(fn: Callable[..., Tensor]) -> Lowering:
    return lambda node, args: [fn(node, *args)]


# -- elementwise -------------------------------------------------------------------------------

_UNARY = {"relu": ops.relu, "neg": ops.neg, "exp": ops.exp, "log": ops.log, "abs": ops.abs,
          "sqrt": ops.sqrt, "reciprocal": ops.reciprocal, "erf": ops.erf, "tanh": ops.tanh,
          "sigmoid": ops.sigmoid, "hard_swish": ops.hard_swish,
          "logical_not": ops.logical_not}
for _name, _fn in _UNARY.items():
    LOWERINGS[_name] = (lambda f: lambda node, args: [f(args[0])])(_fn)


@_lowering("identity")
def _identity(node: Node, args: list[Operand]) -> list[Tensor]:
    x = args[0]
    return [compute(x.shape, lambda *i: x(*i), name="identity", tag=tags.ELEMWISE)]


@_lowering("leaky_relu")
def _leaky_relu(node, args):
    return [ops.leaky_relu(args[0], float(node.attr("alpha", 0.01)))]


@_lowering("hard_sigmoid")
def _hard_sigmoid(node, args):
    return [ops.hard_sigmoid(args[0], float(node.attr("alpha", 0.2)),
                             float(node.attr("beta", 0.5)))]


@_lowering("clip")
def _clip(node, args):
    return [ops.clip(args[0], node.attr("min"), node.attr("max"))]


@_lowering("cast")
def _cast(node, args):
    return [ops.cast(args[0], node.attrs["to"])]


@_lowering("gelu")
def _gelu(node, args):
    x = args[0]
    if node.attr("approximate", "none") != "tanh":
        return [ops.gelu(x)]
    c = math.sqrt(2.0 / math.pi)
    return [compute(x.shape, lambda *i: 0.5 * x(*i) * (1.0 + E.tanh(
        c * (x(*i) + 0.044715 * x(*i) * x(*i) * x(*i)))), name="gelu_tanh", tag=tags.ELEMWISE)]


_BINARY = {"add": ops.add, "sub": ops.subtract, "mul": ops.multiply,
           "max": ops.maximum, "min": ops.minimum, "equal": ops.equal, "less": ops.less,
           "greater": ops.greater, "logical_and": ops.logical_and,
           "logical_or": ops.logical_or}
for _name, _fn in _BINARY.items():
    LOWERINGS[_name] = (lambda f: lambda node, args: [f(args[0], args[1])])(_fn)


@_lowering("pow")
def _pow(node, args):
    a, b = args
    dtype = node.outputs[0].dtype       # the base's type (the base may be a scalar constant)
    if dtype.startswith(("int", "uint")):
        # an integer base: numpy's power in float64 (exact below 2**53), truncated back to
        # the base's dtype as ONNX's Pow gives it
        wide = [ops.cast(t, "float64") if isinstance(t, Tensor) else t for t in (a, b)]
        return [ops.cast(ops.power(*wide), dtype)]
    if isinstance(b, Tensor) and b.dtype != dtype:     # ONNX allows an integer exponent
        b = ops.cast(b, dtype)
    return [ops.power(a, b)]


@_lowering("div")
def _div(node, args):
    a, b = args
    dtype = node.outputs[0].dtype
    if not dtype.startswith(("int", "uint")):
        return [ops.divide(a, b)]

    # ONNX integer Div truncates toward zero; floor division differs when the signs differ
    def trunc(x, y):
        q = E.floordiv(x, y)
        inexact = E.floormod(x, y).ne(0) & (x < 0).ne(y < 0)
        return E.select(inexact, q + 1, q)
    shape = node.outputs[0].shape
    return [compute(shape, lambda *i: trunc(_read(a, i), _read(b, i)), name="div",
                    tag=tags.BROADCAST)]


def _read(t: Operand, out_idx) -> E.Expr:
    """`t` at a numpy-broadcast output point (size-1 dims read index 0); scalars unchanged."""
    if not isinstance(t, Tensor):
        return t
    lead = len(out_idx) - len(t.shape)
    return t(*[0 if d == 1 else out_idx[lead + p] for p, d in enumerate(t.shape)])


@_lowering("where")
def _where(node, args):
    return [ops.where(*args)]


@_lowering("batch_norm")
def _batch_norm(node, args):
    x, scale, bias, mean, var = args
    return [ops.batch_norm_inference(x, mean, var, scale, bias,
                                     float(node.attr("epsilon", 1e-5)), axis=1)]


# -- injective ---------------------------------------------------------------------------------

@_lowering("reshape")
def _reshape(node, args):
    return [ops.reshape(args[0], tuple(node.attrs["shape"]))]


@_lowering("transpose")
def _transpose(node, args):
    return [ops.transpose(args[0], tuple(node.attrs["perm"]))]


@_lowering("broadcast_to")
def _broadcast_to(node, args):
    return [ops.broadcast_to(args[0], node.outputs[0].shape)]


@_lowering("concat")
def _concat(node, args):
    return [ops.concatenate([a for a in args if a is not None], axis=node.attrs["axis"])]


@_lowering("split")
def _split(node, args):
    cuts = list(np.cumsum(node.attrs["sizes"])[:-1].tolist())
    return list(ops.split(args[0], cuts, axis=node.attrs["axis"]))


@_lowering("slice")
def _slice(node, args):
    a = node.attrs
    ends = [None if e < 0 else e for e in a["ends"]]  # the frontend's normal form (see reference)
    return [ops.strided_slice(args[0], list(a["starts"]), ends, list(a["steps"]),
                              axes=list(range(len(ends))))]


@_lowering("gather")
def _gather(node, args):
    return [ops.take(args[0], args[1], axis=node.attrs["axis"])]


@_lowering("gather_nd")
def _gather_nd(node, args):
    """ONNX GatherND: out[b, i, r] = data[b, idx[b, i, 0], ..., idx[b, i, d-1], r] for the
    `batch_dims` leading axes b; negative indices count from the end."""
    data, idx = args
    nb = int(node.attr("batch_dims", 0))
    depth = idx.shape[-1]
    outer = len(idx.shape) - 1                     # batch + index axes of the output

    def wrap(value, extent):
        value = E.cast(value, "int32")
        return E.minimum(E.maximum(E.select(value < 0, value + extent, value), 0), extent - 1)

    def body(*o):
        picks = [wrap(idx(*(o[:outer] + (j,))), data.shape[nb + j]) for j in range(depth)]
        return data(*(o[:nb] + tuple(picks) + o[outer:]))

    return [compute(node.outputs[0].shape, body, name="gather_nd", tag=tags.INJECTIVE)]


@_lowering("pad")
def _pad(node, args):
    x = args[0]
    pads = node.attrs["pads"]
    rank = len(x.shape)
    value = args[1] if len(args) > 1 else node.attr("value", 0.0)   # 0-d tensor: runtime
    return [ops.pad(x, list(pads[:rank]), list(pads[rank:]), value,
                    node.attr("mode", "constant"))]


# -- reductions --------------------------------------------------------------------------------

_REDUCERS = {"reduce_sum": ops.sum, "reduce_mean": ops.mean, "reduce_max": ops.max,
             "reduce_min": ops.min, "reduce_l2": ops.l2_norm}
for _name, _fn in _REDUCERS.items():
    LOWERINGS[_name] = (lambda f: lambda node, args: [
        f(args[0], tuple(node.attrs["axes"]), bool(node.attrs["keepdims"]))])(_fn)


@_lowering("softmax")
def _softmax(node, args):
    return [ops.softmax(args[0], node.attrs["axis"])]


@_lowering("log_softmax")
def _log_softmax(node, args):
    return [ops.log_softmax(args[0], node.attrs["axis"])]


@_lowering("layer_norm")
def _layer_norm(node, args):
    x, scale = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    axes = tuple(range(node.attrs["axis"], len(x.shape)))
    return [ops.layer_norm(x, scale, bias, axes, float(node.attrs["epsilon"]))]


@_lowering("max_pool2d")
def _max_pool(node, args):
    a = node.attrs
    return [ops.max_pool2d(args[0], tuple(a["kernel"]), tuple(a["strides"]), tuple(a["pads"]),
                           tuple(a["dilations"]), bool(a["ceil_mode"]))]


@_lowering("avg_pool2d")
def _avg_pool(node, args):
    a = node.attrs
    return [ops.avg_pool2d(args[0], tuple(a["kernel"]), tuple(a["strides"]), tuple(a["pads"]),
                           tuple(a["dilations"]), bool(a["ceil_mode"]),
                           bool(a.get("count_include_pad", 0)))]


# -- anchors -----------------------------------------------------------------------------------

@_lowering("conv2d")
def _conv2d(node, args):
    a = node.attrs
    return [ops.conv2d_nchw(args[0], args[1], tuple(a["strides"]), tuple(a["pads"]),
                            tuple(a["dilations"]), int(a["groups"]))]


@_lowering("conv_transpose_weight")
def _conv_transpose_weight(node, args):
    a = node.attrs
    return [ops.conv_transpose_weight(args[0], tuple(a["strides"]), tuple(a["dilations"]),
                                      int(a["groups"]), a.get("block") or None)]


@_lowering("conv2d_transpose")
def _conv2d_transpose(node, args):
    a = node.attrs
    return [ops.conv2d_transpose_nchw_packed(args[0], args[1], tuple(a["kernel"]),
                                             tuple(a["strides"]), tuple(a["pads"]),
                                             tuple(a["dilations"]), tuple(a["output_padding"]),
                                             int(a["groups"]))]


@_lowering("conv2d_kpacked")
def _conv2d_kpacked(node, args):
    a = node.attrs
    return [ops.conv2d_nchw_kpacked(args[0], args[1], tuple(a["strides"]), tuple(a["pads"]),
                                    tuple(a["dilations"]))]


@_lowering("conv2d_nchwc")
def _conv2d_nchwc(node, args):
    a = node.attrs
    return [ops.conv2d_nchwc(args[0], args[1], tuple(a["strides"]), tuple(a["pads"]),
                             tuple(a["dilations"]))]


@_lowering("grouped_conv2d_nchwc")
def _grouped_conv2d_nchwc(node, args):
    a = node.attrs
    return [ops.grouped_conv2d_nchwc(args[0], args[1], int(a["per_group"]), tuple(a["strides"]),
                                     tuple(a["pads"]), tuple(a["dilations"]))]


@_lowering("depthwise_conv2d_nchwc")
def _depthwise_conv2d_nchwc(node, args):
    a = node.attrs
    return [ops.depthwise_conv2d_nchwc(args[0], args[1], tuple(a["strides"]),
                                       tuple(a["pads"]), tuple(a["dilations"]))]


@_lowering("winograd_input_transform")
def _winograd_input(node, args):
    return [winograd.winograd_input_transform(args[0], int(node.attrs["m"]),
                                              tuple(node.attrs["pads"]))]


@_lowering("winograd_batch_matmul")
def _winograd_gemm(node, args):
    return [winograd.winograd_batch_matmul(args[0], args[1])]


@_lowering("winograd_output_transform")
def _winograd_output(node, args):
    a = node.attrs
    return [winograd.winograd_output_transform(args[0], int(a["m"]), tuple(a["out_hw"]),
                                               int(a["batch"]))]


@_lowering("to_blocked")
def _to_blocked(node, args):
    return [ops.to_blocked(args[0], int(node.attrs["block"]))]


@_lowering("from_blocked")
def _from_blocked(node, args):
    return [ops.from_blocked(args[0], node.attrs.get("channels") or None)]


@_lowering("matmul")
def _matmul(node, args):
    """numpy matmul semantics (rank-1 operands, broadcast batch dims) as one reduction."""
    a, b = args
    sa = a.shape if len(a.shape) > 1 else (1,) + a.shape
    sb = b.shape if len(b.shape) > 1 else b.shape + (1,)
    out = node.outputs[0].shape
    batch = tuple(np.broadcast_shapes(sa[:-2], sb[:-2]))
    k = reduce_axis(sa[-1], "k")

    def read(t: Tensor, tshape, idx_batch, row, col, lhs: bool):
        own = tshape[:-2]
        lead = len(idx_batch) - len(own)
        bidx = [0 if d == 1 else idx_batch[lead + p] for p, d in enumerate(own)]
        full = bidx + [row, col]
        if len(t.shape) == 1:                      # drop the axis numpy prepended/appended
            # (by side, not `t is a`: in v @ v both operands are one tensor)
            full = [full[-1]] if lhs else [full[-2]]
        return t(*full)

    def body(*idx):
        idx = list(idx)
        if len(a.shape) == 1:
            idx = idx[:-1] + [0] + idx[-1:]        # the prepended row axis is a constant 0
        if len(b.shape) == 1:
            idx = idx + [0]
        bi, i, j = idx[:len(batch)], idx[-2], idx[-1]
        return te_sum(read(a, sa, bi, i, k, True) * read(b, sb, bi, k, j, False), axis=k)

    tag = tags.MATMUL if len(out) <= 2 else tags.BATCH_MATMUL
    return [compute(out, body, name="matmul", tag=tag)]


@_lowering("matmul_prepacked")
def _matmul_prepacked(node, args):
    return [ops.matmul_prepacked(args[0], args[1], int(node.attrs["n"]))]


# -- groups ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GroupDAG:
    """The TE DAG of one fused group: `inputs[k]` (a graph value) is passed as
    `placeholders[k]`; `outputs[k]` computes `group.outputs[k]`. Kernel args are
    placeholders then outputs."""

    group: FusedGroup
    inputs: tuple[Value, ...]
    placeholders: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    # the group outputs that `outputs` compute, when not all of them (a zero-size output
    # next to non-empty ones needs no kernel argument)
    written: tuple[Value, ...] | None = None

    @property
    def args(self) -> tuple[Tensor, ...]:
        return self.placeholders + self.outputs

    @property
    def arg_values(self) -> tuple[Value, ...]:
        """The graph value bound to each kernel argument, in kernel-argument order."""
        return self.inputs + (self.group.outputs if self.written is None else self.written)


def _arg_name(value: Value, k: int) -> str:
    clean = re.sub(r"[^0-9A-Za-z_]", "_", value.name).strip("_") or f"in{k}"
    return clean if clean[0].isalpha() else f"v_{clean}"


def _is_immediate(value: Value, group: FusedGroup, constants: Mapping[str, np.ndarray]) -> bool:
    """A 0-d float constant read only by scalar-friendly binary ops becomes an immediate."""
    if value.name not in constants or value.shape != () or not value.dtype.startswith("float"):
        return False
    readers = [n for n in group.nodes if any(v is not None and v.name == value.name
                                             for v in n.inputs)]
    return all(n.op in _SCALAR_OPERAND_OPS for n in readers)


def _split_scalars(group: FusedGroup, constants: Mapping[str, np.ndarray]) -> set[str]:
    """The 8-bit scalar constants (quantization zero points) the group reads more than once.

    Each read gets its own placeholder: graph CSE shares equal small constants, so whether
    two zero points are one value depends on the model's quantization parameters, and the
    DAG (its workload key, so its tuning records) must not."""
    reads: dict[str, int] = {}
    for node in group.nodes:
        for v in node.inputs:
            if v is not None and v.shape == () and v.dtype in ("uint8", "int8") \
                    and v.name in constants:
                reads[v.name] = reads.get(v.name, 0) + 1
    return {name for name, n in reads.items() if n > 1}


def lower_node(node: Node, args: Sequence[Operand]) -> list[Tensor]:
    """The TE tensors computing `node`'s outputs from `args` (tensors, immediates or None)."""
    fn = LOWERINGS.get(node.op)
    if fn is None:
        raise UnsupportedOperatorError(
            f"node '{node.name}' uses graph op '{node.op}', which has no TE lowering in Kiln; "
            f"supported: {', '.join(sorted(LOWERINGS))}")
    present = list(args)
    while present and present[-1] is None:
        present.pop()
    try:
        outs = fn(node, present)
    except TEError as exc:
        raise type(exc)(f"while lowering node '{node.name}' ({node.op}): {exc}") from exc
    for t, v in zip(outs, node.outputs):
        if tuple(t.shape) != v.shape or t.dtype != v.dtype:
            raise InternalError(
                f"lowering node '{node.name}' ({node.op}) gave {t.dtype}{list(t.shape)} for "
                f"'{v.name}', the graph says {v.dtype}{list(v.shape)}; this is a bug in Kiln")
    return outs


def lower_group(group: FusedGroup, constants: Mapping[str, np.ndarray]) -> GroupDAG:
    """Build the TE DAG of `group`; `constants` are the graph's constant arrays (only 0-d
    scalars are read, to inline them)."""
    env: dict[str, Operand] = {}
    inputs, holders = [], []
    split = _split_scalars(group, constants)
    for k, v in enumerate(group.inputs):
        if _is_immediate(v, group, constants):
            env[v.name] = float(np.asarray(constants[v.name]))
            continue
        if v.name in split:
            continue                     # a placeholder per read, made below
        holder = placeholder(v.shape, v.dtype, _arg_name(v, k))
        env[v.name] = holder
        inputs.append(v)
        holders.append(holder)
    for node in group.nodes:
        args = []
        for v in node.inputs:
            if v is not None and v.name in split:
                holder = placeholder(v.shape, v.dtype, _arg_name(v, len(holders)))
                inputs.append(v)
                holders.append(holder)
                args.append(holder)
            else:
                args.append(None if v is None else env[v.name])
        for v, t in zip(node.outputs, lower_node(node, args)):
            env[v.name] = t
    outs, written = [], [v for v in group.outputs if 0 not in v.shape]
    if not written or len(written) == len(group.outputs):
        written = None       # every output is a kernel argument
    for v in (group.outputs if written is None else written):
        t = env[v.name]
        if not isinstance(t, Tensor) or t in holders:
            # an output that is an input unchanged still needs a kernel to copy it
            src = t
            t = compute(v.shape, lambda *i: src(*i), name="copy", tag=tags.ELEMWISE)
        outs.append(t)
    # an input the outputs do not read (a reduction over an empty set, a zero point that
    # cancels) is no kernel argument: a schedule holds only the stages its outputs reach
    read = set(topo_ops(outs))
    kept = [k for k, h in enumerate(holders) if h.op in read]
    return GroupDAG(group, tuple(inputs[k] for k in kept), tuple(holders[k] for k in kept),
                    tuple(outs), None if written is None else tuple(written))
