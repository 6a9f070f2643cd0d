"""Hypothesis strategies: random small ONNX graphs (elementwise/broadcast chains, reductions,
reshape/flatten/squeeze/unsqueeze, slice/split/concat, transpose, gather) with random shapes
and axes, negative ones included, for comparing Kiln with onnxruntime.

A graph is grown one node at a time from a pool of float32 values; every node's parameters are
drawn so that the node is valid for the shapes it reads (the generator tracks shapes with
numpy, so it never relies on Kiln to know them).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
DIMS = (1, 2, 3, 4, 5, 7)          # awkward extents: 1, primes, not multiples of 8
MAX_SIZE = 1024                    # elements per value, so models stay tiny


@dataclass
class _Builder:
    draw: object
    nodes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    feeds: dict = field(default_factory=dict)
    inits: list = field(default_factory=list)
    pool: list = field(default_factory=list)        # (name, shape) of float32 values
    count: int = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{hint}{self.count}"

    def add_input(self, shape) -> str:
        name = self.name("x")
        rng = np.random.default_rng(self.count)
        self.feeds[name] = rng.uniform(-2, 2, size=shape).astype(np.float32)
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        self.pool.append((name, tuple(shape)))
        return name

    def const(self, array, hint="c") -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, n_out=1, **attrs) -> list[str]:
        outs = [self.name(op.lower() + "_") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), **attrs))
        return outs

    def pick(self) -> tuple[str, tuple]:
        return self.draw(st.sampled_from(self.pool))

    def axis(self, rank: int) -> int:
        """An axis of a rank-`rank` value, negative half of the time."""
        a = self.draw(st.integers(0, rank - 1))
        return a - rank if self.draw(st.booleans()) else a


def _broadcastable(a, b) -> bool:
    try:
        return int(np.prod(np.broadcast_shapes(a, b))) <= MAX_SIZE
    except ValueError:
        return False


def _shape(draw, rank_min=1, rank_max=4):
    rank = draw(st.integers(rank_min, rank_max))
    return tuple(draw(st.sampled_from(DIMS)) for _ in range(rank))


# -- one step per op family; each returns the new values (name, shape) ------------------------

def _unary(b: _Builder):
    name, shape = b.pick()
    op = b.draw(st.sampled_from(["Relu", "Neg", "Abs", "Tanh", "Sigmoid", "Erf"]))
    return [(b.node(op, [name])[0], shape)]


def _binary(b: _Builder):
    name, shape = b.pick()
    op = b.draw(st.sampled_from(["Add", "Sub", "Mul"]))
    fits = [v for v in b.pool if _broadcastable(v[1], shape)]
    kinds = ["pool"] * bool(fits) + ["broadcast_const", "broadcast_input"]
    kind = b.draw(st.sampled_from(kinds))   # a value over MAX_SIZE fits nothing: no "pool"
    if kind == "pool":      # any computed value that broadcasts with it (an SE gate, ...)
        other, other_shape = b.draw(st.sampled_from(fits))
    else:   # a broadcastable operand: trailing dims, some set to 1
        keep = b.draw(st.integers(0, len(shape)))
        other_shape = tuple(d if b.draw(st.booleans()) else 1 for d in shape[len(shape) - keep:])
        if kind == "broadcast_const":
            rng = np.random.default_rng(b.count)
            other = b.const(rng.uniform(-2, 2, size=other_shape).astype(np.float32))
        else:
            other = b.add_input(other_shape)
            b.pool.pop()
    args = [name, other] if b.draw(st.booleans()) else [other, name]
    return [(b.node(op, args)[0], np.broadcast_shapes(shape, other_shape))]


def _reduce(b: _Builder):
    name, shape = b.pick()
    rank = len(shape)
    op = b.draw(st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]))
    axes = sorted(set(b.draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank))))
    signed = [a - rank if b.draw(st.booleans()) else a for a in axes]
    keepdims = b.draw(st.sampled_from([0, 1]))
    if keepdims == 0 and len(axes) == rank:
        keepdims = 1                       # keep a rank >= 1 value in the pool
    if op == "ReduceSum":                  # axes became an input in opset 13
        out = b.node(op, [name, b.const(np.array(signed, np.int64), "axes")],
                     keepdims=keepdims)[0]
    else:
        out = b.node(op, [name], axes=signed, keepdims=keepdims)[0]
    new = tuple(1 if k in axes else d for k, d in enumerate(shape)) if keepdims else \
        tuple(d for k, d in enumerate(shape) if k not in axes)
    return [(out, new)]


def _reshape(b: _Builder):
    name, shape = b.pick()
    size, primes = int(np.prod(shape)), []
    rest = size
    for p in (2, 3, 5, 7):
        while rest % p == 0:
            primes.append(p)
            rest //= p
    rank = b.draw(st.integers(1, 4))
    dims = [1] * rank
    for p in primes + ([rest] if rest > 1 else []):
        dims[b.draw(st.integers(0, rank - 1))] *= p
    target = list(dims)
    if b.draw(st.booleans()):
        target[b.draw(st.integers(0, rank - 1))] = -1
    return [(b.node("Reshape", [name, b.const(np.array(target, np.int64), "shape")])[0],
             tuple(dims))]


def _flatten(b: _Builder):
    name, shape = b.pick()
    rank = len(shape)
    axis = b.draw(st.integers(-rank, rank))
    k = axis + rank if axis < 0 else axis
    rows = int(np.prod(shape[:k]))
    return [(b.node("Flatten", [name], axis=axis)[0], (rows, int(np.prod(shape)) // rows))]


def _unsqueeze_squeeze(b: _Builder):
    name, shape = b.pick()
    ones = [k for k, d in enumerate(shape) if d == 1]
    if ones and len(shape) > 1 and b.draw(st.booleans()):
        drop = sorted(set(b.draw(st.lists(st.sampled_from(ones), min_size=1))))
        if len(drop) == len(shape):
            drop = drop[:-1]
        signed = [a - len(shape) if b.draw(st.booleans()) else a for a in drop]
        out = b.node("Squeeze", [name, b.const(np.array(signed, np.int64), "axes")])[0]
        return [(out, tuple(d for k, d in enumerate(shape) if k not in drop))]
    if len(shape) >= 5:
        return []
    rank = len(shape) + 1
    axis = b.axis(rank)
    out = b.node("Unsqueeze", [name, b.const(np.array([axis], np.int64), "axes")])[0]
    new = list(shape)
    new.insert(axis % rank, 1)
    return [(out, tuple(new))]


def _transpose(b: _Builder):
    name, shape = b.pick()
    perm = b.draw(st.permutations(range(len(shape))))
    return [(b.node("Transpose", [name], perm=list(perm))[0],
             tuple(shape[p] for p in perm))]


def _slice(b: _Builder):
    name, shape = b.pick()
    rank = len(shape)
    axes = b.draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    starts, ends, steps, signed = [], [], [], []
    ref = [slice(None)] * rank
    for a in axes:
        d = shape[a]
        step = b.draw(st.sampled_from([1, 1, 1, 2, -1, -2]))
        start = b.draw(st.integers(-d - 1, d + 1))
        end = b.draw(st.integers(-d - 2, d + 2))
        if len(range(*slice(start, end, step).indices(d))) == 0:
            start, end, step = 0, d, 1         # keep values non-empty
        starts.append(start)
        ends.append(end)
        steps.append(step)
        signed.append(a - rank if b.draw(st.booleans()) else a)
        ref[a] = slice(start, end, step)
    out = b.node("Slice", [name, b.const(np.array(starts, np.int64), "starts"),
                           b.const(np.array(ends, np.int64), "ends"),
                           b.const(np.array(signed, np.int64), "axes"),
                           b.const(np.array(steps, np.int64), "steps")])[0]
    return [(out, np.empty(shape)[tuple(ref)].shape)]


def _split(b: _Builder):
    candidates = [v for v in b.pool if max(v[1]) > 1]
    if not candidates:
        return []
    name, shape = b.draw(st.sampled_from(candidates))
    rank = len(shape)
    a = b.draw(st.sampled_from([k for k, d in enumerate(shape) if d > 1]))
    d = shape[a]
    n = b.draw(st.integers(2, min(d, 3)))
    cuts = sorted(b.draw(st.lists(st.integers(1, d - 1), min_size=n - 1, max_size=n - 1,
                                  unique=True)))
    sizes = [e - s for s, e in zip([0] + cuts, cuts + [d])]
    axis = a - rank if b.draw(st.booleans()) else a
    outs = b.node("Split", [name, b.const(np.array(sizes, np.int64), "split")],
                  n_out=len(sizes), axis=axis)
    result = []
    for o, s in zip(outs, sizes):
        new = list(shape)
        new[a] = s
        result.append((o, tuple(new)))
    return result


def _concat(b: _Builder):
    name, shape = b.pick()
    rank = len(shape)
    a = b.draw(st.integers(0, rank - 1))
    fits = [v for v in b.pool if len(v[1]) == rank and all(
        x == y for k, (x, y) in enumerate(zip(v[1], shape)) if k != a)]
    parts = [(name, shape)] + b.draw(st.lists(st.sampled_from(fits), min_size=1, max_size=3))
    parts = b.draw(st.permutations(parts))
    new = list(shape)
    new[a] = sum(p[1][a] for p in parts)
    if int(np.prod(new)) > MAX_SIZE:
        return []
    axis = a - rank if b.draw(st.booleans()) else a
    return [(b.node("Concat", [p[0] for p in parts], axis=axis)[0], tuple(new))]


def _gather(b: _Builder):
    name, shape = b.pick()
    rank = len(shape)
    a = b.draw(st.integers(0, rank - 1))
    d = shape[a]
    idx_shape = _shape(b.draw, 0, 2) if rank < 4 else ()
    rng = np.random.default_rng(b.count)
    idx = rng.integers(-d, d, size=idx_shape).astype(np.int64)
    axis = a - rank if b.draw(st.booleans()) else a
    out = b.node("Gather", [name, b.const(idx, "idx")], axis=axis)[0]
    new = shape[:a] + tuple(idx_shape) + shape[a + 1:]
    if not new:   # a scalar: keep the pool rank >= 1
        return [(b.node("Unsqueeze", [out, b.const(np.array([0], np.int64), "axes")])[0],
                 (1,))]
    return [(out, new)]


def _conv(b: _Builder):
    """A 1x1 or depthwise 3x3 conv (+ relu) on a 4-D value: the anchors whose groups views
    (slice/split/reshape) and concats feed in CNN blocks."""
    fours = [v for v in b.pool if len(v[1]) == 4]
    if not fours:
        name, shape = b.pick()
        size = int(np.prod(shape))
        new = (1, size, 1, 1) if b.draw(st.booleans()) else (1, 1, 1, size)
        return [(b.node("Reshape", [name, b.const(np.array(new, np.int64), "shape")])[0],
                 new)]
    name, (n, c, h, w) = b.draw(st.sampled_from(fours))
    rng = np.random.default_rng(b.count)
    if b.draw(st.booleans()):
        out_c = b.draw(st.sampled_from([1, 3, 8, 16, 24]))
        weight = rng.uniform(-0.5, 0.5, size=(out_c, c, 1, 1)).astype(np.float32)
        out = b.node("Conv", [name, b.const(weight, "w")])[0]
        shape = (n, out_c, h, w)
    else:
        weight = rng.uniform(-0.5, 0.5, size=(c, 1, 3, 3)).astype(np.float32)
        out = b.node("Conv", [name, b.const(weight, "w")], group=c, pads=[1, 1, 1, 1])[0]
        shape = (n, c, h, w)
    if b.draw(st.booleans()):
        out = b.node("Relu", [out])[0]
    return [(out, shape)]


STEPS = {"unary": _unary, "binary": _binary, "reduce": _reduce, "reshape": _reshape,
         "flatten": _flatten, "squeeze": _unsqueeze_squeeze, "transpose": _transpose,
         "slice": _slice, "split": _split, "concat": _concat, "gather": _gather, "conv": _conv}


@st.composite
def onnx_graphs(draw, families=tuple(STEPS), max_nodes: int = 6):
    """(ModelProto, feeds): a random valid graph whose nodes come from `families`."""
    b = _Builder(draw)
    b.add_input(_shape(draw))
    if draw(st.booleans()):
        b.add_input(draw(st.sampled_from([v[1] for v in b.pool])))
    for _ in range(draw(st.integers(1, max_nodes))):
        step = STEPS[draw(st.sampled_from(families))]
        new = [v for v in step(b) if 0 < int(np.prod(v[1])) <= MAX_SIZE]
        b.pool.extend((n, tuple(int(d) for d in s)) for n, s in new)
    produced = [v for v in b.pool if v[0] not in b.feeds]
    if not produced:
        produced = [(b.node("Relu", [b.pool[0][0]])[0], b.pool[0][1])]
    last = produced[-1:]
    extra = draw(st.lists(st.sampled_from(produced), max_size=2, unique=True))
    outputs = list(dict.fromkeys(last + extra))
    graph = helper.make_graph(
        b.nodes, "random", b.inputs,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, dict(b.feeds)
