"""A tuning task: one compute DAG (outputs + kernel parameter order) on one target.

The workload key (sha256 of the DAG's canonical form) plus the target string is what the
tuning database is keyed on. `Task.from_op` builds the common operators for the CLI.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import te
from ..te import expr as E
from ..te.errors import TEError
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from ..te.visit import walk
from ..te.workload import describe, topo_ops, workload_key


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


def _arith_count(expr: E.Expr) -> int:
    return sum(1 for n in walk(expr) if isinstance(n, (E.BinaryOp, E.Call, E.Select))
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
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C", tag="matmul")
    return A, B, C


def _dense(M, K, N, dtype="float32"):
    X = te.placeholder((M, K), dtype, "X")
    W = te.placeholder((N, K), dtype, "W")
    bias = te.placeholder((N,), dtype, "bias")
    k = te.reduce_axis(K, "k")
    D = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), "D", tag="dense")
    Y = te.compute((M, N), lambda i, j: te.maximum(D[i, j] + bias[j], te.const(0.0, dtype)),
                   "Y", tag="elemwise")
    return X, W, bias, Y


def _batch_matmul(batch, M, K, N, dtype="float32"):
    A = te.placeholder((batch, M, K), dtype, "A")
    B = te.placeholder((batch, K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((batch, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k),
                   "C", tag="batch_matmul")
    return A, B, C


def _padded(X, pad, dtype):
    n, c, h, w = X.shape
    if pad == 0:
        return X
    zero = te.const(0.0, dtype)

    def body(b, ch, y, x):
        inside = te.all_of(y >= pad, y < h + pad, x >= pad, x < w + pad)
        yy = te.minimum(te.maximum(y - pad, 0), h - 1)
        xx = te.minimum(te.maximum(x - pad, 0), w - 1)
        return te.select(inside, X[b, ch, yy, xx], zero)
    return te.compute((n, c, h + 2 * pad, w + 2 * pad), body, "pad", tag="injective")


def _conv2d(N, C, H, W, K, R, S, stride=1, pad=0, dtype="float32"):
    X = te.placeholder((N, C, H, W), dtype, "X")
    Wt = te.placeholder((K, C, R, S), dtype, "W")
    P = _padded(X, pad, dtype)
    OH, OW = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    rc, rr, rs = te.reduce_axis(C, "rc"), te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    Y = te.compute((N, K, OH, OW), lambda n, k, y, x: te.sum(
        P[n, rc, y * stride + rr, x * stride + rs] * Wt[k, rc, rr, rs], axis=(rc, rr, rs)),
        "conv", tag="conv2d_nchw")
    return X, Wt, Y


def _depthwise_conv2d(N, C, H, W, R, S, stride=1, pad=0, dtype="float32"):
    X = te.placeholder((N, C, H, W), dtype, "X")
    Wt = te.placeholder((C, 1, R, S), dtype, "W")
    P = _padded(X, pad, dtype)
    OH, OW = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    rr, rs = te.reduce_axis(R, "ry"), te.reduce_axis(S, "rx")
    Y = te.compute((N, C, OH, OW), lambda n, c, y, x: te.sum(
        P[n, c, y * stride + rr, x * stride + rs] * Wt[c, 0, rr, rs], axis=(rr, rs)),
        "dwconv", tag="depthwise_conv2d_nchw")
    return X, Wt, Y


def _softmax(rows, cols, dtype="float32"):
    X = te.placeholder((rows, cols), dtype, "X")
    k1, k2 = te.reduce_axis(cols, "k"), te.reduce_axis(cols, "k")
    M = te.compute((rows,), lambda i: te.max(X[i, k1], axis=k1), "rowmax", tag="reduction")
    E_ = te.compute((rows, cols), lambda i, j: te.exp(X[i, j] - M[i]), "exp", tag="elemwise")
    S = te.compute((rows,), lambda i: te.sum(E_[i, k2], axis=k2), "rowsum", tag="reduction")
    Y = te.compute((rows, cols), lambda i, j: E_[i, j] / S[i], "softmax", tag="elemwise")
    return X, Y


def _pooling(N, C, H, W, size, stride=None, dtype="float32"):
    stride = size if stride is None else stride
    X = te.placeholder((N, C, H, W), dtype, "X")
    OH, OW = (H - size) // stride + 1, (W - size) // stride + 1
    ry, rx = te.reduce_axis(size, "ry"), te.reduce_axis(size, "rx")
    Y = te.compute((N, C, OH, OW), lambda n, c, y, x: te.max(
        X[n, c, y * stride + ry, x * stride + rx], axis=(ry, rx)), "maxpool", tag="pool")
    return X, Y


OPERATORS = {"matmul": _matmul, "dense": _dense, "batch_matmul": _batch_matmul,
             "conv2d": _conv2d, "depthwise_conv2d": _depthwise_conv2d, "softmax": _softmax,
             "pooling": _pooling}
OPERATOR_SHAPES = {
    "matmul": "(M, K, N)", "dense": "(M, K, N) with W of shape (N, K), bias and relu",
    "batch_matmul": "(batch, M, K, N)", "conv2d": "(N, C, H, W, K, R, S[, stride, pad])",
    "depthwise_conv2d": "(N, C, H, W, R, S[, stride, pad])", "softmax": "(rows, cols)",
    "pooling": "(N, C, H, W, size[, stride])"}
