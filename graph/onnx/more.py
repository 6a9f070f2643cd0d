"""More ONNX operator converters, registered into onnx_ops.CONVERTERS.

Ops with their own graph op (graph/ops/more.py) map onto it; the others are composed here from
graph ops (reductions, elementwise, reshape/transpose, where, constants of the index patterns),
so the fusion pass groups them into kernels like any other subgraph. Only inputs that decide a
shape (axes, repeats, k, depth) are read at compile time (ctx.static).
"""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from ..ops import more as ops_more  # noqa: F401 - registers the graph ops these converters emit
from ..ir import Value
from .core import checked_axis, make_unary, unsupported_error
from .registry import converter, register

# -- elementwise -------------------------------------------------------------------------------

_UNARY = {"Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos",
          "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh",
          "Atanh": "atanh", "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign",
          "BitwiseNot": "bit_not", "IsNaN": "is_nan", "Softplus": "softplus",
          "Softsign": "softsign", "Mish": "mish"}
# IsNaN reads low-bit floats decoded: lowbit.py registers it around this converter
convert_is_nan = make_unary(_UNARY.pop("IsNaN"))
for _t, _op in _UNARY.items():
    register(_t, make_unary(_op), __name__)

_BINARY = {"BitwiseAnd": "bit_and", "BitwiseOr": "bit_or", "BitwiseXor": "bit_xor",
           "LessOrEqual": "less_equal", "GreaterOrEqual": "greater_equal",
           "Xor": "logical_xor", "PRelu": "prelu"}
for _t, _op in _BINARY.items():
    register(_t, (lambda op: lambda ctx, a, b: ctx.emit(op, [a, b], final=True))(_op),
             __name__)

# ONNX defaults of the activations' attributes
_ACTIVATIONS = {"Elu": ("elu", {"alpha": 1.0}),
                "Selu": ("selu", {"alpha": 1.67326319217681884765625,
                                  "gamma": 1.05070102214813232421875}),
                "Celu": ("celu", {"alpha": 1.0}),
                "ThresholdedRelu": ("thresholded_relu", {"alpha": 1.0}),
                "Shrink": ("shrink", {"bias": 0.0, "lambd": 0.5}),
                "Swish": ("swish", {"alpha": 1.0})}


def _make_activation(op: str, defaults: dict):
    def conv(ctx, x, **attrs):
        unknown = set(attrs) - set(defaults)
        if unknown:
            raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): unknown "
                                   f"attributes {sorted(unknown)}; expected {sorted(defaults)}")
        values = {k: float(attrs.get(k, v)) for k, v in defaults.items()}
        return ctx.emit(op, [x], values, final=True)
    return conv


for _t, (_op, _defaults) in _ACTIVATIONS.items():
    register(_t, _make_activation(_op, _defaults), __name__)


def convert_is_inf(ctx, x, detect_negative=1, detect_positive=1):
    return ctx.emit("is_inf", [x], {"detect_negative": int(detect_negative),
                                    "detect_positive": int(detect_positive)}, final=True)


@converter("Mod")
def _mod(ctx, a, b, fmod=0):
    return ctx.emit("mod", [a, b], {"fmod": int(fmod)}, final=True)


@converter("BitShift")
def _bit_shift(ctx, a, b, direction):
    if direction not in ("LEFT", "RIGHT"):
        raise ModelFormatError(f"node '{ctx.node_name}' (BitShift): direction {direction!r}; "
                               "expected 'LEFT' or 'RIGHT'")
    return ctx.emit("shl" if direction == "LEFT" else "shr", [a, b], final=True)


@converter("Max", "Min", "Sum", "Mean")
def _variadic(ctx, *xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}) has no inputs")
    op = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}[ctx.op_type]
    mean = ctx.op_type == "Mean" and len(xs) > 1
    if len(xs) == 1:
        return ctx.emit("identity", xs, final=True)
    acc = xs[0]
    for k, x in enumerate(xs[1:]):
        acc = ctx.emit(op, [acc, x], final=k == len(xs) - 2 and not mean)
    if mean:
        acc = ctx.emit("div", [acc, ctx.const(np.array(len(xs), dtype=acc.dtype))], final=True)
    return acc


def convert_cast_like(ctx, x, like, saturate=1, round_mode="up"):
    return ctx.emit("cast", [x], {"to": like.dtype}, final=True)


