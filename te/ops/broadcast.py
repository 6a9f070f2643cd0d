"""Binary and ternary operators with numpy broadcasting; operands are Tensors or scalars."""
from __future__ import annotations

from .. import expr as E
from ..errors import TEError
from ..tensor import Tensor, compute
from ._common import broadcast_shape, check_tensor, is_scalar, read_broadcast, require_float
from .tags import BROADCAST, ELEMWISE


def _operands(op_name: str, *values) -> list[Tensor]:
    tensors = [v for v in values if isinstance(v, Tensor)]
    for v in values:
        if not isinstance(v, Tensor) and not is_scalar(v):
            raise TEError(f"{op_name}(): operands must be Tensors or Python scalars, got "
                          f"{type(v).__name__} {v!r}")
    if not tensors:
        raise TEError(f"{op_name}(): at least one operand must be a Tensor, got only scalars "
                      f"{values!r}; compute scalars in Python")
    return tensors


def _tag(shape, tensors) -> str:
    return ELEMWISE if all(t.shape == shape for t in tensors) else BROADCAST


def _broadcast_op(op_name: str, fn, *values, name: str | None = None) -> Tensor:
    tensors = _operands(op_name, *values)
    shape = broadcast_shape(op_name, *values)
    return compute(shape, lambda *i: fn(*[read_broadcast(v, i) for v in values]),
                   name=name or op_name, tag=_tag(shape, tensors))


def add(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("add", E.add, a, b, name=name)


def subtract(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("subtract", E.sub, a, b, name=name)


def multiply(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("multiply", E.mul, a, b, name=name)


def divide(a, b, name: str | None = None) -> Tensor:
    """True division on floats; floor division on integers (TVM semantics)."""
    return _broadcast_op("divide", E.div, a, b, name=name)


def floor_divide(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("floor_divide", E.floordiv, a, b, name=name)


def floor_mod(a, b, name: str | None = None) -> Tensor:
    """a - floor(a / b) * b: the result has the sign of b (numpy's np.mod)."""
    return _broadcast_op("floor_mod", E.floormod, a, b, name=name)


def power(a, b, name: str | None = None) -> Tensor:
    for t in _operands("power", a, b):
        require_float("power", t)
    return _broadcast_op("power", E.power, a, b, name=name)


def maximum(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("maximum", E.maximum, a, b, name=name)


def minimum(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("minimum", E.minimum, a, b, name=name)


def equal(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("equal", lambda x, y: E._compare(E.EQ, x, y), a, b, name=name)


def not_equal(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("not_equal", lambda x, y: E._compare(E.NE, x, y), a, b, name=name)


def less(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("less", lambda x, y: E._compare(E.LT, x, y), a, b, name=name)


def less_equal(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("less_equal", lambda x, y: E._compare(E.LE, x, y), a, b, name=name)


def greater(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("greater", lambda x, y: E._compare(E.LT, y, x), a, b, name=name)


def greater_equal(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("greater_equal", lambda x, y: E._compare(E.LE, y, x), a, b, name=name)


def logical_and(a, b, name: str | None = None) -> Tensor:
    """Elementwise and; non-bool operands count as true when non-zero."""
    return _broadcast_op("logical_and", E.logical_and, a, b, name=name)


def logical_or(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("logical_or", E.logical_or, a, b, name=name)


def logical_xor(a, b, name: str | None = None) -> Tensor:
    return _broadcast_op("logical_xor", lambda x, y: E.NE(
        "bool", E._to_bool(E._as_expr(x)), E._to_bool(E._as_expr(y))), a, b, name=name)


def logical_not(a: Tensor, name: str | None = None) -> Tensor:
    check_tensor("logical_not", a)
    return _broadcast_op("logical_not", E.logical_not, a, name=name)


def where(condition, x, y, name: str | None = None) -> Tensor:
    """condition ? x : y elementwise, all three broadcast together (numpy.where)."""
    return _broadcast_op("where", E.select, condition, x, y, name=name)


def broadcast_to(x: Tensor, shape, name: str | None = None) -> Tensor:
    """Repeat `x` along size-1 (or missing leading) dimensions to reach `shape`."""
    check_tensor("broadcast_to", x)
    shape = tuple(int(s) for s in shape)
    offset = len(shape) - x.ndim
    if offset < 0 or any(e not in (1, shape[offset + d]) for d, e in enumerate(x.shape)):
        raise TEError(f"broadcast_to(): tensor '{x.name}' of shape {list(x.shape)} cannot be "
                      f"broadcast to {list(shape)}; each dimension must match or be 1")
    return compute(shape, lambda *i: read_broadcast(x, i), name=name or "broadcast_to",
                   tag=BROADCAST)

