"""Layout and indexing operators: reshape, transpose, slicing, gathers, concatenation, pad.

Each is one injective compute stage; reads are kept in bounds (clamped inside selects), so the
schedule may inline them anywhere.
"""
from __future__ import annotations

import builtins
import math

from .. import dtype as dt
from .. import expr as E
from ..errors import TEError
from ..tensor import Tensor, compute
from ._common import check_tensor, clamp, normalize_axes, normalize_axis
from .tags import INJECTIVE, PAD

PAD_MODES = ("constant", "edge", "reflect")


def pad(x: Tensor, pad_before, pad_after=None, value=0.0, mode: str = "constant",
        name: str | None = None) -> Tensor:
    """Pad every dimension (`pad_before[d]`/`pad_after[d]` elements; negative crops).

    mode "constant" fills with `value` (a number, or a 0-d tensor of x's dtype read at run
    time), "edge" repeats the border, "reflect" mirrors without repeating the border (numpy's
    modes of the same names).
    """
    check_tensor("pad", x)
    before = _pad_list("pad_before", pad_before, x)
    after = before if pad_after is None else _pad_list("pad_after", pad_after, x)
    if mode not in PAD_MODES:
        raise TEError(f"pad(): unknown mode {mode!r}; use one of {', '.join(PAD_MODES)}")
    shape = tuple(n + b + a for n, b, a in zip(x.shape, before, after))
    if any(s < 0 for s in shape):
        raise TEError(f"pad(): pads {before}/{after} crop tensor '{x.name}'{list(x.shape)} "
                      "below zero size")
    if mode == "reflect" and any(b >= n or a >= n for n, b, a in zip(x.shape, before, after)):
        raise TEError(f"pad(): reflect padding of '{x.name}'{list(x.shape)} needs every pad "
                      f"smaller than its dimension, got before={before}, after={after}")
    fill = None
    if mode == "constant" and isinstance(value, Tensor):
        if value.shape != () or value.dtype != x.dtype:
            raise TEError(f"pad(): a tensor fill value must be 0-d {x.dtype}, got "
                          f"'{value.name}' {value.dtype}{list(value.shape)}")
        fill = value()
    elif mode == "constant":
        fill = E.const(value, x.dtype)

    def body(*idx):
        src = [i - b if b else i for i, b in zip(idx, before)]
        if mode == "edge":
            return x(*[clamp(s, n) if (b > 0 or a > 0) else s
                       for s, n, b, a in zip(src, x.shape, before, after)])
        if mode == "reflect":
            return x(*[_reflect(s, n) if (b > 0 or a > 0) else s
                       for s, n, b, a in zip(src, x.shape, before, after)])
        conds, reads = [], []
        for s, n, b, a in zip(src, x.shape, before, after):
            if b > 0:
                conds.append(s >= 0)
            if a > 0:
                conds.append(s < n)
            reads.append(clamp(s, n) if (b > 0 or a > 0) else s)
        if not conds:
            return x(*reads)
        return E.select(E.all_of(*conds), x(*reads), fill)

    return compute(shape, body, name=name or "pad", tag=PAD)


def _reflect(s: E.Expr, n: int) -> E.Expr:
    # n-1 - |n-1 - |s||  mirrors s into [0, n) when -n < s < 2n - 1
    return (n - 1) - E.abs((n - 1) - E.abs(s))


def _pad_list(what: str, pads, x: Tensor) -> tuple[int, ...]:
    items = tuple(pads)
    if len(items) != x.ndim or not all(isinstance(p, int) for p in items):
        raise TEError(f"pad(): {what} must list one int per dimension of '{x.name}' "
                      f"({x.ndim} dimensions), got {pads!r}")
    return items