@converter("Size")
def _size(ctx, x):
    return ctx.const(np.array(int(np.prod(x.shape, dtype=np.int64)), dtype=np.int64),
                     final=True)


@converter("EyeLike")
def _eye_like(ctx, x, dtype=None, k=0):
    out = x.dtype if dtype is None else ctx.onnx_dtype(dtype)
    if len(x.shape) != 2:
        raise ModelFormatError(f"node '{ctx.node_name}' (EyeLike): input {list(x.shape)} must "
                               "be 2-D")
    return ctx.const(np.eye(*x.shape, k=int(k), dtype=out), final=True)


# -- reductions --------------------------------------------------------------------------------

def _reduce_axes(ctx, x: Value, axes_in, axes, noop_with_empty_axes, since: int):
    """The normalised axes of a Reduce* node, or None for a no-op (empty axes)."""
    if ctx.opset >= since:
        axes = None if axes_in is None else ctx.static(axes_in, "axes").tolist()
    rank = len(x.shape)
    if not axes:
        if noop_with_empty_axes:
            return None
        axes = range(rank)
    return tuple(sorted({checked_axis(ctx, int(a), rank) for a in axes}))


@converter("ReduceL1", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "ReduceProd")
def _reduce_more(ctx, x, axes_in=None, axes=None, keepdims=1, noop_with_empty_axes=0):
    norm = _reduce_axes(ctx, x, axes_in, axes, noop_with_empty_axes, 18)
    kind = ctx.op_type
    if norm is None:   # ONNX: the reduction over no axes still applies the element map
        src = {"ReduceL1": lambda: ctx.emit("abs", [x], final=True),
               "ReduceSumSquare": lambda: ctx.emit("mul", [x, x], final=True)}
        return src.get(kind, lambda: ctx.emit("identity", [x], final=True))()
    attrs = {"axes": norm, "keepdims": int(keepdims)}
    if kind == "ReduceProd":
        return ctx.emit("reduce_prod", [x], attrs, final=True)
    if kind == "ReduceL1":
        return ctx.emit("reduce_sum", [ctx.emit("abs", [x])], attrs, final=True)
    if kind == "ReduceSumSquare":
        return ctx.emit("reduce_sum", [ctx.emit("mul", [x, x])], attrs, final=True)
    if kind == "ReduceLogSum":
        return ctx.emit("log", [ctx.emit("reduce_sum", [x], attrs)], final=True)
    # log(sum(exp(x - m))) + m with m the max (kept finite for an all -inf slice)
    m = ctx.emit("reduce_max", [x], {"axes": norm, "keepdims": 1})
    e = ctx.emit("exp", [ctx.emit("sub", [x, m])])
    s = ctx.emit("log", [ctx.emit("reduce_sum", [e], {"axes": norm, "keepdims": 1})])
    y = ctx.emit("add", [s, m], final=bool(keepdims))
    if keepdims:
        return y
    shape = tuple(d for k, d in enumerate(x.shape) if k not in norm)
    return ctx.emit("reshape", [y], {"shape": shape}, final=True)


@converter("ArgMax", "ArgMin")
def _arg(ctx, x, axis=0, keepdims=1, select_last_index=0):
    attrs = {"axis": checked_axis(ctx, axis, len(x.shape)), "keepdims": int(keepdims),
             "select_last_index": int(select_last_index)}
    return ctx.emit("argmax" if ctx.op_type == "ArgMax" else "argmin", [x], attrs, final=True)


@converter("CumSum")
def _cumsum(ctx, x, axis, exclusive=0, reverse=0):
    a = checked_axis(ctx, int(ctx.static(axis, "axis").reshape(-1)[0]), len(x.shape))
    return ctx.emit("cumsum", [x], {"axis": a, "exclusive": int(exclusive),
                                    "reverse": int(reverse)}, final=True)


