"""Scalar expression nodes, shared by tensor expressions and the loop IR.

Nodes are frozen, slotted dataclasses with structural equality and a cached hash, so they
work as dict keys in memo tables. Arithmetic operators build nodes; `==` stays structural.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, fields

from . import dtype as dt
from .errors import TEError
from .uids import UidCounter


def ir_node(cls):
    """Frozen, slotted dataclass: structural ==, hash computed once and cached."""
    cls = dataclass(frozen=True, slots=True, eq=True)(cls)
    compared = tuple(f.name for f in fields(cls) if f.compare)

    def __hash__(self):
        cached = self._hash
        if cached is None:
            cached = hash((type(self).__name__,) + tuple(getattr(self, n) for n in compared))
            object.__setattr__(self, "_hash", cached)
        return cached

    cls.__hash__ = __hash__
    return cls


_NO_TRUTH = ("a Kiln expression has no truth value; use te.all_of()/te.any_of() or te.select(), "
             "and .eq()/.ne() to build comparisons")


@ir_node
class Expr:
    """Base of scalar expressions; `dtype` is a canonical name from te.dtype."""

    dtype: str
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __bool__(self):
        raise TypeError(_NO_TRUTH)

    # arithmetic builds nodes (through the validating builders below)
    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return sub(self, o)
    def __rsub__(self, o): return sub(o, self)
    def __mul__(self, o): return mul(self, o)
    def __rmul__(self, o): return mul(o, self)
    def __truediv__(self, o): return div(self, o)
    def __rtruediv__(self, o): return div(o, self)
    def __floordiv__(self, o): return floordiv(self, o)
    def __rfloordiv__(self, o): return floordiv(o, self)
    def __mod__(self, o): return floormod(self, o)
    def __rmod__(self, o): return floormod(o, self)
    def __neg__(self): return sub(const(0, self.dtype), self)
    def __lt__(self, o): return _compare(LT, self, o)
    def __le__(self, o): return _compare(LE, self, o)
    def __gt__(self, o): return _compare(LT, o, self)
    def __ge__(self, o): return _compare(LE, o, self)
    def __and__(self, o): return logical_and(self, o)
    def __or__(self, o): return logical_or(self, o)
    def __invert__(self): return logical_not(self)

    def eq(self, o) -> Expr:
        return _compare(EQ, self, o)

    def ne(self, o) -> Expr:
        return _compare(NE, self, o)

    def astype(self, dtype) -> Expr:
        return cast(self, dtype)

    def __str__(self):
        from .printer import expr_str
        return expr_str(self)


@ir_node
class IntImm(Expr):
    """An integer (or bool) constant."""

    value: int

    def __post_init__(self):
        if not (dt.is_int(self.dtype) or dt.is_bool(self.dtype)):
            raise TEError(f"IntImm needs an integer dtype, got {self.dtype}")


@ir_node
class FloatImm(Expr):
    """A floating-point constant (may be inf or -inf, used as reduction identities)."""

    value: float


_uids = UidCounter()


@ir_node
class Var(Expr):
    """A variable; identity is the uid, the name is only a printing hint."""

    name: str = "v"
    uid: int = field(default_factory=lambda: next(_uids))


@ir_node
class BinaryOp(Expr):
    a: Expr
    b: Expr

    def __post_init__(self):
        if self.a.dtype != self.b.dtype:
            raise TEError(f"{type(self).__name__} operands differ in dtype: "
                          f"{self.a.dtype} vs {self.b.dtype}; cast one with te.cast()")


@ir_node
class Add(BinaryOp):
    """a + b; integer overflow wraps."""


@ir_node
class Sub(BinaryOp):
    """a - b."""


@ir_node
class Mul(BinaryOp):
    """a * b."""


@ir_node
class Div(BinaryOp):
    """Floating-point division a / b (IEEE semantics)."""


@ir_node
class FloorDiv(BinaryOp):
    """Integer division rounding toward negative infinity; the divisor must be non-zero."""


@ir_node
class FloorMod(BinaryOp):
    """a - floordiv(a, b) * b: has the sign of b; the divisor must be non-zero."""


@ir_node
class Min(BinaryOp):
    """The smaller of a and b."""


@ir_node
class Max(BinaryOp):
    """The larger of a and b."""


@ir_node
class CmpOp(Expr):
    """A comparison of two operands of one dtype; the result is bool."""

    a: Expr
    b: Expr


@ir_node
class LT(CmpOp):
    pass


@ir_node
class LE(CmpOp):
    pass


@ir_node
class EQ(CmpOp):
    pass


@ir_node
class NE(CmpOp):
    pass


@ir_node
class And(BinaryOp):
    """Logical and of two bools (both sides are evaluated)."""


@ir_node
class Or(BinaryOp):
    """Logical or of two bools (both sides are evaluated)."""


@ir_node
class Not(Expr):
    a: Expr


@ir_node
class Select(Expr):
    """cond ? t : f. Both branches are evaluated, so neither may read out of bounds."""

    cond: Expr
    t: Expr
    f: Expr


@ir_node
class Cast(Expr):
    """Convert `value` to `dtype`; float -> int truncates toward zero."""

    value: Expr


# bitwise ops on integers (two's complement; shr is logical on unsigned, arithmetic on signed;
# a shift by the bit width or more gives 0, as numpy's does for unsigned operands)
INT_INTRINSICS = ("bit_and", "bit_or", "bit_xor", "bit_not", "shl", "shr")


@ir_node
class Call(Expr):
    """A pure math intrinsic by name (see INTRINSICS); arguments share the result dtype."""

    name: str
    args: tuple[Expr, ...]


INTRINSICS = ("exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "pow", "abs", "floor",
              "ceil", "round", "sin", "cos", "log1p", "expm1", "tan", "asin", "acos", "atan",
              "sinh", "cosh", "asinh", "acosh", "atanh", "fmod", "dot4_u8s8",
              "dot4_u8s7", "dot4_u8s8sym", "dot4_u8s16", "dot2_s16", "dot2_s16s8",
              "dot4_u8s8perm", "lookup8") + INT_INTRINSICS
# Integer dot products over int32 words of 4 packed bytes (byte t = bits 8t..8t+7):
# dot4_u8s8(a, b) = sum_t uint8(a_t) * int8(b_t), exact in int32 (|result| <= 130560).
# dot4_u8s7 has the same value but promises every b_t lies in [-64, 63], so a lowering may
# use an instruction whose 16-bit pair sums would saturate otherwise (AVX2 vpmaddubsw).
# dot4_u8s8sym promises every b_t lies in [-127, 127] (symmetric int8 weights, what
# onnxruntime's quantizer makes), so -b_t is an int8 too (AVX2: a sign trick, codegen/dot4.py).
# dot4_u8s16(a, b_even, b_odd) = the same sum over the 4 bytes of the word a (uint8) with the
# weights given widened to int16 pairs: b_even holds (b_0, b_2), b_odd (b_1, b_3) (low half
# first, any int16 values): a_0 b_0 + a_2 b_2 + a_1 b_1 + a_3 b_3, exact in int32 (two
# vpmaddwd on AVX2, no saturation; codegen/dot4.py).
# dot2_s16(a, b) = a_0 b_0 + a_1 b_1 over the int16 halves of the words a and b (low half
# first): one vpmaddwd lane. The int8 GEMMs take it with activations widened to int16 pairs
# ahead of the GEMM (graph/passes/int8/pairs.py: zero-extended uint8, so exact), which leaves
# the inner loop no byte split at all. (It wraps only for a = b = (-32768, -32768), as
# vpmaddwd does.)
# dot2_s16s8(a, b) = the same with b an int16 holding two int8 (low byte first), sign-extended
# to the pair: the weight stays int8 in memory (half dot2_s16's weight bytes: a GEMM with few
# rows streams its weight) and AVX2 widens it with one vpmovsxbw per weight vector.
# dot4_u8s8perm(a0, a1, a2, a3, sel, b) = sum_t uint8(s_t) * int8(b_t), where sel_t is byte t
# of sel and s_t is byte (sel_t & 15) of the 16 bytes a0 | a1 | a2 | a3 (a0's low byte first),
# or 0 when sel_t >= 128 (vpshufb's rule): a dot4 of 4 bytes picked from 4 activation words. It promises each pair of
# b, (b_0, b_1) and (b_2, b_3), is "pair-safe": 255 * (the sum of its positive bytes) <= 32767
# and 255 * (the sum of its negative bytes) >= -32768, so AVX2's saturating vpmaddubsw is
# exact for any uint8 activations (graph/passes/int8/perm.py picks the bytes so that it holds;
# codegen/dot4.py: a vpshufb of the group, then vpmaddubsw + vpmaddwd).
DOT4_INTRINSICS = ("dot4_u8s8", "dot4_u8s7", "dot4_u8s8sym", "dot4_u8s16", "dot2_s16",
                   "dot2_s16s8", "dot4_u8s8perm")
# the dtypes of intrinsics whose arguments are not all int32 words
DOT4_DTYPES = {"dot2_s16s8": ("int32", "int16")}
DOT4_ARITY = {"dot4_u8s16": 3, "dot4_u8s8perm": 6}


class IterKind(enum.Enum):
    SPATIAL = "spatial"
    REDUCE = "reduce"


@ir_node
class IterVar:
    """An axis of a compute: a variable ranging over [0, extent)."""

    var: Var
    extent: int
    kind: IterKind = IterKind.SPATIAL
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.var.name

    def __str__(self):
        return self.var.name

    # arithmetic on an axis means arithmetic on its variable (as in TVM)
    def __add__(self, o): return add(self.var, o)
    def __radd__(self, o): return add(o, self.var)
    def __sub__(self, o): return sub(self.var, o)
    def __rsub__(self, o): return sub(o, self.var)
    def __mul__(self, o): return mul(self.var, o)
    def __rmul__(self, o): return mul(o, self.var)
    def __floordiv__(self, o): return floordiv(self.var, o)
    def __mod__(self, o): return floormod(self.var, o)
    def __lt__(self, o): return self.var < o
    def __le__(self, o): return self.var <= o
    def __gt__(self, o): return self.var > o
    def __ge__(self, o): return self.var >= o


@ir_node
class CommReducer:
    """A commutative, associative combiner f(lhs, rhs) with an identity element."""

    lhs: Var
    rhs: Var
    combined: Expr
    identity: Expr
    name: str = "reduce"
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)


@ir_node
class Reduce(Expr):
    """Combine `source` over every point of the reduce axes; must be a compute's whole body."""

    combiner: CommReducer
    source: Expr
    axis: tuple[IterVar, ...]
    condition: Expr | None = None