def reshape(x: Tensor, newshape, name: str | None = None, direct_units: bool = True) -> Tensor:
    """Same elements in row-major order with a new shape; one entry may be -1.
    `direct_units=False` keeps the flat-index form for 8-bit tensors too (an A/B of it:
    benchmarks/int8_cnn_ab.py)."""
    check_tensor("reshape", x)
    shape = _infer_shape(x, tuple(int(s) for s in newshape))
    out_strides = _strides(shape)
    in_strides = _strides(x.shape)
    kept_in = [d for d, e in enumerate(x.shape) if e != 1]
    kept_out = [d for d, e in enumerate(shape) if e != 1]
    if direct_units and x.dtype in ("uint8", "int8") and \
            [x.shape[d] for d in kept_in] == [shape[d] for d in kept_out]:
        # only unit dims added or dropped (a [1, H, W, C] activation viewed [1, 1, H, W, C]
        # for a blocked pool): read each kept dim by its own index; the flat-index form
        # left floordiv/floormod by the row sizes that a fused, vectorised concat then
        # evaluated per lane (SqueezeNet's pre-pool concat 0.11 ms, 0.003 ms so). For
        # 8-bit tensors only: the body is part of the workload key, and float tasks carry
        # the shipped tuning records (ResNet-18 lost 3 of 26 with it for every dtype); the
        # shipped database holds no int8 records.
        where = dict(zip(kept_in, kept_out))

        def direct(*idx):
            return x(*[idx[where[d]] if d in where else 0 for d in range(len(x.shape))])

        return compute(shape, direct, name=name or "reshape", tag=INJECTIVE)

    def body(*idx):
        flat = E.const(0)
        for i, stride, extent in zip(idx, out_strides, shape):
            if extent != 1:
                flat = flat + (i * stride if stride != 1 else i)
        reads = []
        for d, (stride, extent) in enumerate(zip(in_strides, x.shape)):
            if extent == 1:
                reads.append(0)
                continue
            value = flat // stride if stride != 1 else flat
            reads.append(value % extent if d > 0 else value)
        return x(*reads)

    return compute(shape, body, name=name or "reshape", tag=INJECTIVE)