@converter("Hardmax")
def _hardmax(ctx, x, axis=None):
    rank = len(x.shape)
    if ctx.opset >= 13:
        return _hardmax_along(ctx, x, checked_axis(ctx, -1 if axis is None else axis, rank), True)
    axis = checked_axis(ctx, 1 if axis is None else axis, rank)   # old: coerced to 2-D at axis
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    flat = ctx.emit("reshape", [x], {"shape": (rows, x.size // max(rows, 1))})
    y = _hardmax_along(ctx, flat, 1, False)
    return ctx.emit("reshape", [y], {"shape": x.shape}, final=True)


def _hardmax_along(ctx, x: Value, axis: int, final: bool) -> Value:
    """1 where the first maximum along `axis` is, else 0."""
    first = ctx.emit("argmax", [x], {"axis": axis, "keepdims": 1, "select_last_index": 0})
    positions = ctx.const(_iota(len(x.shape), axis, x.shape[axis]))
    hit = ctx.emit("equal", [first, positions])
    return ctx.emit("cast", [hit], {"to": x.dtype}, final=final)


def _iota(rank: int, axis: int, n: int, dtype=np.int64) -> np.ndarray:
    """0..n-1 along `axis` of a rank-`rank` array (size 1 elsewhere), for broadcasting."""
    shape = [1] * rank
    shape[axis] = n
    return np.arange(n, dtype=dtype).reshape(shape)


# -- indexing ----------------------------------------------------------------------------------

@converter("GatherElements")
def _gather_elements(ctx, data, indices, axis=0):
    if len(indices.shape) != len(data.shape):
        raise ModelFormatError(f"node '{ctx.node_name}' (GatherElements): indices "
                               f"{list(indices.shape)} and data {list(data.shape)} must have "
                               "the same rank")
    return ctx.emit("gather_elements", [data, indices],
                    {"axis": checked_axis(ctx, axis, len(data.shape))}, final=True)


@converter("ScatterElements", "Scatter")
def _scatter_elements(ctx, data, indices, updates, axis=0, reduction="none"):
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): reduction "
                               f"{reduction!r}; expected none, add, mul, max or min")
    return ctx.emit("scatter_elements", [data, indices, updates],
                    {"axis": checked_axis(ctx, axis, len(data.shape)), "reduction": reduction},
                    final=True)


@converter("ScatterND")
def _scatter_nd(ctx, data, indices, updates, reduction="none"):
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise ModelFormatError(f"node '{ctx.node_name}' (ScatterND): reduction {reduction!r}; "
                               "expected none, add, mul, max or min")
    return ctx.emit("scatter_nd", [data, indices, updates], {"reduction": reduction},
                    final=True)


@converter("Trilu")
def _trilu(ctx, x, k=None, upper=1):
    """where(mask, x, 0); the mask compares (column - row) with k, so a k that arrives as a
    graph input stays a runtime argument."""
    if len(x.shape) < 2:
        raise ModelFormatError(f"node '{ctx.node_name}' (Trilu): input {list(x.shape)} must "
                               "have rank >= 2")
    n, m = x.shape[-2:]
    offset = ctx.const(np.arange(m, dtype=np.int64)[None, :] - np.arange(n, dtype=np.int64)[
        :, None])
    if k is None:
        k = ctx.const(np.zeros((), dtype=np.int64))
    elif k.shape not in ((), (1,)):
        raise ModelFormatError(f"node '{ctx.node_name}' (Trilu): k must be a scalar, got "
                               f"shape {list(k.shape)}")
    elif k.shape == (1,):
        k = ctx.emit("reshape", [k], {"shape": ()})
    keep = ctx.emit("greater_equal" if upper else "less_equal", [offset, k])
    zero = ctx.const(np.zeros((), dtype=x.dtype))
    return ctx.emit("where", [keep, x, zero], final=True)


@converter("Tile")
def _tile(ctx, x, repeats):
    reps = [int(r) for r in ctx.static(repeats, "repeats").reshape(-1)]
    if len(reps) != len(x.shape) or min(reps, default=1) < 0:
        raise ModelFormatError(f"node '{ctx.node_name}' (Tile): repeats {reps} must give one "
                               f"non-negative count per axis of {list(x.shape)}")
    # x[d0, d1] -> [1, d0, 1, d1] -> broadcast [r0, d0, r1, d1] -> [r0 * d0, r1 * d1]
    spread = [v for d in x.shape for v in (1, d)]
    wide = [v for r, d in zip(reps, x.shape) for v in (r, d)]
    y = ctx.emit("reshape", [x], {"shape": tuple(spread)})
    y = ctx.emit("broadcast_to", [y], {"shape": tuple(wide)})
    return ctx.emit("reshape", [y], {"shape": tuple(r * d for r, d in zip(reps, x.shape))},
                    final=True)


@converter("DepthToSpace")
def _depth_to_space(ctx, x, blocksize, mode="DCR"):
    n, c, h, w = _nchw(ctx, x)
    b = int(blocksize)
    if c % (b * b):
        raise ModelFormatError(f"node '{ctx.node_name}' (DepthToSpace): {c} channels do not "
                               f"divide by blocksize^2 = {b * b}")
    if mode == "DCR":
        y = ctx.emit("reshape", [x], {"shape": (n, b, b, c // (b * b), h, w)})
        y = ctx.emit("transpose", [y], {"perm": (0, 3, 4, 1, 5, 2)})
    elif mode == "CRD":
        y = ctx.emit("reshape", [x], {"shape": (n, c // (b * b), b, b, h, w)})
        y = ctx.emit("transpose", [y], {"perm": (0, 1, 4, 2, 5, 3)})
    else:
        raise ModelFormatError(f"node '{ctx.node_name}' (DepthToSpace): mode {mode!r}; "
                               "expected 'DCR' or 'CRD'")
    return ctx.emit("reshape", [y], {"shape": (n, c // (b * b), h * b, w * b)}, final=True)


@converter("SpaceToDepth")
def _space_to_depth(ctx, x, blocksize, mode="DCR"):
    n, c, h, w = _nchw(ctx, x)
    b = int(blocksize)
    if h % b or w % b:
        raise ModelFormatError(f"node '{ctx.node_name}' (SpaceToDepth): spatial dims {h}x{w} "
                               f"do not divide by blocksize {b}")
    y = ctx.emit("reshape", [x], {"shape": (n, c, h // b, b, w // b, b)})
    if mode not in ("DCR", "CRD"):
        raise ModelFormatError(f"node '{ctx.node_name}' (SpaceToDepth): mode {mode!r}; "
                               "expected 'DCR' or 'CRD'")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    y = ctx.emit("transpose", [y], {"perm": perm})
    return ctx.emit("reshape", [y], {"shape": (n, c * b * b, h // b, w // b)}, final=True)


def _nchw(ctx, x: Value) -> tuple[int, int, int, int]:
    if len(x.shape) != 4:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): input "
                               f"{list(x.shape)} must be 4-D NCHW")
    return x.shape


@converter("OneHot")
def _one_hot(ctx, indices, depth, values, axis=-1):
    d = int(ctx.static(depth, "depth").reshape(-1)[0])
    rank = len(indices.shape) + 1
    a = checked_axis(ctx, axis, rank)
    idx = ctx.emit("reshape", [indices], {"shape": indices.shape[:a] + (1,) + indices.shape[a:]})
    # negative indices count from the end: idx + depth * (idx < 0)
    zero = ctx.const(np.zeros((), dtype=indices.dtype))
    neg = ctx.emit("less", [idx, zero])
    wrapped = ctx.emit("where", [neg, ctx.emit("add", [idx, ctx.const(np.array(
        d, dtype=indices.dtype))]), idx])
    hit = ctx.emit("equal", [wrapped, ctx.const(_iota(rank, a, d, np.dtype(indices.dtype)))])
    off = ctx.emit("slice", [values], {"starts": (0,), "ends": (1,), "steps": (1,)})
    on = ctx.emit("slice", [values], {"starts": (1,), "ends": (2,), "steps": (1,)})
    off = ctx.emit("reshape", [off], {"shape": ()})
    on = ctx.emit("reshape", [on], {"shape": ()})
    return ctx.emit("where", [hit, on, off], final=True)


# -- einsum ------------------------------------------------------------------------------------

def _einsum_terms(ctx, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Input label strings and the output labels, with '...' spelled out as upper-case
    labels (ONNX labels are lower-case letters), the output implicit when no '->'."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ModelFormatError(f"node '{ctx.node_name}' (Einsum): equation {equation!r} has "
                               f"{len(terms)} operands, the node {len(ranks)} inputs")
    ell = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t),
              default=0)
    fill = "".join(chr(ord("A") + k) for k in range(ell))
    out_terms = []
    for t, r in zip(terms, ranks):
        n = r - len(t.replace("...", ""))
        out_terms.append(t.replace("...", fill[ell - n:]) if "..." in t else t)
    if arrow:
        out = rhs.replace("...", fill)
    else:
        counts = {c: "".join(out_terms).count(c) for c in "".join(out_terms)}
        out = fill + "".join(sorted(c for c, k in counts.items() if k == 1 and c.islower()))
    for t, r in zip(out_terms, ranks):
        if len(t) != r:
            raise unsupported_error(ctx, f"Einsum term {t!r} on a rank-{r} input")
    return out_terms, out


def _einsum_diagonal(ctx, x: Value, term: str) -> tuple[Value, str]:
    """A term with a repeated label (x[..., i, ..., i]) as its diagonal: the two axes moved
    last, flattened, and every (n + 1)-th element taken; the label then appears once."""
    while len(set(term)) != len(term):
        c = next(ch for ch in term if term.count(ch) > 1)
        p1 = term.index(c)
        p2 = term.index(c, p1 + 1)
        n = x.shape[p1]
        if x.shape[p2] != n:
            raise ModelFormatError(f"node '{ctx.node_name}' (Einsum): label {c!r} has sizes "
                                   f"{n} and {x.shape[p2]} in term {term!r}")
        keep = [a for a in range(len(term)) if a not in (p1, p2)]
        y = ctx.emit("transpose", [x], {"perm": tuple(keep) + (p1, p2)})
        lead = tuple(x.shape[a] for a in keep)
        y = ctx.emit("reshape", [y], {"shape": lead + (n * n,)})
        rank = len(lead) + 1
        y = ctx.emit("slice", [y], {"starts": (0,) * rank, "ends": lead + (n * n,),
                                    "steps": (1,) * (rank - 1) + (n + 1,)})
        x, term = y, "".join(term[a] for a in keep) + c
    return x, term


def _einsum_sum_out(ctx, x: Value, term: str, labels) -> tuple[Value, str]:
    """Sum `x` over the axes of `labels` (labels no later operand or the output needs)."""
    axes = tuple(a for a, c in enumerate(term) if c in labels)
    if not axes:
        return x, term
    y = ctx.emit("reduce_sum", [x], {"axes": axes, "keepdims": 0})
    return y, "".join(c for c in term if c not in labels)


def _einsum_contract(ctx, a: Value, ta: str, b: Value, tb: str, keep: set
                     ) -> tuple[Value, str]:
    """Two operands as one batched matmul: labels of both that are kept are the batch,
    labels of both that are not are contracted (K), the rest are a's rows (M) and b's
    columns (N); [batch.., M.., N..] comes out (_einsum_contractible: something is
    contracted, at equal sizes)."""
    a, ta = _einsum_sum_out(ctx, a, ta, set(ta) - set(tb) - keep)
    b, tb = _einsum_sum_out(ctx, b, tb, set(tb) - set(ta) - keep)
    batch = [c for c in ta if c in tb and c in keep]
    summed = [c for c in ta if c in tb and c not in keep]
    rows = [c for c in ta if c not in tb]
    cols = [c for c in tb if c not in ta]
    size_a = dict(zip(ta, a.shape))
    size_b = dict(zip(tb, b.shape))

    def arrange(x, term, order, sizes, tail):
        perm = tuple(term.index(c) for c in order)
        if perm != tuple(range(len(term))):
            x = ctx.emit("transpose", [x], {"perm": perm})
        shape = tuple(sizes[c] for c in batch) + tail
        return x if shape == x.shape else ctx.emit("reshape", [x], {"shape": shape})

    prod = lambda labels, sizes: int(np.prod([sizes[c] for c in labels], dtype=np.int64))
    k = prod(summed, size_a)
    lhs = arrange(a, ta, batch + rows + summed, size_a, (prod(rows, size_a), k))
    rhs = arrange(b, tb, batch + summed + cols, size_b, (k, prod(cols, size_b)))
    y = ctx.emit("matmul", [lhs, rhs])
    shape = (y.shape[:len(batch)] + tuple(size_a[c] for c in rows)
             + tuple(size_b[c] for c in cols))
    if shape != y.shape:
        y = ctx.emit("reshape", [y], {"shape": shape})
    return y, "".join(batch + rows + cols)


def _einsum_contractible(xs, terms, out: str) -> bool:
    """Whether every left-to-right pair contracts some label of equal sizes (the labels
    each operand sums away alone are gone by then), in a float type; otherwise the
    broadcast product is the whole work (an outer or elementwise product)."""
    if any(x.dtype not in ("float32", "float64") for x in xs):
        return False
    term, sizes = terms[0], dict(zip(terms[0], xs[0].shape))
    for k in range(1, len(xs)):
        keep = set(out).union(*terms[k + 1:])
        other = dict(zip(terms[k], xs[k].shape))
        summed = [c for c in term if c in other and c not in keep]
        if not summed or any(sizes[c] != other[c] for c in summed):
            return False
        term = "".join([c for c in term if c in other and c in keep]
                       + [c for c in term if c not in other and c in keep]
                       + [c for c in other if c not in term and c in keep])
        sizes = {c: max(sizes.get(c, 1), other.get(c, 1)) for c in {*sizes, *other}}
    return True


def _einsum_matmuls(ctx, xs, terms, out: str) -> Value:
    """Operands contracted pairwise, left to right, as batched matmuls: what attention's
    einsums are (a broadcast product would hold [B, H, I, J, D] in memory)."""
    acc, term = xs[0], terms[0]
    for k in range(1, len(xs)):
        keep = set(out).union(*terms[k + 1:])
        acc, term = _einsum_contract(ctx, acc, term, xs[k], terms[k], keep)
    acc, term = _einsum_sum_out(ctx, acc, term, set(term) - set(out))
    if term != out:
        acc = ctx.emit("transpose", [acc], {"perm": tuple(term.index(c) for c in out)})
    return ctx.emit("identity", [acc], final=True)


@converter("Einsum")
def _einsum(ctx, *xs, equation):
    """Two or more operands that contract labels: batched matmuls (_einsum_matmuls).
    Otherwise every operand transposed and reshaped onto all labels (output labels first,
    then the summed ones), multiplied with broadcasting, and summed over the trailing
    labels."""
    terms, out = _einsum_terms(ctx, equation, [len(x.shape) for x in xs])
    xs, terms = zip(*(_einsum_diagonal(ctx, x, t) for x, t in zip(xs, terms)))
    if len(xs) > 1 and _einsum_contractible(xs, terms, out):
        return _einsum_matmuls(ctx, list(xs), list(terms), out)
    summed = sorted({c for t in terms for c in t} - set(out))
    labels = list(out) + summed
    size = {}
    for t, x in zip(terms, xs):
        for c, d in zip(t, x.shape):
            size[c] = max(size.get(c, 1), d)
    acc = None
    for t, x in zip(terms, xs):
        order = sorted(range(len(t)), key=lambda a: labels.index(t[a]))
        y = x
        if order != list(range(len(t))):
            y = ctx.emit("transpose", [y], {"perm": tuple(order)})
        full = tuple(x.shape[t.index(c)] if c in t else 1 for c in labels)
        if full != y.shape:
            y = ctx.emit("reshape", [y], {"shape": full})
        acc = y if acc is None else ctx.emit("mul", [acc, y])
    if summed:
        axes = tuple(range(len(out), len(labels)))
        return ctx.emit("reduce_sum", [acc], {"axes": axes, "keepdims": 0}, final=True)
    if acc.shape != tuple(size[c] for c in out):
        acc = ctx.emit("broadcast_to", [acc], {"shape": tuple(size[c] for c in out)})
    return ctx.emit("identity", [acc], final=True)


@converter("ReverseSequence")
def _reverse_sequence(ctx, x, sequence_lens, batch_axis=1, time_axis=0):
    """A gather along the time axis at where(t < len[b], len[b] - 1 - t, t); the lengths
    stay a run-time argument."""
    rank = len(x.shape)
    ba, ta = checked_axis(ctx, batch_axis, rank), checked_axis(ctx, time_axis, rank)
    if {ba, ta} != {0, 1}:
        raise ModelFormatError(f"node '{ctx.node_name}' (ReverseSequence): batch_axis and "
                               "time_axis must be 0 and 1")
    t = ctx.const(_iota(rank, ta, x.shape[ta]))
    shape = [1] * rank
    shape[ba] = x.shape[ba]
    lens = ctx.emit("reshape", [sequence_lens], {"shape": tuple(shape)})
    if lens.dtype != "int64":
        lens = ctx.emit("cast", [lens], {"to": "int64"})
    last = ctx.emit("sub", [lens, ctx.const(np.array(1, dtype=np.int64))])
    flipped = ctx.emit("sub", [last, t])
    idx = ctx.emit("where", [ctx.emit("less", [t, lens]), flipped, t])
    idx = ctx.emit("broadcast_to", [idx], {"shape": tuple(x.shape)})
    return ctx.emit("gather_elements", [x, idx], {"axis": ta}, final=True)
