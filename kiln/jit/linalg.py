"""matmul / @, dot, outer, einsum on traced values: graph `matmul` (numpy's rank-1 and batch
broadcasting rules) and the ONNX frontend's Einsum converter (batched matmuls where labels are
contracted, else a broadcast product and a sum)."""
from __future__ import annotations

import numpy as np

from ..graph.onnx.core import CONVERTERS
from ..te.errors import ModelFormatError, UnsupportedOperatorError
from . import shapes
from .dtypes import ufunc_dtypes
from .elementwise import multiply, value, wrap
from .errors import JitError, shape_error, unsupported, user_line
from .trace import find_trace


def _shape(x) -> tuple[int, ...]:
    return tuple(np.shape(x)) if not hasattr(x, "trace") else x.shape


def matmul(a, b, /):
    trace = find_trace((a, b))
    if trace is None:
        return np.matmul(a, b)
    ta, tb, out = ufunc_dtypes(np.matmul, (a, b))
    if out == np.bool_:
        raise JitError(f"numpy.matmul of bool arrays is not supported by kiln.jit (cast "
                       f"with .astype(np.int32) first), at {user_line()}")
    sa, sb = _shape(a), _shape(b)
    if not sa or not sb:
        raise shape_error("numpy.matmul", f"operands must have rank >= 1, got shapes "
                                          f"{list(sa)} and {list(sb)}")
    ka = sa[-1]
    kb = sb[-2] if len(sb) > 1 else sb[0]
    if ka != kb:
        raise shape_error("numpy.matmul", f"shapes {list(sa)} and {list(sb)}: contraction "
                                          f"dimensions {ka} and {kb} differ")
    try:
        np.broadcast_shapes(sa[:-2], sb[:-2])
    except ValueError:
        raise shape_error("numpy.matmul", f"shapes {list(sa)} and {list(sb)}: batch "
                                          "dimensions cannot be broadcast") from None
    y = trace.emit("matmul", [value(trace, a, ta), value(trace, b, tb)])
    return wrap(trace, y)


def dot(a, b, out=None):
    if out is not None:
        raise unsupported("dot", "out=")
    if find_trace((a, b)) is None:
        return np.dot(a, b)
    ra, rb = len(_shape(a)), len(_shape(b))
    if ra == 0 or rb == 0:
        return multiply(a, b)
    if ra <= 2 and rb <= 2:
        return matmul(a, b)
    if rb == 1:
        return matmul(a, b)
    raise unsupported("dot", f"rank-{ra} by rank-{rb} (numpy.dot's N-d rule); use matmul "
                             "or einsum")


def vdot(a, b):
    return dot(shapes.ravel(a) if hasattr(a, "trace") else np.ravel(a),
               shapes.ravel(b) if hasattr(b, "trace") else np.ravel(b))


def outer(a, b):
    if find_trace((a, b)) is None:
        return np.outer(a, b)
    a = shapes.reshape(a, (-1, 1)) if hasattr(a, "trace") else np.reshape(a, (-1, 1))
    b = shapes.reshape(b, (1, -1)) if hasattr(b, "trace") else np.reshape(b, (1, -1))
    return multiply(a, b)


def inner(a, b):
    if find_trace((a, b)) is None:
        return np.inner(a, b)
    if len(_shape(a)) <= 1 and len(_shape(b)) <= 1:
        return dot(a, b)
    raise unsupported("inner", "operands of rank > 1; use einsum")


def einsum(subscripts, *operands, optimize=False, dtype=None):
    """numpy.einsum with an explicit or implicit output, '...', repeated labels (diagonals)."""
    trace = find_trace(operands)
    if trace is None:
        return np.einsum(subscripts, *operands, optimize=optimize, dtype=dtype)
    if not isinstance(subscripts, str):
        raise unsupported("einsum", "the interleaved (operand, sublist) form")
    dtypes = ufunc_dtypes(np.multiply, operands[:2]) if len(operands) > 1 else None
    dtype = np.dtype(dtype) if dtype is not None else (
        dtypes[-1] if dtypes else operands[0].dtype)
    for extra in operands[2:]:
        dtype = np.result_type(dtype, extra.dtype if hasattr(extra, "trace") else
                               np.asarray(extra).dtype)
    values = [value(trace, x, np.dtype(dtype)) for x in operands]
    _check_labels(subscripts, values)
    # ONNX Einsum labels are lower-case; numpy's may be either case: rename them
    labels = sorted({c for c in subscripts if c.isalpha()})
    if len(labels) > 26:
        raise unsupported("einsum", "more than 26 distinct labels")
    rename = dict(zip(labels, "abcdefghijklmnopqrstuvwxyz"))
    equation = "".join(rename.get(c, c) for c in subscripts)
    trace.node_name, trace.op_type, trace.output_names = "einsum", "Einsum", []
    try:
        y = CONVERTERS["Einsum"](trace, *values, equation=equation)
    except (ModelFormatError, UnsupportedOperatorError) as exc:
        shapes_ = ", ".join(str(list(v.shape)) for v in values)
        raise shape_error("numpy.einsum", f"{subscripts!r} on shapes {shapes_}: "
                                          f"{exc}") from None
    return wrap(trace, y)


def _check_labels(subscripts: str, values) -> None:
    """A label's dimensions must agree across operands (or be 1), as numpy requires."""
    terms = subscripts.replace(" ", "").partition("->")[0].split(",")
    if len(terms) != len(values):
        raise shape_error("numpy.einsum", f"{subscripts!r} names {len(terms)} operands, "
                                          f"{len(values)} were given")
    sizes: dict[str, tuple[int, int]] = {}
    for k, (term, v) in enumerate(zip(terms, values)):
        if "..." in term:
            continue            # the converter lines '...' up (and reports a bad rank)
        if len(term) != len(v.shape):
            raise shape_error("numpy.einsum", f"operand {k} has shape {list(v.shape)}, but "
                                              f"its subscripts {term!r} name {len(term)} axes")
        for label, d in zip(term, v.shape):
            seen = sizes.setdefault(label, (d, k))
            if d != seen[0] and 1 not in (d, seen[0]):
                raise shape_error("numpy.einsum", f"{subscripts!r}: label {label!r} has size "
                                                  f"{seen[0]} in operand {seen[1]} "
                                                  f"{list(values[seen[1]].shape)} and {d} in "
                                                  f"operand {k} {list(v.shape)}")
