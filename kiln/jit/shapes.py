"""Shape ops on traced values: reshape, transpose, indexing and slicing, broadcasting,
concatenate/stack, expand_dims/squeeze. Results are new values (graph `reshape`, `transpose`,
`slice`, `gather`, `concat`, `broadcast_to`): numpy's views are never observable, since traced
arrays are immutable."""
from __future__ import annotations

import numpy as np

from .dtypes import result_type
from .elementwise import value, wrap
from .errors import shape_error, unsupported
from .trace import Tracer, find_trace


def _norm_axis(op: str, axis: int, rank: int) -> int:
    if isinstance(axis, Tracer) or not isinstance(axis, (int, np.integer)):
        raise shape_error(op, f"axis must be a Python int, got {axis!r}")
    if not -rank <= axis < rank:
        raise shape_error(op, f"axis {axis} is out of range for rank {rank}")
    return int(axis) % rank


def constant(trace, array) -> Tracer:
    return wrap(trace, trace.const(np.asarray(array)))


def full_like_reduced(x: Tracer, axes, keepdims: bool, fill) -> Tracer:
    shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape) if keepdims or k not in axes)
    return constant(x.trace, np.full(shape, fill, dtype=bool))


def _shape_arg(shape) -> tuple:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(shape)


def reshape(a, shape, order="C", *more):
    if find_trace((a,)) is None:
        return np.reshape(a, shape, order=order)
    if order != "C":
        raise unsupported("reshape", f"order={order!r} (only 'C')")
    shape = _shape_arg(shape)
    if any(isinstance(d, Tracer) for d in shape):
        raise shape_error("numpy.reshape", "the new shape must be static Python ints (use "
                                           "x.shape, or make the argument static)")
    unknown = [k for k, d in enumerate(shape) if d == -1]
    known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
    if len(unknown) > 1 or any(d < -1 for d in shape):
        raise shape_error("numpy.reshape", f"cannot reshape {list(a.shape)} into {list(shape)}")
    if unknown:
        if known == 0 or a.size % known:
            raise shape_error("numpy.reshape", f"cannot reshape array of shape "
                                               f"{list(a.shape)} into shape {list(shape)}")
        shape = shape[:unknown[0]] + (a.size // known,) + shape[unknown[0] + 1:]
    if int(np.prod(shape, dtype=np.int64)) != a.size:
        raise shape_error("numpy.reshape", f"cannot reshape array of shape {list(a.shape)} "
                                           f"(size {a.size}) into shape {list(shape)}")
    shape = tuple(int(d) for d in shape)
    if shape == a.shape:
        return a
    return wrap(a.trace, a.trace.emit("reshape", [a.value], {"shape": shape}), a.weak)


def transpose(a, axes=None):
    if find_trace((a,)) is None:
        return np.transpose(a, axes)
    rank = a.ndim
    perm = tuple(range(rank))[::-1] if axes is None else tuple(
        _norm_axis("numpy.transpose", k, rank) for k in axes)
    if sorted(perm) != list(range(rank)):
        raise shape_error("numpy.transpose", f"axes {axes} are not a permutation of the "
                                             f"{rank} axes of shape {list(a.shape)}")
    if perm == tuple(range(rank)):
        return a
    return wrap(a.trace, a.trace.emit("transpose", [a.value], {"perm": perm}))


def swapaxes(a, axis1, axis2):
    if find_trace((a,)) is None:
        return np.swapaxes(a, axis1, axis2)
    perm = list(range(a.ndim))
    i, j = (_norm_axis("numpy.swapaxes", k, a.ndim) for k in (axis1, axis2))
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


def moveaxis(a, source, destination):
    if find_trace((a,)) is None:
        return np.moveaxis(a, source, destination)
    src = [_norm_axis("numpy.moveaxis", k, a.ndim) for k in np.atleast_1d(source).tolist()]
    dst = [_norm_axis("numpy.moveaxis", k, a.ndim) for k in np.atleast_1d(destination).tolist()]
    order = [k for k in range(a.ndim) if k not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def expand_dims(a, axis):
    if find_trace((a,)) is None:
        return np.expand_dims(a, axis)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    rank = a.ndim + len(axes)
    pos = sorted(_norm_axis("numpy.expand_dims", k, rank) for k in axes)
    shape = list(a.shape)
    for p in pos:
        shape.insert(p, 1)
    return reshape(a, tuple(shape))


def squeeze(a, axis=None):
    if find_trace((a,)) is None:
        return np.squeeze(a, axis)
    if axis is None:
        axes = [k for k, d in enumerate(a.shape) if d == 1]
    else:
        axes = [_norm_axis("numpy.squeeze", k, a.ndim)
                for k in (axis if isinstance(axis, (tuple, list)) else (axis,))]
        bad = [k for k in axes if a.shape[k] != 1]
        if bad:
            raise shape_error("numpy.squeeze", f"cannot select axis {bad[0]} of shape "
                                               f"{list(a.shape)}: its size is not 1")
    return reshape(a, tuple(d for k, d in enumerate(a.shape) if k not in axes))


def ravel(a, order="C"):
    return reshape(a, (-1,), order)


def broadcast_to(array, shape):
    trace = find_trace((array,))
    if trace is None:
        return np.broadcast_to(array, shape)
    shape = _shape_arg(shape)
    try:
        out = np.broadcast_shapes(array.shape, shape)
    except ValueError:
        out = None
    if out != shape:
        raise shape_error("numpy.broadcast_to", f"cannot broadcast shape {list(array.shape)} "
                                                f"to {list(shape)}")
    if shape == array.shape:
        return array
    return wrap(trace, trace.emit("broadcast_to", [array.value], {"shape": shape}))


def concatenate(arrays, axis=0, dtype=None):
    arrays = list(arrays)
    trace = find_trace(arrays)
    if trace is None:
        return np.concatenate(arrays, axis=axis, dtype=dtype)
    if axis is None:
        arrays, axis = [ravel(a) if isinstance(a, Tracer) else np.ravel(a) for a in arrays], 0
    dtype = np.dtype(dtype) if dtype is not None else result_type(*arrays)
    shapes = [a.shape if isinstance(a, Tracer) else np.shape(a) for a in arrays]
    rank = len(shapes[0])
    if rank == 0 or any(len(s) != rank for s in shapes):
        raise shape_error("numpy.concatenate", "operands must have the same rank >= 1, got "
                                               "shapes " + ", ".join(str(list(s)) for s in shapes))
    ax = _norm_axis("numpy.concatenate", axis, rank)
    for s in shapes[1:]:
        if any(d != e for k, (d, e) in enumerate(zip(s, shapes[0])) if k != ax):
            raise shape_error("numpy.concatenate",
                              f"shapes {list(shapes[0])} and {list(s)} differ outside the "
                              f"concatenation axis {ax}")
    values = [value(trace, a, dtype) for a in arrays]
    if len(values) == 1:
        return wrap(trace, values[0])
    return wrap(trace, trace.emit("concat", values, {"axis": ax}))


def stack(arrays, axis=0):
    arrays = list(arrays)
    if find_trace(arrays) is None:
        return np.stack(arrays, axis)
    shapes = {tuple(np.shape(a)) if not isinstance(a, Tracer) else a.shape for a in arrays}
    if len(shapes) != 1:
        raise shape_error("numpy.stack", "all input arrays must have the same shape, got "
                                         + ", ".join(str(list(s)) for s in shapes))
    rank = len(next(iter(shapes))) + 1
    ax = _norm_axis("numpy.stack", axis, rank)
    trace = find_trace(arrays)
    return concatenate([expand_dims(a if isinstance(a, Tracer) else constant(trace, a), ax)
                        for a in arrays], axis=ax)


# -- indexing ----------------------------------------------------------------------------------

def _is_index_array(k) -> bool:
    if isinstance(k, Tracer):
        return True
    return isinstance(k, (list, np.ndarray)) and not isinstance(k, bool)


def getitem(x: Tracer, key):
    """Basic indexing (ints, slices with any step, None, Ellipsis) and one integer-array
    index (a gather, like numpy.take); boolean masks are not supported (the result's size
    depends on the data)."""
    key = key if isinstance(key, tuple) else (key,)
    for k in key:
        if isinstance(k, Tracer) and k.dtype == np.bool_ or (
                isinstance(k, (list, np.ndarray)) and np.asarray(k).dtype == np.bool_):
            raise unsupported("ndarray.__getitem__", "a boolean mask: the result's size "
                                                     "depends on the data; use knp.where")
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise shape_error("indexing", "an index can only have a single ellipsis ('...')")
    if consumed > x.ndim:
        raise shape_error("indexing", f"too many indices ({consumed}) for an array of shape "
                                      f"{list(x.shape)}")
    at = next((i for i, k in enumerate(key) if k is Ellipsis), len(key))
    key = key[:at] + (slice(None),) * (x.ndim - consumed) + key[at + 1:]
    arrays = [i for i, k in enumerate(key) if _is_index_array(k)]
    if len(arrays) > 1 or (arrays and any(isinstance(k, (int, np.integer)) for k in key)):
        raise unsupported("ndarray.__getitem__", "several integer-array indices, or integer "
                                                 "arrays mixed with integers (index one at a time)")
    starts, ends, steps, out_shape, axis, gather_at = [], [], [], [], 0, None
    for k in key:
        if k is None:
            out_shape.append(1)
            continue
        n = x.shape[axis]
        if isinstance(k, slice):
            if any(isinstance(p, Tracer) for p in (k.start, k.stop, k.step)):
                raise shape_error("indexing", "slice bounds must be static Python ints")
            b, e, s = k.indices(n)
            starts.append(b), ends.append(e), steps.append(s)
            out_shape.append(len(range(b, e, s)))
        elif _is_index_array(k):
            starts.append(0), ends.append(n), steps.append(1)
            gather_at = len(out_shape)
            out_shape.append(None)
        elif isinstance(k, (int, np.integer)):
            if not -n <= k < n:
                raise shape_error("indexing", f"index {k} is out of bounds for axis {axis} "
                                              f"with size {n} (shape {list(x.shape)})")
            k = int(k) % n
            starts.append(k), ends.append(k + 1), steps.append(1)
        else:
            raise unsupported("ndarray.__getitem__", f"an index of type {type(k).__name__}")
        axis += 1
    trace, v = x.trace, x.value
    if (tuple(starts), tuple(ends), tuple(steps)) != ((0,) * x.ndim, x.shape, (1,) * x.ndim):
        # the frontend's normal form: a negative end (a reversed slice through index 0) is -1
        ends = [e if e >= 0 else -1 for e in ends]
        v = trace.emit("slice", [v], {"starts": tuple(starts), "ends": tuple(ends),
                                      "steps": tuple(steps)})
    if gather_at is None:
        return reshape(wrap(trace, v), tuple(out_shape))
    # the array index: gather along its axis of the sliced value (ints and None are
    # dropped/added around it by the final reshape)
    at = arrays[0]
    ax = sum(1 for k in key[:at] if k is not None)
    idx = key[at]
    if not isinstance(idx, Tracer):
        idx = np.asarray(idx)
        if idx.dtype.kind not in "iu":
            raise unsupported("ndarray.__getitem__", f"an index array of dtype {idx.dtype}")
        n = v.shape[ax]
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise shape_error("indexing", f"index array {idx.tolist()} is out of bounds for "
                                          f"axis {ax} with size {n}")
        idx = np.where(idx < 0, idx + n, idx).astype(np.int64)
    elif idx.dtype.kind not in "iu":
        raise unsupported("ndarray.__getitem__", f"an index array of dtype {idx.dtype}")
    iv = value(trace, idx, np.dtype(np.int64))
    g = trace.emit("gather", [v, iv], {"axis": ax})
    shape = out_shape[:gather_at] + list(iv.shape) + out_shape[gather_at + 1:]
    return reshape(wrap(trace, g), tuple(shape))


def take(a, indices, axis=None):
    if find_trace((a, indices)) is None:
        return np.take(a, indices, axis=axis)
    if axis is None:
        a, axis = ravel(a), 0
    ax = _norm_axis("numpy.take", axis, a.ndim)
    return getitem(a, (slice(None),) * ax + (indices,))
