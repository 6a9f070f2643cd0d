"""Shared argument handling of the operator library: axes, broadcasting, dtype checks."""
from __future__ import annotations

from collections.abc import Sequence

from .. import dtype as dt
from ..errors import TEError
from ..expr import Expr, minimum, maximum
from ..tensor import Tensor


def check_tensor(op_name: str, value, what: str = "input") -> Tensor:
    if not isinstance(value, Tensor):
        raise TEError(f"{op_name}(): {what} must be a te Tensor, got {type(value).__name__} "
                      f"{value!r}; declare it with te.placeholder or compute it first")
    return value


def normalize_axis(op_name: str, tensor_name: str, axis: int, ndim: int) -> int:
    """A non-negative axis in [0, ndim); negative axes count from the end (numpy)."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TEError(f"{op_name}(): axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise TEError(f"{op_name}(): axis {axis} is out of range for tensor '{tensor_name}' "
                      f"with {ndim} dimensions; use an axis in [{-ndim}, {ndim})")
    return axis % ndim


def normalize_axes(op_name: str, tensor_name: str, axis, ndim: int) -> tuple[int, ...]:
    """Sorted unique axes; None means every axis."""
    if axis is None:
        return tuple(range(ndim))
    items = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(normalize_axis(op_name, tensor_name, a, ndim) for a in items)
    if len(set(axes)) != len(axes):
        raise TEError(f"{op_name}(): axes {items} of tensor '{tensor_name}' repeat an axis")
    return tuple(sorted(axes))


def broadcast_shape(op_name: str, *tensors) -> tuple[int, ...]:
    """numpy broadcasting of the shapes of `tensors` (anything with .shape and .name;
    scalars have shape ())."""
    shapes = [tuple(getattr(t, "shape", ())) for t in tensors]
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(ndim):
        extents = {s[d - ndim + len(s)] for s in shapes if d - ndim + len(s) >= 0}
        extents.discard(1)
        if len(extents) > 1:
            described = ", ".join(f"'{t.name}'{list(t.shape)}" for t in tensors
                                  if hasattr(t, "name"))
            raise TEError(f"{op_name}(): shapes cannot be broadcast together: {described}; "
                          "each dimension must match or be 1")
        out.append(extents.pop() if extents else 1)
    return tuple(out)


def broadcast_indices(tensor: Tensor, out_indices: Sequence[Expr]) -> tuple:
    """Indices into `tensor` for an output point of a broadcast (size-1 dims read 0)."""
    offset = len(out_indices) - tensor.ndim
    return tuple(0 if extent == 1 else out_indices[offset + d]
                 for d, extent in enumerate(tensor.shape))


def read_broadcast(value, out_indices: Sequence[Expr]):
    """A Tensor read at a broadcast output point, or a scalar unchanged."""
    if isinstance(value, Tensor):
        return value(*broadcast_indices(value, out_indices))
    return value


def require_float(op_name: str, tensor: Tensor) -> None:
    if not dt.is_float(tensor.dtype):
        raise TEError(f"{op_name}(): tensor '{tensor.name}' has dtype {tensor.dtype} but "
                      f"{op_name} needs a float dtype; cast it first with ops.cast(x, "
                      "'float32')")


def int_tuple(op_name: str, what: str, value, length: int) -> tuple[int, ...]:
    """An int broadcast to `length` ints, or a sequence of exactly `length` ints."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * length
    items = tuple(value)
    if len(items) != length or not all(isinstance(v, int) for v in items):
        raise TEError(f"{op_name}(): {what} must be an int or {length} ints, got {value!r}")
    return items


def clamp(index: Expr, extent: int) -> Expr:
    """min(max(index, 0), extent - 1): keeps a read in bounds inside a select's dead branch."""
    return minimum(maximum(index, 0), extent - 1)


def is_scalar(value) -> bool:
    return isinstance(value, (int, float, bool)) or (
        hasattr(value, "item") and getattr(value, "ndim", 1) == 0 and not isinstance(value, Expr))


def padding4(op_name: str, padding) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from an int, a (vertical, horizontal) pair or a 4-tuple."""
    if isinstance(padding, int) and not isinstance(padding, bool):
        return (padding,) * 4
    items = tuple(padding)
    if not all(isinstance(p, int) and p >= 0 for p in items) or len(items) not in (2, 4):
        raise TEError(f"{op_name}(): padding must be an int, (vertical, horizontal) or (top, "
                      f"left, bottom, right) of non-negative ints, got {padding!r}")
    return items * 2 if len(items) == 2 else items


def shrink(shape, axes, keepdims: bool) -> tuple[int, ...]:
    """The shape after reducing `axes` (kept as size 1 with keepdims)."""
    return tuple(1 if d in axes else e for d, e in enumerate(shape)
                 if keepdims or d not in axes)