def _infer_shape(x: Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    size = math.prod(x.shape)
    unknown = [d for d, s in enumerate(shape) if s == -1]
    if len(unknown) > 1 or any(s < -1 for s in shape):
        raise TEError(f"reshape(): new shape {list(shape)} may contain at most one -1 and no "
                      "other negative extents")
    if unknown:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or size % known:
            raise TEError(f"reshape(): cannot infer -1 in {list(shape)} for '{x.name}' "
                          f"{list(x.shape)} ({size} elements)")
        shape = tuple(size // known if s == -1 else s for s in shape)
    if math.prod(shape) != size:
        raise TEError(f"reshape(): tensor '{x.name}'{list(x.shape)} has {size} elements, "
                      f"the new shape {list(shape)} has {math.prod(shape)}")
    return shape


def _strides(shape) -> list[int]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return strides[::-1]


def flatten(x: Tensor, axis: int = 1, name: str | None = None) -> Tensor:
    """ONNX Flatten: [prod(shape[:axis]), prod(shape[axis:])]."""
    check_tensor("flatten", x)
    if not -x.ndim <= axis <= x.ndim:
        raise TEError(f"flatten(): axis {axis} out of range for '{x.name}' with {x.ndim} "
                      f"dimensions; use an axis in [{-x.ndim}, {x.ndim}]")
    axis = axis + x.ndim if axis < 0 else axis
    return reshape(x, (math.prod(x.shape[:axis]), math.prod(x.shape[axis:])),
                   name=name or "flatten")


def transpose(x: Tensor, axes=None, name: str | None = None) -> Tensor:
    """Permute dimensions: out.shape[d] = x.shape[axes[d]] (reverse them when axes is None)."""
    check_tensor("transpose", x)
    axes = tuple(range(x.ndim))[::-1] if axes is None else tuple(
        normalize_axis("transpose", x.name, a, x.ndim) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise TEError(f"transpose(): axes {list(axes)} are not a permutation of the "
                      f"{x.ndim} dimensions of '{x.name}'")
    shape = tuple(x.shape[a] for a in axes)

    def body(*idx):
        reads = [None] * x.ndim
        for d, a in enumerate(axes):
            reads[a] = idx[d]
        return x(*reads)

    return compute(shape, body, name=name or "transpose", tag=INJECTIVE)


def squeeze(x: Tensor, axis=None, name: str | None = None) -> Tensor:
    """Drop size-1 dimensions (all of them, or the given ones, which must have size 1)."""
    check_tensor("squeeze", x)
    if axis is None:
        axes = tuple(d for d, e in enumerate(x.shape) if e == 1)
    else:
        axes = normalize_axes("squeeze", x.name, axis, x.ndim)
        wrong = [d for d in axes if x.shape[d] != 1]
        if wrong:
            raise TEError(f"squeeze(): axes {wrong} of '{x.name}'{list(x.shape)} do not have "
                          "size 1")
    kept = [d for d in range(x.ndim) if d not in axes]

    def body(*idx):
        reads = [0] * x.ndim
        for i, d in zip(idx, kept):
            reads[d] = i
        return x(*reads)

    return compute(tuple(x.shape[d] for d in kept), body, name=name or "squeeze",
                   tag=INJECTIVE)


def expand_dims(x: Tensor, axis: int, num_newaxis: int = 1, name: str | None = None) -> Tensor:
    """Insert `num_newaxis` size-1 dimensions at `axis` (in [-ndim-1, ndim])."""
    check_tensor("expand_dims", x)
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise TEError(f"expand_dims(): axis {axis} out of range for '{x.name}' with {x.ndim} "
                      f"dimensions; use an axis in [{-x.ndim - 1}, {x.ndim}]")
    axis = axis + x.ndim + 1 if axis < 0 else axis
    shape = x.shape[:axis] + (1,) * num_newaxis + x.shape[axis:]
    return compute(shape, lambda *i: x(*(i[:axis] + i[axis + num_newaxis:])),
                   name=name or "expand_dims", tag=INJECTIVE)


def concatenate(tensors, axis: int = 0, name: str | None = None) -> Tensor:
    """Join tensors along `axis`; the others must have equal shapes and one dtype."""
    tensors = [check_tensor("concatenate", t) for t in tensors]
    if not tensors:
        raise TEError("concatenate(): needs at least one tensor")
    first = tensors[0]
    axis = normalize_axis("concatenate", first.name, axis, first.ndim)
    for t in tensors[1:]:
        same = t.ndim == first.ndim and all(
            a == b for d, (a, b) in enumerate(zip(t.shape, first.shape)) if d != axis)
        if not same or t.dtype != first.dtype:
            raise TEError(f"concatenate(): '{t.name}' {t.dtype}{list(t.shape)} does not match "
                          f"'{first.name}' {first.dtype}{list(first.shape)} outside axis {axis}")
    offsets = [0]
    for t in tensors:
        offsets.append(offsets[-1] + t.shape[axis])
    shape = first.shape[:axis] + (offsets[-1],) + first.shape[axis + 1:]

    def read(t: Tensor, idx, start: int):
        local = idx[axis] - start if start else idx[axis]
        return t(*(idx[:axis] + (clamp(local, t.shape[axis]),) + idx[axis + 1:]))

    def body(*idx):
        value = read(tensors[-1], idx, offsets[-2])
        for t, start, end in reversed(list(zip(tensors[:-1], offsets[:-2], offsets[1:-1]))):
            value = E.select(idx[axis] < end, read(t, idx, start), value)
        return value

    live = [t for t in tensors if t.shape[axis] > 0] or tensors
    if len(live) != len(tensors):
        return concatenate(live, axis, name)
    return compute(shape, body, name=name or "concatenate", tag=INJECTIVE)


def strided_slice(x: Tensor, begin, end, strides=None, axes=None,
                  name: str | None = None) -> Tensor:
    """x[begin:end:stride] along `axes` (default: the leading axes), Python slice rules:
    negative bounds count from the end, out-of-range bounds clamp, negative steps walk back."""
    check_tensor("strided_slice", x)
    begin, end = list(begin), list(end)
    axes = list(range(len(begin))) if axes is None else [
        normalize_axis("strided_slice", x.name, a, x.ndim) for a in axes]
    strides = [1] * len(axes) if strides is None else list(strides)
    if not len(begin) == len(end) == len(strides) == len(axes):
        raise TEError(f"strided_slice(): begin {begin}, end {end}, strides {strides} and axes "
                      f"{axes} must have one entry per sliced axis")
    starts, steps = [0] * x.ndim, [1] * x.ndim
    shape = list(x.shape)
    for a, b, e, s in zip(axes, begin, end, strides):
        if s == 0:
            raise TEError(f"strided_slice(): stride 0 on axis {a} of '{x.name}'; use a "
                          "non-zero stride")
        start, stop, step = builtins.slice(b, e, s).indices(x.shape[a])
        starts[a], steps[a], shape[a] = start, step, len(range(start, stop, step))

    def body(*idx):
        return x(*[i * step + start if (start or step != 1) else i
                   for i, start, step in zip(idx, starts, steps)])

    return compute(tuple(shape), body, name=name or "strided_slice", tag=INJECTIVE)


def split(x: Tensor, indices_or_sections, axis: int = 0, name: str | None = None) -> list:
    """numpy.split: an int cuts into equal parts, a list gives the cut positions."""
    check_tensor("split", x)
    axis = normalize_axis("split", x.name, axis, x.ndim)
    extent = x.shape[axis]
    if isinstance(indices_or_sections, int):
        parts = indices_or_sections
        if parts <= 0 or extent % parts:
            raise TEError(f"split(): axis {axis} of '{x.name}'{list(x.shape)} ({extent}) "
                          f"cannot be cut into {parts} equal parts; pass the cut positions")
        cuts = [extent // parts * p for p in range(1, parts)]
    else:
        cuts = [int(c) for c in indices_or_sections]
    bounds = [0] + cuts + [extent]
    base = name or "split"
    return [strided_slice(x, [lo], [builtins.max(lo, hi)], [1], [axis], name=f"{base}_{p}")
            for p, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:]))]


def _wrap_index(value: E.Expr, extent: int) -> E.Expr:
    """A (possibly negative) gathered index made non-negative and kept in bounds."""
    value = E.cast(value, "int32")
    return clamp(E.select(value < 0, value + extent, value), extent)


def _check_indices(op_name: str, indices: Tensor) -> None:
    check_tensor(op_name, indices, "indices")
    if not dt.is_int(indices.dtype):
        raise TEError(f"{op_name}(): indices '{indices.name}' must be an integer tensor, got "
                      f"{indices.dtype}")


def take(x: Tensor, indices, axis: int | None = None, name: str | None = None) -> Tensor:
    """ONNX Gather / numpy.take: out = x[..., indices[...], ...] along `axis`; negative
    indices count from the end, out-of-range ones are clamped (compiled models raise for them:
    graph/index_checks.py). axis=None flattens x first."""
    check_tensor("take", x)
    if axis is None:
        x, axis = reshape(x, (-1,), name="take_flatten"), 0
    axis = normalize_axis("take", x.name, axis, x.ndim)
    extent = x.shape[axis]
    if isinstance(indices, int):
        position = indices + extent if indices < 0 else indices
        if not 0 <= position < extent:
            raise TEError(f"take(): index {indices} out of range for axis {axis} of "
                          f"'{x.name}'{list(x.shape)}")
        shape = x.shape[:axis] + x.shape[axis + 1:]
        return compute(shape, lambda *i: x(*(i[:axis] + (position,) + i[axis:])),
                       name=name or "take", tag=INJECTIVE)
    _check_indices("take", indices)
    shape = x.shape[:axis] + indices.shape + x.shape[axis + 1:]

    def body(*idx):
        inner = idx[axis:axis + indices.ndim]
        where = _wrap_index(indices(*inner), extent)
        return x(*(idx[:axis] + (where,) + idx[axis + indices.ndim:]))

    return compute(shape, body, name=name or "take", tag=INJECTIVE)


def gather(x: Tensor, indices: Tensor, axis: int = 0, name: str | None = None) -> Tensor:
    """ONNX GatherElements / torch.gather: out[p] = x[p with p[axis] = indices[p]]."""
    check_tensor("gather", x)
    _check_indices("gather", indices)
    axis = normalize_axis("gather", x.name, axis, x.ndim)
    if indices.ndim != x.ndim:
        raise TEError(f"gather(): indices '{indices.name}'{list(indices.shape)} must have the "
                      f"rank of '{x.name}'{list(x.shape)}")

    def body(*idx):
        where = _wrap_index(indices(*idx), x.shape[axis])
        reads = [where if d == axis else clamp(i, x.shape[d]) if indices.shape[d] > x.shape[d]
                 else i for d, i in enumerate(idx)]
        return x(*reads)

    return compute(indices.shape, body, name=name or "gather", tag=INJECTIVE)


def gather_nd(x: Tensor, indices: Tensor, name: str | None = None) -> Tensor:
    """ONNX GatherND (batch_dims=0): indices[..., k] picks x[i0, ..., ik-1, :]."""
    check_tensor("gather_nd", x)
    _check_indices("gather_nd", indices)
    if indices.ndim < 1 or not 1 <= indices.shape[-1] <= x.ndim:
        raise TEError(f"gather_nd(): the last dimension of indices '{indices.name}'"
                      f"{list(indices.shape)} must be in [1, {x.ndim}] (the rank of "
                      f"'{x.name}')")
    depth = indices.shape[-1]
    outer = indices.ndim - 1
    shape = indices.shape[:-1] + x.shape[depth:]

    def body(*idx):
        picks = [_wrap_index(indices(*(idx[:outer] + (j,))), x.shape[j]) for j in range(depth)]
        return x(*(tuple(picks) + idx[outer:]))

    return compute(shape, body, name=name or "gather_nd", tag=INJECTIVE)
