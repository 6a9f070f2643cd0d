"""Tensors and the operations that produce them: placeholders and computes.

`compute` calls the user's lambda once on fresh axis variables and keeps only the resulting
expression, so a DAG pickles, hashes and serialises without the lambda.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field

from . import dtype as dt
from .errors import TEError
from .expr import (Cast, CommReducer, Expr, IntImm, IterKind, IterVar, Reduce, Var, _as_expr,
                   cast, const, ir_node, maximum, minimum)
from .uids import UidCounter

_op_ids = UidCounter()


def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = tuple(int(s.value) if isinstance(s, IntImm) else int(s) for s in shape)
    except (TypeError, ValueError):
        raise TEError(f"shape must be a tuple of ints (static shapes only), got {shape!r}") from None
    if any(s < 0 for s in out):
        raise TEError(f"shape has a negative extent: {out}")
    return out


@ir_node
class Operation:
    """Base of operations; `uid` keeps two separately declared ops distinct."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    uid: int = field(default_factory=lambda: next(_op_ids), repr=False)
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def output(self, index: int = 0) -> "Tensor":
        return Tensor(self)

    @property
    def input_tensors(self) -> tuple["Tensor", ...]:
        return ()


@ir_node
class PlaceholderOp(Operation):
    """An input tensor, supplied by the caller of a kernel."""


@ir_node
class ComputeOp(Operation):
    """out[axis] = body, for every point of `axis`; body may be a top-level Reduce."""

    axis: tuple[IterVar, ...] = ()
    body: Expr = None
    tag: str = ""

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        return self.body.axis if isinstance(self.body, Reduce) else ()

    @property
    def input_tensors(self) -> tuple["Tensor", ...]:
        return _input_tensors(self)


@dataclass(frozen=True, eq=True)
class Tensor:
    """The output of an operation; index it to read an element: A[i, j]."""

    op: Operation

    @property
    def shape(self) -> tuple[int, ...]:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def ndim(self) -> int:
        return len(self.op.shape)

    def __getitem__(self, indices) -> "TensorLoad":
        if not isinstance(indices, tuple):
            indices = (indices,)
        return self(*indices)

    def __call__(self, *indices) -> "TensorLoad":
        if len(indices) != self.ndim:
            raise TEError(f"tensor '{self.name}' has {self.ndim} dimensions "
                          f"{self.shape}, indexed with {len(indices)} indices")
        exprs = []
        for i in indices:
            e = _as_expr(i)
            if not dt.is_int(e.dtype):
                raise TEError(f"index of tensor '{self.name}' must be an integer, "
                              f"got {e.dtype} ({e})")
            exprs.append(cast(e, "int32") if e.dtype != "int32" else e)
        return TensorLoad(self.dtype, self, tuple(exprs))

    def __hash__(self):
        return hash(self.op)

    def __bool__(self):
        return True

    def __repr__(self):
        return f"Tensor({self.name}, {self.dtype}{list(self.shape)})"


@ir_node
class TensorLoad(Expr):
    """Read tensor[indices]; indices are int32 and must be in bounds."""

    tensor: Tensor
    indices: tuple[Expr, ...]


@functools.lru_cache(maxsize=4096)
def _input_tensors(op: "ComputeOp") -> tuple["Tensor", ...]:
    """The tensors `op`'s body reads, remembered per operation: scheduling and lowering ask
    about every stage repeatedly, and a walk of a large body (a Winograd transform's) costs."""
    return tuple(collect_tensors(op.body))


def collect_tensors(expr: Expr) -> list[Tensor]:
    """Tensors read by `expr`, in first-appearance order (deterministic)."""
    from .visit import walk
    return list(dict.fromkeys(n.tensor for n in walk(expr) if isinstance(n, TensorLoad)))


def placeholder(shape, dtype="float32", name: str = "placeholder") -> Tensor:
    """Declare an input tensor of a static shape."""
    return Tensor(PlaceholderOp(name, _shape(shape), dt.canonical(dtype)))