# ----------------------------------------------------------------------------- builders

def const(value, dtype=None) -> Expr:
    """A constant; the dtype is inferred from the Python type when not given."""
    if isinstance(value, Expr):
        return value if dtype is None else cast(value, dtype)
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32" if -2**31 <= value < 2**31 else "int64"
        elif isinstance(value, float):
            dtype = "float32"
        else:
            raise TEError(f"cannot make a constant from {value!r} ({type(value).__name__})")
    dtype = dt.canonical(dtype)
    if dt.is_float(dtype):
        return FloatImm(dtype, float(value))
    if isinstance(value, float) and not float(value).is_integer():
        raise TEError(f"constant {value} does not fit integer dtype {dtype}")
    return IntImm(dtype, int(value))


def _is_python_number(x) -> bool:
    return isinstance(x, (int, float, bool)) or (hasattr(x, "dtype") and hasattr(x, "item")
                                                  and not isinstance(x, Expr))


def _as_expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    from .tensor import Tensor
    if isinstance(x, IterVar):
        return x.var
    if isinstance(x, Tensor):
        if x.ndim == 0:
            return x()
        raise TEError(f"tensor '{x.name}' of shape {x.shape} used as a scalar; index it first")
    if hasattr(x, "item") and not isinstance(x, (int, float)):
        x = x.item()
    return const(x)


