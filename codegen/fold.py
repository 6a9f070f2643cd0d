"""Constant folding of scalar integer operations at emission time.

llvmlite's IRBuilder, unlike LLVM's C++ one, folds nothing: an unrolled loop binds its variable
to a constant, and every index term, comparison and select chain over it became an
instruction that LLVM's passes then had to fold (a Winograd F(4x4) input transform emitted
all 36 branches of its select chain in each of its 36 unrolled points: 33k lines of IR).
These helpers fold operations whose operands are constants (and the identities x + 0, x * 1, x * 0), with LLVM's semantics (two's
complement wrap-around at the type's width; floor division as the loop IR defines it), so
the emitted IR is what LLVM would have folded it to.
"""
from __future__ import annotations

import llvmlite.ir as ir


def int_value(v: ir.Value, unsigned: bool = False) -> int | None:
    """The value of a scalar integer constant (signed unless `unsigned`), else None."""
    if not isinstance(v, ir.Constant) or not isinstance(v.type, ir.IntType):
        return None
    c = v.constant
    if not isinstance(c, int):
        return None
    width = v.type.width
    c &= (1 << width) - 1
    if width == 1:
        return c
    if not unsigned and c >= 1 << (width - 1):
        c -= 1 << width
    return c


def int_const(ty: ir.IntType, value: int) -> ir.Constant:
    """A constant of integer type `ty` holding `value` wrapped to its width (signed form)."""
    width = ty.width
    value &= (1 << width) - 1
    if width > 1 and value >= 1 << (width - 1):
        value -= 1 << width
    return ir.Constant(ty, value)


def bool_const(value: bool) -> ir.Constant:
    return ir.Constant(ir.IntType(1), int(bool(value)))


_ARITH = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b}


def fold_arith(op: str, a: ir.Value, b: ir.Value) -> ir.Value | None:
    """`op` ("add", "sub", "mul") of scalar ints when it folds: both constant, or an identity
    (x + 0, 0 + x, x - 0, x * 1, 1 * x, x * 0, 0 * x); else None."""
    ca, cb = int_value(a), int_value(b)
    if ca is not None and cb is not None:
        return int_const(a.type, _ARITH[op](ca, cb))
    if op == "add":
        return b if ca == 0 else a if cb == 0 else None
    if op == "sub":
        return a if cb == 0 else None
    if ca == 0 or cb == 0:
        return int_const(a.type, 0)
    return b if ca == 1 else a if cb == 1 else None


def fold_divmod(a: ir.Value, b: ir.Value, want_div: bool, unsigned: bool) -> ir.Value | None:
    """Floor division / modulo (the sign of the divisor) of two constants; None otherwise
    (and for a zero divisor, which stays an instruction)."""
    ca, cb = int_value(a, unsigned), int_value(b, unsigned)
    if ca is None or cb is None or cb == 0:
        return None
    return int_const(a.type, ca // cb if want_div else ca % cb)


_COMPARE = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b,
            "!=": lambda a, b: a != b}


def fold_compare(op: str, a: ir.Value, b: ir.Value, unsigned: bool) -> ir.Value | None:
    ca, cb = int_value(a, unsigned), int_value(b, unsigned)
    if ca is None or cb is None:
        return None
    return bool_const(_COMPARE[op](ca, cb))


def fold_minmax(a: ir.Value, b: ir.Value, pick_smaller: bool, unsigned: bool
                ) -> ir.Value | None:
    ca, cb = int_value(a, unsigned), int_value(b, unsigned)
    if ca is None or cb is None:
        return None
    return a if (ca < cb) == pick_smaller else b
