"""A numpy interpreter for TE DAGs: the oracle for tests and the autotuner's correctness check.

Each ComputeOp body is evaluated vectorised over its index grid. Every axis (spatial and
reduce) is one dimension of a broadcast grid, so a node only materialises the dimensions it
depends on. The grid is cut into blocks so the temporaries of one block stay under a memory
budget, and a sum of products is contracted with `np.einsum` (BLAS) instead of materialising
the product. Reads are clamped into bounds: a Select discards the values of its unused branch.
"""
from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass

import numpy as np

from . import expr as E
from .errors import TEError
from .tensor import ComputeOp, PlaceholderOp, Tensor, TensorLoad
from .visit import child_exprs, walk
from .workload import topo_ops

logger = logging.getLogger(__name__)

# Budget for the live temporaries of one block, in bytes (all nodes of a body are kept in the
# memo while a block is evaluated, so the budget covers their sum).
DEFAULT_BUDGET_BYTES = 128 * 2**20
_BYTES_PER_ELEMENT = 8

try:  # scipy comes with scikit-learn; fall back to the scalar math.erf without it
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover - depends on the environment
    _erf = np.frompyfunc(math.erf, 1, 1)


def evaluate(outputs, inputs: dict, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> list[np.ndarray]:
    """Compute `outputs` (a Tensor or a list of them) from numpy values of their placeholders.

    `inputs` maps each placeholder Tensor to an array of its exact shape and dtype.
    Raises TEError for a missing or mismatched input, or a body with an unbound variable.
    """
    outputs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    by_op = {_op_of(key): value for key, value in inputs.items()}
    values: dict = {}
    for op in topo_ops(outputs):
        if isinstance(op, PlaceholderOp):
            values[op] = _check_input(op, by_op)
        elif isinstance(op, ComputeOp):
            values[op] = _evaluate_compute(op, values, budget_bytes)
        else:
            raise TEError(f"evaluate(): operation {op.name!r} of type {type(op).__name__} "
                          "cannot be interpreted; only placeholders and computes can")
    return [values[t.op] for t in outputs]


def _op_of(key):
    if isinstance(key, Tensor):
        return key.op
    if isinstance(key, PlaceholderOp):
        return key
    raise TEError(f"evaluate(): inputs must be keyed by placeholder Tensors, got {key!r}")


def _check_input(op: PlaceholderOp, by_op: dict) -> np.ndarray:
    if op not in by_op:
        raise TEError(f"evaluate(): no value for placeholder '{op.name}' "
                      f"{op.dtype}{list(op.shape)}; pass it in `inputs`")
    value = np.asarray(by_op[op])
    if value.shape != op.shape or value.dtype != np.dtype(op.dtype):
        raise TEError(f"evaluate(): placeholder '{op.name}' expects {op.dtype}{list(op.shape)}, "
                      f"got {value.dtype}{list(value.shape)}; convert the array with "
                      f".astype(np.{op.dtype}) or fix its shape")
    return value


# ----------------------------------------------------------------------------- planning

@dataclass
class _Plan:
    """How one compute is evaluated: its grid dimensions and the block size of each."""

    extents: list[int]           # spatial dims first, then reduce dims
    n_spatial: int
    block: list[int]


def _dependencies(root: E.Expr, dim_of: dict) -> dict:
    """For every node under `root`, the set of grid dimensions its value varies along."""
    deps: dict = {}
    order = list(walk(root))
    for node in reversed(order):  # walk is pre-order, so children come later: go backwards
        if isinstance(node, E.Var):
            deps[node] = frozenset((dim_of[node],)) if node in dim_of else frozenset()
            continue
        found = frozenset()
        for child in child_exprs(node):
            found |= deps.get(child, frozenset())
        deps[node] = found
    return deps


def _plan(extents: list[int], n_spatial: int, node_deps: list[frozenset], budget: int) -> _Plan:
    """Halve the largest dimension of the largest node until the block fits the budget."""
    block = list(extents)
    limit = max(1, budget // _BYTES_PER_ELEMENT)
    out_deps = frozenset(range(n_spatial))
    all_deps = node_deps + [out_deps, out_deps]   # the accumulator and the partial result

    def size(d: frozenset) -> int:
        return math.prod(block[i] for i in d)

    while sum(size(d) for d in all_deps) > limit:
        biggest = max(all_deps, key=size)
        candidates = [i for i in biggest if block[i] > 1]
        if not candidates:
            break
        dim = max(candidates, key=lambda i: block[i])
        block[dim] = (block[dim] + 1) // 2
    return _Plan(extents, n_spatial, block)


def _ranges(extent: int, block: int):
    return [(lo, min(lo + block, extent)) for lo in range(0, extent, block)]


# ----------------------------------------------------------------------------- computes

def _evaluate_compute(op: ComputeOp, values: dict, budget: int) -> np.ndarray:
    out = np.empty(op.shape, dtype=op.dtype)
    if out.size == 0:
        return out
    body = op.body
    reduce = body if isinstance(body, E.Reduce) else None
    axes = list(op.axis) + (list(reduce.axis) if reduce is not None else [])
    dim_of = {a.var: d for d, a in enumerate(axes)}
    n_spatial = len(op.axis)
    factors = _einsum_factors(reduce) if reduce is not None else None
    roots = factors if factors is not None else (
        [reduce.source] + ([reduce.condition] if reduce is not None and reduce.condition
                           is not None else []) if reduce is not None else [body])
    deps: dict = {}
    for root in roots:
        deps.update(_dependencies(root, dim_of))
    _check_bound(op, deps, dim_of)
    plan = _plan([a.extent for a in axes], n_spatial, list(deps.values()), budget)
    logger.debug("evaluate %s: extents %s in blocks of %s (%s)", op.name, plan.extents,
                 plan.block, "einsum" if factors is not None else "elementwise")
    spatial_blocks = [_ranges(e, b) for e, b in zip(plan.extents[:n_spatial], plan.block)]
    reduce_blocks = [_ranges(e, b) for e, b in zip(plan.extents[n_spatial:],
                                                   plan.block[n_spatial:])]
    evaluator = _Evaluator(values, op)
    for spatial in itertools.product(*spatial_blocks):
        shape = tuple(hi - lo for lo, hi in spatial)
        if reduce is None:
            env = _grid(axes, spatial)
            result = evaluator.run(body, env)
        else:
            result = _reduce_block(reduce, factors, axes, spatial, reduce_blocks, evaluator)
        index = tuple(slice(lo, hi) for lo, hi in spatial)
        out[index] = np.broadcast_to(np.asarray(result).astype(op.dtype, copy=False), shape)
    return out


def _check_bound(op: ComputeOp, deps: dict, dim_of: dict) -> None:
    for node in deps:
        if isinstance(node, E.Var) and node not in dim_of:
            raise TEError(f"evaluate(): compute '{op.name}' uses variable '{node.name}' that "
                          "is not one of its axes; bind it (substitute a value) first")


def _grid(axes, ranges) -> dict:
    """Each axis variable as an int32 index array along its own grid dimension."""
    env = {}
    ndim = len(axes)
    for d, (axis, (lo, hi)) in enumerate(zip(axes, ranges)):
        shape = [1] * ndim
        shape[d] = hi - lo
        env[axis.var] = np.arange(lo, hi, dtype=np.int32).reshape(shape)
    return env


def _reduce_block(reduce: E.Reduce, factors, axes, spatial, reduce_blocks, evaluator):
    """Combine the source over every reduce block for one spatial block."""
    n_spatial = len(spatial)
    shape = tuple(hi - lo for lo, hi in spatial)
    combine = _numpy_combiner(reduce.combiner)
    acc = np.broadcast_to(evaluator.run(reduce.combiner.identity, {}), shape)
    for block in itertools.product(*reduce_blocks):
        env = _grid(axes, list(spatial) + list(block))
        if factors is not None:
            partial = _contract(factors, env, evaluator, n_spatial, len(axes), block)
        else:
            partial = _fold_block(reduce, env, evaluator, n_spatial, len(axes), block, combine)
        acc = _apply(reduce, combine, acc, partial, evaluator)
    return acc


def _fold_block(reduce, env, evaluator, n_spatial, ndim, block, combine):
    source = evaluator.run(reduce.source, env)
    if reduce.condition is not None:
        cond = evaluator.run(reduce.condition, env)
        identity = evaluator.run(reduce.combiner.identity, {})
        source = np.where(cond, source, identity)
    source = np.reshape(source, _pad_shape(np.shape(source), ndim))
    target = source.shape[:n_spatial] + tuple(hi - lo for lo, hi in block)
    source = np.broadcast_to(source, target)
    reduce_dims = tuple(range(n_spatial, ndim))
    if combine is not None:
        return combine.reduce(source, axis=reduce_dims, dtype=source.dtype)
    flat = source.reshape(source.shape[:n_spatial] + (-1,))
    while flat.shape[-1] > 1:  # pairwise tree fold with the combiner expression
        half = flat.shape[-1] // 2
        paired = _apply(reduce, None, flat[..., :half], flat[..., half:2 * half], evaluator)
        paired = np.broadcast_to(paired, flat[..., :half].shape)
        if flat.shape[-1] % 2:
            paired = np.concatenate([paired, flat[..., 2 * half:]], axis=-1)
        flat = paired
    return flat[..., 0]


def _pad_shape(shape, ndim):
    return tuple(shape) if len(shape) == ndim else (1,) * (ndim - len(shape)) + tuple(shape)


def _apply(reduce, combine, lhs, rhs, evaluator):
    if combine is not None:
        return combine(lhs, rhs).astype(reduce.dtype, copy=False)
    combiner = reduce.combiner
    return evaluator.run(combiner.combined, {combiner.lhs: np.asarray(lhs),
                                             combiner.rhs: np.asarray(rhs)})


_COMBINERS = {E.Add: np.add, E.Mul: np.multiply, E.Max: np.maximum, E.Min: np.minimum}


def _numpy_combiner(combiner: E.CommReducer):
    """The numpy ufunc equal to the combiner, recognised structurally (not by name)."""
    body = combiner.combined
    ufunc = _COMBINERS.get(type(body))
    if ufunc is None:
        return None
    if {body.a, body.b} == {combiner.lhs, combiner.rhs} and body.a != body.b:
        return ufunc
    return None


def _einsum_factors(reduce: E.Reduce):
    """The factors of an unconditioned float sum of products, or None."""
    if reduce.condition is not None or _numpy_combiner(reduce.combiner) is not np.add:
        return None
    if not reduce.dtype.startswith("float") or not isinstance(reduce.source, E.Mul):
        return None
    factors, stack = [], [reduce.source]
    while stack:
        node = stack.pop()
        if isinstance(node, E.Mul):
            stack.extend((node.b, node.a))
        else:
            factors.append(node)
    return factors


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _contract(factors, env, evaluator, n_spatial, ndim, block):
    """sum over the reduce dims of the product of factors, through np.einsum."""
    if ndim > len(_LETTERS):
        raise TEError(f"evaluate(): {ndim} axes are more than the interpreter supports")
    operands, subscripts, used = [], [], set()
    for factor in factors:
        value = np.asarray(evaluator.run(factor, env))
        shape = _pad_shape(value.shape, ndim)
        value = value.reshape(shape)
        keep = [d for d in range(ndim) if shape[d] != 1]
        operands.append(value.reshape([shape[d] for d in keep]))
        subscripts.append("".join(_LETTERS[d] for d in keep))
        used.update(keep)
    out_dims = [d for d in range(n_spatial) if d in used]
    spec = ",".join(subscripts) + "->" + "".join(_LETTERS[d] for d in out_dims)
    result = np.einsum(spec, *operands, optimize=len(operands) > 1)
    for d, (lo, hi) in enumerate(block, start=n_spatial):
        if d not in used:  # a reduce dim no factor depends on: the sum repeats the term
            result = result * np.asarray(hi - lo, dtype=result.dtype)
    shape = [1] * n_spatial
    for d in out_dims:
        shape[d] = result.shape[out_dims.index(d)]
    return np.reshape(result, shape)


# ----------------------------------------------------------------------------- expressions

def _round_half_even(x):
    return np.rint(x)


def dot4_u8s8_reference(a, b):
    """sum over the 4 bytes t of uint8(a_t) * int8(b_t) for int32 words a, b (te.expr's
    dot4 intrinsics; dot4_u8s7 and dot4_u8s8sym have the same value)."""
    a_bytes = np.ascontiguousarray(a, np.int32)[..., None].view(np.uint8).astype(np.int32)
    b_bytes = np.ascontiguousarray(b, np.int32)[..., None].view(np.int8).astype(np.int32)
    return (a_bytes * b_bytes).sum(axis=-1, dtype=np.int32)


def dot4_u8s16_reference(a, b_even, b_odd):
    """sum over the 4 bytes t of uint8(a_t) * b_t, with b_0, b_2 the int16 halves of b_even
    and b_1, b_3 those of b_odd (te.expr's dot4_u8s16)."""
    a_bytes = np.ascontiguousarray(a, np.int32)[..., None].view(np.uint8).astype(np.int64)
    even = np.ascontiguousarray(b_even, np.int32)[..., None].view(np.int16).astype(np.int64)
    odd = np.ascontiguousarray(b_odd, np.int32)[..., None].view(np.int16).astype(np.int64)
    total = (a_bytes[..., 0::2] * even).sum(axis=-1) + (a_bytes[..., 1::2] * odd).sum(axis=-1)
    return total.astype(np.int32)


def dot2_s16_reference(a, b):
    """a_0 b_0 + a_1 b_1 over the int16 halves of int32 words a, b (te.expr's dot2_s16),
    wrapped to int32 as vpmaddwd does."""
    a_h = np.ascontiguousarray(a, np.int32)[..., None].view(np.int16).astype(np.int64)
    b_h = np.ascontiguousarray(b, np.int32)[..., None].view(np.int16).astype(np.int64)
    return (a_h * b_h).sum(axis=-1).astype(np.int32)


def dot2_s16s8_reference(a, b):
    """a_0 b_0 + a_1 b_1 over the int16 halves of the int32 words a and the int8 bytes of
    the int16 b (te.expr's dot2_s16s8)."""
    a_h = np.ascontiguousarray(a, np.int32)[..., None].view(np.int16).astype(np.int64)
    b_b = np.ascontiguousarray(b, np.int16)[..., None].view(np.int8).astype(np.int64)
    return (a_h * b_b).sum(axis=-1).astype(np.int32)


def dot4_u8s8perm_reference(a0, a1, a2, a3, sel, b):
    """sum_t uint8(byte sel_t & 15 of a0 | a1 | a2 | a3, 0 when sel_t >= 128) * int8(b_t)
    (te.expr's dot4_u8s8perm), exact in int32."""
    words = [np.array(v, np.int32) for v in     # copies: contiguous, 0-d stays 0-d
             np.broadcast_arrays(*(np.asarray(v, np.int32) for v in (a0, a1, a2, a3, sel, b)))]
    group = np.stack(words[:4], axis=-1).view(np.uint8)                         # [..., 16]
    sel_bytes = words[4][..., None].view(np.uint8)                              # [..., 4]
    picked = np.take_along_axis(group, (sel_bytes & 15).astype(np.intp), axis=-1)
    picked = np.where(sel_bytes >= 128, 0, picked).astype(np.int32)
    b_bytes = words[5][..., None].view(np.int8).astype(np.int32)
    return (picked * b_bytes).sum(axis=-1, dtype=np.int32)


def lookup8_reference(x, *table):
    """E.lookup8: the entry at x's byte (its uint8 bit pattern)."""
    entries = np.array([np.asarray(t).item() for t in table], np.asarray(table[0]).dtype)
    x = np.asarray(x)
    return entries[x.view(np.uint8) if x.dtype.itemsize == 1 else x.astype(np.uint8)]


_INTRINSICS = {
    "lookup8": lookup8_reference,
    "dot2_s16s8": dot2_s16s8_reference, "dot4_u8s8perm": dot4_u8s8perm_reference,
    "dot4_u8s16": dot4_u8s16_reference, "dot2_s16": dot2_s16_reference,
    "dot4_u8s8": dot4_u8s8_reference, "dot4_u8s7": dot4_u8s8_reference,
    "dot4_u8s8sym": dot4_u8s8_reference,
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "round": _round_half_even, "sin": np.sin,
    "cos": np.cos, "log1p": np.log1p, "expm1": np.expm1, "pow": np.power,
    "rsqrt": lambda x: 1 / np.sqrt(x),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": lambda x: np.asarray(_erf(x)),
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "fmod": np.fmod, "bit_and": np.bitwise_and, "bit_or": np.bitwise_or,
    "bit_xor": np.bitwise_xor, "bit_not": np.invert,
    "shl": lambda a, b: _shift(np.left_shift, a, b),
    "shr": lambda a, b: _shift(np.right_shift, a, b),
}


def _shift(fn, a, b):
    a, b = np.asarray(a), np.asarray(b)
    bits = a.dtype.itemsize * 8
    out = fn(a, np.minimum(b, bits - 1).astype(a.dtype))
    return np.where(b >= bits, np.zeros_like(a), out) if fn is np.left_shift or \
        np.issubdtype(a.dtype, np.unsignedinteger) else out

_BINARY = {E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.Div: np.divide,
           E.FloorDiv: np.floor_divide, E.FloorMod: np.mod, E.Min: np.minimum,
           E.Max: np.maximum, E.LT: np.less, E.LE: np.less_equal, E.EQ: np.equal,
           E.NE: np.not_equal, E.And: np.logical_and, E.Or: np.logical_or}


class _Evaluator:
    """Evaluates expressions to numpy arrays over a grid environment (one block at a time)."""

    def __init__(self, values: dict, op: ComputeOp):
        self.values = values
        self.op = op

    def run(self, expr: E.Expr, env: dict):
        self.env = env
        self.memo: dict = {}
        with np.errstate(all="ignore"):
            return self._eval(expr)

    def _eval(self, e: E.Expr):
        hit = self.memo.get(e)
        if hit is not None:
            return hit
        value = self._compute(e)
        if isinstance(value, np.ndarray) or np.isscalar(value):
            value = np.asarray(value)
            if value.dtype != np.dtype(e.dtype):
                value = value.astype(e.dtype)
        self.memo[e] = value
        return value

    def _compute(self, e: E.Expr):
        t = type(e)
        if t is E.IntImm or t is E.FloatImm:
            return np.asarray(e.value, dtype=e.dtype)
        if t is E.Var:
            if e not in self.env:
                raise TEError(f"evaluate(): compute '{self.op.name}' uses variable "
                              f"'{e.name}' that is not one of its axes")
            return self.env[e]
        ufunc = _BINARY.get(t)
        if ufunc is not None:
            return ufunc(self._eval(e.a), self._eval(e.b))
        if t is E.Not:
            return np.logical_not(self._eval(e.a))
        if t is E.Select:
            return np.where(self._eval(e.cond), self._eval(e.t), self._eval(e.f))
        if t is E.Cast:
            return self._eval(e.value).astype(e.dtype)
        if t is E.Call:
            if e.name == "reinterpret":
                return np.ascontiguousarray(self._eval(e.args[0]),
                                            dtype=e.args[0].dtype).view(e.dtype)
            return _INTRINSICS[e.name](*[self._eval(a) for a in e.args])
        if t is TensorLoad:
            return self._load(e)
        if t is E.Reduce:
            raise TEError(f"evaluate(): compute '{self.op.name}' has a reduction inside a "
                          "larger expression; a reduction must be the whole body")
        raise TEError(f"evaluate(): cannot interpret node {t.__name__} in '{self.op.name}'")

    def _load(self, e: TensorLoad):
        array = self.values[e.tensor.op]
        indices = []
        for axis, index in enumerate(e.indices):
            idx = np.asarray(self._eval(index))
            extent = array.shape[axis]
            if idx.size and (idx.min() < 0 or idx.max() >= extent):
                # only an unused Select branch may go out of bounds: clamp, Select discards it
                idx = np.clip(idx, 0, extent - 1)
            indices.append(idx)
        return array[tuple(indices)]