def _binary_operands(a, b) -> tuple[Expr, Expr]:
    """Make a and b Exprs of one dtype: Python numbers take the other side's dtype."""
    a_num, b_num = _is_python_number(a), _is_python_number(b)
    if a_num and not b_num:
        b = _as_expr(b)
        a = const(a.item() if hasattr(a, "item") else a, b.dtype) if not (
            isinstance(a, float) and dt.is_int(b.dtype) and not float(a).is_integer()) else const(a)
    elif b_num and not a_num:
        a = _as_expr(a)
        b = const(b.item() if hasattr(b, "item") else b, a.dtype) if not (
            isinstance(b, float) and dt.is_int(a.dtype) and not float(b).is_integer()) else const(b)
    a, b = _as_expr(a), _as_expr(b)
    if a.dtype != b.dtype:
        target = dt.promote(a.dtype, b.dtype)
        a, b = cast(a, target), cast(b, target)
    return a, b


def _fold(node_cls, a: Expr, b: Expr):
    """Fold two constants eagerly; keeps shapes and index math small."""
    if not (isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm))):
        return None
    x, y = a.value, b.value
    if node_cls is Add:
        v = x + y
    elif node_cls is Sub:
        v = x - y
    elif node_cls is Mul:
        v = x * y
    elif node_cls is FloorDiv and y != 0:
        v = x // y
    elif node_cls is FloorMod and y != 0:
        v = x % y
    elif node_cls is Min:
        v = min(x, y)
    elif node_cls is Max:
        v = max(x, y)
    else:
        return None
    return const(v, a.dtype)