def reduce_axis(dom, name: str = "k") -> IterVar:
    """A reduction axis over range(dom) or range(lo, hi) given as a (lo, hi) pair."""
    if isinstance(dom, int):
        lo, hi = 0, dom
    else:
        lo, hi = (int(d) for d in dom)
    if lo != 0:
        raise TEError(f"reduce_axis {name!r}: only ranges starting at 0 are supported, got "
                      f"({lo}, {hi}); shift the index in the expression instead")
    if hi <= 0:
        raise TEError(f"reduce_axis {name!r} has an empty range ({lo}, {hi})")
    return IterVar(Var("int32", name), hi, IterKind.REDUCE)


def thread_axis(*_args, **_kwargs):
    raise TEError("thread_axis is a GPU concept; Kiln targets the CPU: use parallel()")


def compute(shape, fcompute, name: str = "compute", tag: str = "") -> Tensor:
    """Define out[i, j, ...] = fcompute(i, j, ...) over `shape`."""
    shape = _shape(shape)
    params = list(inspect.signature(fcompute).parameters.values())
    if len(params) == 1 and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        names = [f"i{d}" for d in range(len(shape))]
    else:
        names = [p.name for p in params]
    if len(names) != len(shape):
        raise TEError(f"compute {name!r}: the function takes {len(names)} arguments but the "
                      f"shape {shape} has {len(shape)} dimensions")
    axis = tuple(IterVar(Var("int32", n), s) for n, s in zip(names, shape))
    body = _as_expr(fcompute(*[a.var for a in axis]))
    if isinstance(body, Cast) and isinstance(body.value, Reduce) and dt.is_half(body.dtype):
        # a float16/bfloat16 reduction (see comm_reducer): a float32 accumulator stage, then
        # this stage rounds it once, as numpy's float16 sum and matmul do
        acc = body.value
        _check_reduce_placement(acc, name)
        inner = Tensor(ComputeOp(f"{name}.acc", shape, acc.dtype, axis=axis, body=acc,
                                 tag=tag))
        return compute(shape, lambda *i: Cast(body.dtype, inner(*i)), name=name)
    _check_reduce_placement(body, name)
    return Tensor(ComputeOp(name, shape, body.dtype, axis=axis, body=body, tag=tag))


def _check_reduce_placement(body: Expr, name: str) -> None:
    from .visit import walk
    inner = body.source if isinstance(body, Reduce) else body
    if any(isinstance(n, Reduce) for n in walk(inner)) or (
            isinstance(body, Reduce) and body.condition is not None
            and any(isinstance(n, Reduce) for n in walk(body.condition))):
        raise TEError(f"compute {name!r}: a reduction must be the whole body of a compute, not "
                      "part of a larger expression; compute it as its own tensor first")


# ----------------------------------------------------------------------------- reducers

def comm_reducer(fcombine, fidentity, name: str = "reduce"):
    """Build a reducer from a combiner f(x, y) and identity(dtype): like te.sum/te.max."""

    def reducer(expr, axis, where=None):
        expr = _as_expr(expr)
        if dt.is_half(expr.dtype):   # accumulate in float32, round once (compute splits it)
            return Cast(expr.dtype, reducer(_widened(expr), axis, where))
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if not isinstance(a, IterVar) or a.kind is not IterKind.REDUCE:
                raise TEError(f"{name}(): axis {a} is not a reduce_axis")
        lhs, rhs = Var(expr.dtype, "x"), Var(expr.dtype, "y")
        combiner = CommReducer(lhs, rhs, _as_expr(fcombine(lhs, rhs)),
                               const(fidentity(expr.dtype), expr.dtype), name)
        cond = None if where is None else _as_expr(where)
        return Reduce(expr.dtype, combiner, expr, axes, cond)

    reducer.__name__ = name
    return reducer


def _widened(expr: Expr) -> Expr:
    """A float16/bfloat16 reduction source in float32. A product of two halves is exact in
    float32, so a matmul's or a convolution's products stay unrounded (as numpy's float16
    matmul); any other source is rounded as its dtype says, then widened."""
    if type(expr).__name__ == "Mul":
        return Cast("float32", expr.a) * Cast("float32", expr.b)
    return Cast("float32", expr)


sum = comm_reducer(lambda x, y: x + y, lambda d: 0, "sum")  # noqa: A001 - TVM's name
max = comm_reducer(maximum, dt.min_value, "max")  # noqa: A001
min = comm_reducer(minimum, dt.max_value, "min")  # noqa: A001


def prod(expr, axis, where=None):
    return comm_reducer(lambda x, y: x * y, lambda d: 1, "prod")(expr, axis, where)
