"""A tuning task: one compute DAG (outputs + kernel parameter order) on one target.

The workload key (sha256 of the DAG's canonical form) plus the target string is what the
tuning database is keyed on. `Task.from_op` builds the common operators for the CLI.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import te
from ..te import ops
from ..te import expr as E
from ..te.errors import TEError
from ..te.ops import winograd
from ..te.ops.conv_transpose import transpose_geometry
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from ..te.visit import walk
from ..te.workload import describe, topo_ops, workload_key

if TYPE_CHECKING:
    from ..codegen.target import Target


@dataclass(frozen=True, eq=False)
class Task:
    """`outputs` are the tensors the kernel writes; `args` the kernel parameters in order
    (inputs then outputs, every output included)."""

    name: str
    outputs: tuple[Tensor, ...]
    args: tuple[Tensor, ...]
    target: str = "native"
    _key: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "args", tuple(self.args))
        missing = [t.name for t in self.outputs if t not in self.args]
        if missing:
            raise TEError(f"task '{self.name}': output(s) {', '.join(missing)} are not in the "
                          "kernel arguments; list every input and output tensor in args")
        for op in topo_ops(self.outputs):
            if isinstance(op, PlaceholderOp) and op.output() not in self.args:
                raise TEError(f"task '{self.name}': input '{op.name}' is read but not in the "
                              "kernel arguments; add it to args")

    def retargeted(self, target: Target) -> "Task":
        """This task on `target` (kept as its database spelling, `str(target)`), sharing the
        cached workload key (the DAG's: it does not depend on the target, and rehashing a
        conv's DAG costs ~30 ms)."""
        return dataclasses.replace(self, target=str(target))

    @property
    def workload_key(self) -> str:
        if not self._key:
            self._key.append(workload_key(list(self.outputs)))
        return self._key[0]

    @property
    def description(self) -> str:
        return f"{self.name}: {describe(list(self.outputs))}"

    @property
    def shapes(self) -> list:
        return [[t.name, list(t.shape), t.dtype] for t in self.args]

    @property
    def flops(self) -> float:
        """Floating-point (and integer) operations of the DAG; a multiply-add counts 2."""
        return float(sum(_op_flops(op) for op in topo_ops(self.outputs)
                         if isinstance(op, ComputeOp)))

    @property
    def output_positions(self) -> tuple[int, ...]:
        return tuple(self.args.index(t) for t in self.outputs)

    @staticmethod
    def from_op(op_name: str, shape, dtype: str = "float32", target: str = "native") -> "Task":
        """Build a task for a standard operator from its shape tuple (see OPERATORS)."""
        builder = OPERATORS.get(op_name)
        if builder is None:
            raise TEError(f"unknown operator '{op_name}' for a tuning task; known: "
                          f"{', '.join(sorted(OPERATORS))}")
        try:
            args = builder(*[int(s) for s in shape], dtype=dtype)
        except TypeError as exc:
            raise TEError(f"operator '{op_name}' got shape {tuple(shape)}: {exc}. Expected "
                          f"{OPERATOR_SHAPES[op_name]}") from None
        name = f"{op_name}_" + "x".join(str(int(s)) for s in shape)
        return Task(name, (args[-1],), tuple(args), target)


# Calls that stand for more than one operation: a dot4 word is 4 multiply-adds, 8 ops with
# the combine that _op_flops adds (so int8 "GFLOPS" are GOPS, 2 per u8 x s8 multiply-add).
_CALL_OPS = {"dot4_u8s8": 7, "dot4_u8s7": 7, "dot4_u8s8sym": 7, "dot4_u8s16": 7,
             "dot2_s16": 3, "dot2_s16s8": 3}


def _arith_count(expr: E.Expr) -> int:
    return sum(_CALL_OPS.get(n.name, 1) if isinstance(n, E.Call) else 1 for n in walk(expr)
               if isinstance(n, (E.BinaryOp, E.Call, E.Select))
               and not isinstance(n, (E.And, E.Or)) and not _is_index(n))


def _is_index(node: E.Expr) -> bool:
    return isinstance(node.dtype, str) and node.dtype.startswith("int") and not isinstance(
        node, E.Call)


def _op_flops(op: ComputeOp) -> float:
    points = math.prod(op.shape) if op.shape else 1
    body = op.body
    if isinstance(body, E.Reduce):
        reduce_points = math.prod(a.extent for a in body.axis)
        per_point = _arith_count(body.source) + 1       # the combine (the add of a MAC)
        return float(points * reduce_points * per_point)
    return float(points * max(1, _arith_count(body)))


# ----------------------------------------------------------------------------- operators

def _matmul(M, K, N, dtype="float32"):
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    return A, B, ops.matmul(A, B, name="C")


def _dense(M, K, N, dtype="float32"):
    X = te.placeholder((M, K), dtype, "X")
    W = te.placeholder((N, K), dtype, "W")
    bias = te.placeholder((N,), dtype, "bias")
    return X, W, bias, ops.relu(ops.dense(X, W, bias, name="D"))


def _batch_matmul(batch, M, K, N, dtype="float32"):
    A = te.placeholder((batch, M, K), dtype, "A")
    B = te.placeholder((batch, K, N), dtype, "B")
    return A, B, ops.batch_matmul(A, B, name="C")


def _conv2d(N, C, H, W, K, R, S, stride=1, pad=0, dtype="float32"):
    X = te.placeholder((N, C, H, W), dtype, "X")
    Wt = te.placeholder((K, C, R, S), dtype, "W")
    return X, Wt, ops.conv2d_nchw(X, Wt, stride=stride, padding=pad, name="conv")


def _depthwise_conv2d(N, C, H, W, R, S, stride=1, pad=0, dtype="float32"):
    X = te.placeholder((N, C, H, W), dtype, "X")
    Wt = te.placeholder((C, 1, R, S), dtype, "W")
    return X, Wt, ops.depthwise_conv2d_nchw(X, Wt, stride=stride, padding=pad, name="dwconv")


def _conv2d_nchwc(N, C, H, W, K, R, S, stride=1, pad=0, in_block=8, block=8,
                  dtype="float32"):
    X = te.placeholder((N, C // in_block, H, W, in_block), dtype, "X")
    Wt = te.placeholder((K // block, C // in_block, R, S, in_block, block), dtype, "W")
    return X, Wt, ops.conv2d_nchwc(X, Wt, stride=stride, padding=pad, name="conv")


def _depthwise_conv2d_nchwc(N, C, H, W, R, S, stride=1, pad=0, block=8, dtype="float32"):
    X = te.placeholder((N, C // block, H, W, block), dtype, "X")
    Wt = te.placeholder((C // block, R, S, block), dtype, "W")
    return X, Wt, ops.depthwise_conv2d_nchwc(X, Wt, stride=stride, padding=pad, name="dwconv")


def _conv2d_transpose(N, C, H, W, F, R, S, stride=1, pad=0, output_padding=0, groups=1,
                      dtype="float32"):
    """ONNX ConvTranspose as models compile it: the weight a constant packed at compile time
    (conv_transpose_weight), so the kernel reads the packed layout."""
    geo = transpose_geometry("conv2d_transpose", (N, C, H, W), (C, F // groups, R, S), stride,
                             pad, 1, output_padding, groups)
    block = ops.phase_weight_block(geo.packed_shape[0], groups)
    shape = geo.packed_shape if block is None else (
        (geo.packed_shape[0] // block,) + geo.packed_shape[1:] + (block,))
    X = te.placeholder((N, C, H, W), dtype, "X")
    Wt = te.placeholder(shape, dtype, "W")
    return X, Wt, ops.conv2d_transpose_nchw_packed(X, Wt, (R, S), stride, pad, 1,
                                                   output_padding, groups, name="convt")


def _winograd_input(N, C, H, W, m, pad=1, block=16, dtype="float32"):
    X = te.placeholder((N, C // block, H, W, block), dtype, "X")
    return X, winograd.winograd_input_transform(X, m, pad, name="winograd_input")


def _winograd_gemm(N, C, H, W, F, m, pad=1, block=16, dtype="float32"):
    alpha = m + 2
    tiles = (winograd.winograd_tiles(winograd.winograd_output_extent(H, pad, pad), m)
             * winograd.winograd_tiles(winograd.winograd_output_extent(W, pad, pad), m))
    V = te.placeholder((alpha, alpha, N * tiles, C), dtype, "V")
    U = te.placeholder((alpha, alpha, F // block, C, block), dtype, "U")
    return V, U, winograd.winograd_batch_matmul(V, U, name="winograd_gemm")


def _winograd_output(N, F, OH, OW, m, block=16, dtype="float32"):
    alpha = m + 2
    tiles = winograd.winograd_tiles(OH, m) * winograd.winograd_tiles(OW, m)
    M = te.placeholder((alpha, alpha, F // block, N * tiles, block), dtype, "M")
    return M, winograd.winograd_output_transform(M, m, (OH, OW), N, name="winograd_output")


def _softmax(rows, cols, dtype="float32"):
    X = te.placeholder((rows, cols), dtype, "X")
    return X, ops.softmax(X, axis=-1, name="softmax")


def _pooling(N, C, H, W, size, stride=None, dtype="float32"):
    X = te.placeholder((N, C, H, W), dtype, "X")
    return X, ops.max_pool2d(X, size, stride=stride or size, name="maxpool")


OPERATORS = {"matmul": _matmul, "dense": _dense, "batch_matmul": _batch_matmul,
             "conv2d": _conv2d, "depthwise_conv2d": _depthwise_conv2d, "softmax": _softmax,
             "pooling": _pooling, "conv2d_nchwc": _conv2d_nchwc,
             "conv2d_transpose": _conv2d_transpose,
             "depthwise_conv2d_nchwc": _depthwise_conv2d_nchwc,
             "winograd_input_transform": _winograd_input,
             "winograd_batch_matmul": _winograd_gemm,
             "winograd_output_transform": _winograd_output}
OPERATOR_SHAPES = {
    "matmul": "(M, K, N)", "dense": "(M, K, N) with W of shape (N, K), bias and relu",
    "batch_matmul": "(batch, M, K, N)", "conv2d": "(N, C, H, W, K, R, S[, stride, pad])",
    "depthwise_conv2d": "(N, C, H, W, R, S[, stride, pad])", "softmax": "(rows, cols)",
    "pooling": "(N, C, H, W, size[, stride])",
    "conv2d_transpose": "(N, C, H, W, F, R, S[, stride, pad, output_padding, groups]): ONNX "
                        "ConvTranspose, weight [C, F / groups, R, S] packed at compile time",
    "conv2d_nchwc": "(N, C, H, W, K, R, S[, stride, pad, in_block, block]), C and K divisible "
                    "by their blocks",
    "depthwise_conv2d_nchwc": "(N, C, H, W, R, S[, stride, pad, block]), C divisible by block",
    "winograd_input_transform": "(N, C, H, W, m[, pad, block]): a 3x3 stride-1 conv's input "
                                "tiles, blocked x, tile size m in (2, 4)",
    "winograd_batch_matmul": "(N, C, H, W, F, m[, pad, block]): the conv's per-point GEMMs "
                             "(H, W: the input extent)",
    "winograd_output_transform": "(N, F, OH, OW, m[, block]): the conv's output tiles"}