def _arith(node_cls, a, b) -> Expr:
    a, b = _binary_operands(a, b)
    if dt.is_bool(a.dtype) and node_cls not in (Min, Max):
        raise TEError(f"arithmetic ({node_cls.__name__}) on bool values; cast them first")
    folded = _fold(node_cls, a, b)
    return folded if folded is not None else node_cls(a.dtype, a, b)


def add(a, b) -> Expr:
    return _arith(Add, a, b)


def sub(a, b) -> Expr:
    return _arith(Sub, a, b)


def mul(a, b) -> Expr:
    return _arith(Mul, a, b)


def div(a, b) -> Expr:
    """True division for floats; on integers it is floor division (as in TVM)."""
    a, b = _binary_operands(a, b)
    if dt.is_float(a.dtype):
        return Div(a.dtype, a, b)
    return floordiv(a, b)


def floordiv(a, b) -> Expr:
    a, b = _binary_operands(a, b)
    if dt.is_float(a.dtype):
        return call("floor", Div(a.dtype, a, b))
    return _arith(FloorDiv, a, b)


def floormod(a, b) -> Expr:
    a, b = _binary_operands(a, b)
    if dt.is_float(a.dtype):
        return sub(a, mul(floordiv(a, b), b))
    return _arith(FloorMod, a, b)


def minimum(a, b) -> Expr:
    return _arith(Min, a, b)


def maximum(a, b) -> Expr:
    return _arith(Max, a, b)


def _compare(node_cls, a, b) -> Expr:
    a, b = _binary_operands(a, b)
    return node_cls("bool", a, b)


def logical_and(a, b) -> Expr:
    a, b = _as_expr(a), _as_expr(b)
    return And("bool", _to_bool(a), _to_bool(b))


def logical_or(a, b) -> Expr:
    a, b = _as_expr(a), _as_expr(b)
    return Or("bool", _to_bool(a), _to_bool(b))


def logical_not(a) -> Expr:
    return Not("bool", _to_bool(_as_expr(a)))


def _to_bool(a: Expr) -> Expr:
    return a if a.dtype == "bool" else NE("bool", a, const(0, a.dtype))


def all_of(*conds) -> Expr:
    """Conjunction of conditions (true when there are none)."""
    result = const(True)
    for c in conds:
        result = _to_bool(_as_expr(c)) if isinstance(result, IntImm) else logical_and(result, c)
    return result


def any_of(*conds) -> Expr:
    result = None
    for c in conds:
        result = _to_bool(_as_expr(c)) if result is None else logical_or(result, c)
    return const(False) if result is None else result


def select(cond, t, f) -> Expr:
    """cond ? t : f, with t and f promoted to one dtype."""
    t, f = _binary_operands(t, f)
    return Select(t.dtype, _to_bool(_as_expr(cond)), t, f)


if_then_else = select


def cast(value, dtype) -> Expr:
    dtype = dt.canonical(dtype)
    value = _as_expr(value)
    if value.dtype == dtype:
        return value
    if isinstance(value, (IntImm, FloatImm)) and not dt.is_bool(dtype):
        v = value.value
        if dt.is_int(dtype):
            if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
                return Cast(dtype, value)
            return IntImm(dtype, int(v))
        return FloatImm(dtype, float(v))
    return Cast(dtype, value)


def call(name: str, *args) -> Expr:
    if name not in INTRINSICS:
        raise TEError(f"unknown intrinsic {name!r}; known: {', '.join(INTRINSICS)}")
    exprs = [_as_expr(a) for a in args]
    if name in DOT4_INTRINSICS:
        arity = DOT4_ARITY.get(name, 2)
        dtypes = DOT4_DTYPES.get(name, ("int32",) * arity)
        if tuple(e.dtype for e in exprs) != dtypes:
            what = ("an int32 word of 2 int16, then an int16 of 2 int8"
                    if name == "dot2_s16s8" else
                    "two int32 words of 2 packed int16" if name == "dot2_s16" else
                    "two int32 words of 4 packed bytes") if arity == 2 else (
                "three int32 words (4 packed bytes, then two of int16 pairs)") if arity == 3 \
                else "six int32 words (4 activation words, a selector, a weight word)"
            raise TEError(f"intrinsic {name} takes {what}, got "
                          f"{', '.join(e.dtype for e in exprs) or 'nothing'}")
        return Call("int32", name, tuple(exprs))
    if len(exprs) == 2:
        exprs = list(_binary_operands(*exprs))
    dtype = exprs[0].dtype
    if name in INT_INTRINSICS:
        if not (dt.is_int(dtype) or dtype == "bool"):
            raise TEError(f"intrinsic {name} needs integer arguments, got {dtype}")
    elif name not in ("abs",) and not dt.is_float(dtype):
        raise TEError(f"intrinsic {name} needs float arguments, got {dtype}; cast first")
    return Call(dtype, name, tuple(exprs))


def lookup8(x, table, dtype: str) -> Expr:
    """table[byte of x]: an int8/uint8 `x` indexes a 256-entry table of `dtype` (int8/uint8)
    by its bit pattern (uint8 value; an int8 -1 reads entry 255). A Call named "lookup8"
    whose first argument is x (its own dtype) and whose other 256 are the entries
    as immediates: the kernel carries its table (a quantized elementwise chain folded at
    compile time, graph/passes/int8/tables.py; AVX-512 VBMI looks up 64 bytes in 4
    instructions, codegen/lookup.py)."""
    x, dtype = _as_expr(x), dt.canonical(dtype)
    if x.dtype not in ("int8", "uint8") or dtype not in ("int8", "uint8"):
        raise TEError(f"lookup8(): index and table must be int8/uint8, got {x.dtype} -> "
                      f"{dtype}")
    entries = [int(v) for v in table]
    lo, hi = dt.min_value(dtype), dt.max_value(dtype)
    if len(entries) != 256 or not all(lo <= v <= hi for v in entries):
        raise TEError(f"lookup8(): the table needs 256 {dtype} entries, got {len(entries)}"
                      + ("" if len(entries) != 256 else " with values out of range"))
    return Call(dtype, "lookup8", (x,) + tuple(IntImm(dtype, v) for v in entries))


def reinterpret(x, dtype) -> Expr:
    """The bits of `x` read as `dtype`, of the same size (ONNX BitCast): a Call named
    "reinterpret" whose dtype is the target's."""
    x, dtype = _as_expr(x), dt.canonical(dtype)
    if dt.itemsize(x.dtype) != dt.itemsize(dtype):
        raise TEError(f"reinterpret(): {x.dtype} and {dtype} differ in size "
                      f"({dt.itemsize(x.dtype)} vs {dt.itemsize(dtype)} bytes)")
    return x if x.dtype == dtype else Call(dtype, "reinterpret", (x,))


def exp(x): return call("exp", x)
def log(x): return call("log", x)
def sqrt(x): return call("sqrt", x)
def rsqrt(x): return call("rsqrt", x)
def tanh(x): return call("tanh", x)
def erf(x): return call("erf", x)
def sigmoid(x): return call("sigmoid", x)
def power(x, y): return call("pow", x, y)
def floor(x): return call("floor", x)
def ceil(x): return call("ceil", x)
def round(x): return call("round", x)  # noqa: A001 - TVM's name
def dot4_u8s8(a, b): return call("dot4_u8s8", a, b)
def dot4_u8s7(a, b): return call("dot4_u8s7", a, b)
def dot4_u8s8sym(a, b): return call("dot4_u8s8sym", a, b)
def dot4_u8s16(a, b_even, b_odd): return call("dot4_u8s16", a, b_even, b_odd)
def dot2_s16(a, b): return call("dot2_s16", a, b)
def dot2_s16s8(a, b): return call("dot2_s16s8", a, b)
def dot4_u8s8perm(a0, a1, a2, a3, sel, b): return call("dot4_u8s8perm", a0, a1, a2, a3, sel, b)
def sin(x): return call("sin", x)
def cos(x): return call("cos", x)


def abs(x):  # noqa: A001 - TVM's name
    x = _as_expr(x)
    if dt.is_float(x.dtype):
        return call("abs", x)
    return select(x < const(0, x.dtype), -x, x)


pow = power  # noqa: A001


def var(name: str = "v", dtype: str = "int32") -> Var:
    return Var(dt.canonical(dtype), name)


def is_const_int(e: Expr, value: int | None = None) -> bool:
    return isinstance(e, IntImm) and (value is None or e.value == value)
