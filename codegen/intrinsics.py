"""Math intrinsics (te.expr.Call) as LLVM IR.

sqrt/abs/floor/ceil/round use LLVM intrinsics, which vectorize. float32 exp, log, tanh, erf and
sigmoid are polynomial implementations emitted as IR (Cephes-style range reduction), so a
vectorized softmax or GELU stays in vector registers instead of calling libm once per lane.
float64 and the rarer functions call libm (per lane inside vector code).
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..te.errors import CodegenError
from ..te.expr import DOT4_ARITY, DOT4_INTRINSICS, FloatImm, IntImm
from . import llvm_types as T
from .dot4 import emit_dot4

_LIBM64 = {"exp": "exp", "log": "log", "tanh": "tanh", "erf": "erf", "log1p": "log1p",
           "expm1": "expm1", "sin": "sin", "cos": "cos", "pow": "pow"}
_LIBM32 = {"log1p": "log1pf", "expm1": "expm1f", "sin": "sinf", "cos": "cosf", "pow": "powf"}
for _f in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"):
    _LIBM64[_f], _LIBM32[_f] = _f, _f + "f"
_POLY32 = ("exp", "log", "tanh", "erf", "sigmoid")
_ARITY = {"pow": 2, "fmod": 2, "bit_and": 2, "bit_or": 2, "bit_xor": 2, "shl": 2, "shr": 2,
          **dict.fromkeys(DOT4_INTRINSICS, 2), **DOT4_ARITY}


def _suffix(ty: ir.Type) -> str:
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{_suffix(ty.element)}"
    return "f32" if isinstance(ty, ir.FloatType) else "f64"


def llvm_intrinsic(module: ir.Module, name: str, ty: ir.Type, nargs: int = 1) -> ir.Function:
    """Declare (once) the overloaded intrinsic `llvm.<name>.<type>`."""
    full = f"llvm.{name}.{_suffix(ty)}"
    fn = module.globals.get(full)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ty, [ty] * nargs), full)
    return fn


def _libm(module: ir.Module, name: str, ty: ir.Type, nargs: int) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ty, [ty] * nargs), name)
    return fn


def emit_call(em, call, args: list[ir.Value]) -> ir.Value:
    """Emit Call `call` on already-emitted `args` (scalars or vectors of one type)."""
    name, dtype, bld = call.name, call.dtype, em.builder
    if name == "reinterpret":   # the value's bytes in memory, read as the other dtype
        bits = em.to_memory(call.args[0].dtype, args[0])
        mem = T.memory_type(dtype)
        return em._from_memory(dtype, bld.bitcast(bits, ir.VectorType(mem, bits.type.count)
                                                  if T.is_vector(bits) else mem))
    if dtype in ("float16", "bfloat16"):  # held as float32 in registers
        dtype = "float32"
    if len(args) != _ARITY.get(name, 1):
        raise CodegenError(f"intrinsic {name} takes {_ARITY.get(name, 1)} argument(s), got "
                           f"{len(args)} in {call}")
    if name in DOT4_INTRINSICS:
        return emit_dot4(em, name, *args)
    x, ty = args[0], args[0].type
    module = bld.module
    if name in _INTEGER_OPS:
        return _integer_op(bld, name, dtype, args)
    if name == "pow" and (n := _small_exponent(call.args[1])) is not None:
        return _integer_power(bld, em.fm, x, n)
    if name == "fmod":  # frem is C's fmod: exact, with the sign of the dividend
        return bld.frem(args[0], args[1])
    if name == "abs" and not dtype.startswith("float"):
        if dtype in ("uint8", "bool"):
            return x
        neg = bld.icmp_signed("<", x, T.const_like(ty, 0))
        return bld.select(neg, bld.sub(T.const_like(ty, 0), x), x)
    simple = {"sqrt": "sqrt", "abs": "fabs", "floor": "floor", "ceil": "ceil",
              "round": "roundeven"}
    if name in simple:
        return bld.call(llvm_intrinsic(module, simple[name], ty), [x])
    if name == "rsqrt":
        root = bld.call(llvm_intrinsic(module, "sqrt", ty), [x])
        return bld.fdiv(T.const_like(ty, 1.0), root, flags=em.fm)
    if dtype == "float32" and name in _POLY32:
        return bld.call(_poly_function(module, name, ty), [x])
    if name == "sigmoid":  # float64
        e = _per_lane(bld, _libm(module, "exp", ty.element if T.is_vector(x) else ty, 1),
                      [bld.fsub(T.const_like(ty, 0.0), x)])
        return bld.fdiv(T.const_like(ty, 1.0), bld.fadd(T.const_like(ty, 1.0), e))
    table = _LIBM32 if dtype == "float32" else _LIBM64
    if name not in table:
        raise CodegenError(f"intrinsic {name} is not supported for {dtype}")
    scalar_ty = ty.element if isinstance(ty, ir.VectorType) else ty
    return _per_lane(bld, _libm(module, table[name], scalar_ty, len(args)), args)


_MAX_UNROLLED_POWER = 4


def _small_exponent(expr) -> int | None:
    """n where `expr` is the constant n in 1.._MAX_UNROLLED_POWER, else None.

    x ** 3 (GELU's tanh form, in every GPT-2 block) called powf once per lane: 5 ns a lane,
    8x onnxruntime's FastGelu. Products of x are within 2 ulp of powf and vectorize; they
    agree with it on signs, zeros, infinities and NaN for these positive integer powers."""
    value = getattr(expr, "value", None)
    if not isinstance(expr, (FloatImm, IntImm)) or value is None:
        return None
    if float(value) != int(value) or not 1 <= int(value) <= _MAX_UNROLLED_POWER:
        return None
    return int(value)


def _integer_power(bld: ir.IRBuilder, flags, x: ir.Value, n: int) -> ir.Value:
    """x ** n for 1 <= n <= 4 as products (x*x*x, (x*x)*(x*x))."""
    if n == 1:
        return x
    square = bld.fmul(x, x, flags=flags)
    if n == 2:
        return square
    if n == 3:
        return bld.fmul(square, x, flags=flags)
    return bld.fmul(square, square, flags=flags)


_INTEGER_OPS = ("bit_and", "bit_or", "bit_xor", "bit_not", "shl", "shr")


def _integer_op(bld: ir.IRBuilder, name: str, dtype: str, args: list[ir.Value]) -> ir.Value:
    x, ty = args[0], args[0].type
    if name == "bit_not":
        return bld.xor(x, T.const_like(ty, -1))
    y = args[1]
    if name in ("bit_and", "bit_or", "bit_xor"):
        return getattr(bld, {"bit_and": "and_", "bit_or": "or_", "bit_xor": "xor"}[name])(x, y)
    # LLVM shifts by >= the bit width are poison: clamp, and give 0 for those lanes (numpy's
    # result for unsigned operands and for left shifts)
    width = (ty.element if isinstance(ty, ir.VectorType) else ty).width
    signed = not dtype.startswith("uint")
    big = bld.icmp_unsigned(">=", y, T.const_like(ty, width))
    amount = bld.select(big, T.const_like(ty, width - 1), y)
    if name == "shl":
        return bld.select(big, T.const_like(ty, 0), bld.shl(x, amount))
    if signed:
        return bld.ashr(x, amount)
    return bld.select(big, T.const_like(ty, 0), bld.lshr(x, amount))


def _per_lane(bld: ir.IRBuilder, fn: ir.Function, args: list[ir.Value]) -> ir.Value:
    """Call scalar `fn` on every lane of vector args (or once on scalars)."""
    if not T.is_vector(args[0]):
        return bld.call(fn, args)
    out = ir.Constant(args[0].type, ir.Undefined)
    for lane in range(args[0].type.count):
        idx = ir.Constant(T.I32, lane)
        r = bld.call(fn, [bld.extract_element(a, idx) for a in args])
        out = bld.insert_element(out, r, idx)
    return out


# ----------------------------------------------------------------------------- float32 math

class _Math:
    """Small arithmetic helpers over one float type (scalar or vector) for a builder."""

    def __init__(self, bld: ir.IRBuilder, ty: ir.Type):
        self.b, self.ty, self.ity = bld, ty, T.int_type_like(ty)

    def c(self, v):
        return T.const_like(self.ty, v)

    def ci(self, v):
        return T.const_like(self.ity, v)

    def fma(self, a, x, y):
        return self.b.call(llvm_intrinsic(self.b.module, "fmuladd", self.ty, 3), [a, x, y])

    def horner(self, x, coeffs):
        r = self.c(coeffs[0])
        for k in coeffs[1:]:
            r = self.fma(r, x, self.c(k))
        return r

    def lt(self, a, b):
        return self.b.fcmp_ordered("<", a, b)

    def sel(self, cond, a, b):
        return self.b.select(cond, a, b)

    def call(self, name, x):
        return self.b.call(llvm_intrinsic(self.b.module, name, self.ty), [x])

    def isnan(self, x):
        return self.b.fcmp_unordered("uno", x, x)


_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
          1.6666665459e-1, 5.0000001201e-1)
_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
          1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
          3.3333331174e-1)
_TANH_P = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
           -3.33332819422e-1)
_ERF_SMALL = (7.853861353153693e-5, -8.010193625184903e-4, 5.188327685732524e-3,
              -2.685381193529856e-2, 1.128358514861418e-1, -3.761262582423300e-1,
              1.128379165726710e+0)
_ERF_LARGE = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592, 0.0)


def _exp(m: _Math, x):
    b = m.b
    xc = m.sel(m.lt(x, m.c(-104.0)), m.c(-104.0), x)
    xc = m.sel(m.lt(m.c(89.0), xc), m.c(89.0), xc)
    n = m.call("floor", m.fma(xc, m.c(1.44269504088896341), m.c(0.5)))
    r = m.fma(n, m.c(-0.693359375), xc)
    r = m.fma(n, m.c(2.12194440e-4), r)
    p = m.horner(r, _EXP_P)
    y = b.fadd(m.fma(p, b.fmul(r, r), r), m.c(1.0))
    ni = b.fptosi(n, m.ity)
    n1 = b.ashr(ni, m.ci(1))
    n2 = b.sub(ni, n1)
    for k in (n1, n2):  # 2^n as two normal powers of two: reaches the denormal range
        y = b.fmul(y, b.bitcast(b.shl(b.add(k, m.ci(127)), m.ci(23)), m.ty))
    return m.sel(m.isnan(x), x, y)


def _log(m: _Math, x):
    b = m.b
    denormal = m.lt(x, m.c(1.17549435e-38))
    xs = m.sel(denormal, b.fmul(x, m.c(8388608.0)), x)
    bits = b.bitcast(xs, m.ity)
    exponent = b.sub(b.and_(b.lshr(bits, m.ci(23)), m.ci(0xFF)), m.ci(126))
    e = b.fadd(b.sitofp(exponent, m.ty), m.sel(denormal, m.c(-23.0), m.c(0.0)))
    mant = b.bitcast(b.or_(b.and_(bits, m.ci(0x007FFFFF)), m.ci(0x3F000000)), m.ty)
    small = m.lt(mant, m.c(0.707106781186547524))
    e = b.fsub(e, m.sel(small, m.c(1.0), m.c(0.0)))
    f = b.fsub(m.sel(small, b.fadd(mant, mant), mant), m.c(1.0))
    z = b.fmul(f, f)
    y = b.fmul(b.fmul(m.horner(f, _LOG_P), f), z)
    y = m.fma(e, m.c(-2.12194440e-4), y)
    y = m.fma(z, m.c(-0.5), y)
    res = m.fma(e, m.c(0.693359375), b.fadd(f, y))
    res = m.sel(b.fcmp_ordered("==", x, m.c(0.0)), m.c(float("-inf")), res)
    res = m.sel(b.fcmp_ordered("==", x, m.c(float("inf"))), x, res)
    bad = b.or_(m.lt(x, m.c(0.0)), m.isnan(x))
    return m.sel(bad, m.c(float("nan")), res)


def _tanh(m: _Math, x):
    b = m.b
    ax = m.call("fabs", x)
    z = b.fmul(x, x)
    small = m.fma(b.fmul(x, z), m.horner(z, _TANH_P), x)
    e = _exp(m, b.fadd(ax, ax))
    t = b.fsub(m.c(1.0), b.fdiv(m.c(2.0), b.fadd(e, m.c(1.0))))
    large = m.sel(m.lt(x, m.c(0.0)), b.fsub(m.c(0.0), t), t)
    return m.sel(m.lt(ax, m.c(0.625)), small, large)


def _sigmoid(m: _Math, x):
    # e = exp(-|x|) never overflows: 1/(1+e) for x >= 0, e/(1+e) for x < 0 (keeps the tiny
    # values of the negative tail instead of flushing 1/(1+inf) to zero)
    b = m.b
    e = _exp(m, b.fsub(m.c(0.0), m.call("fabs", x)))
    s = b.fdiv(m.c(1.0), b.fadd(m.c(1.0), e))
    return m.sel(m.lt(x, m.c(0.0)), b.fmul(e, s), s)


def _erf(m: _Math, x):
    b = m.b
    ax = m.call("fabs", x)
    small = b.fmul(x, m.horner(b.fmul(x, x), _ERF_SMALL))
    # erf(5) rounds to 1 in float32; clamping keeps exp(-x^2) out of denormals (slow paths);
    # a NaN fails the comparison and passes through
    ax = m.sel(m.lt(m.c(5.0), ax), m.c(5.0), ax)
    t = b.fdiv(m.c(1.0), m.fma(ax, m.c(0.3275911), m.c(1.0)))
    poly = m.horner(t, _ERF_LARGE)
    tail = b.fmul(poly, _exp(m, b.fsub(m.c(0.0), b.fmul(ax, ax))))
    y = b.fsub(m.c(1.0), tail)
    large = m.sel(m.lt(x, m.c(0.0)), b.fsub(m.c(0.0), y), y)
    return m.sel(m.lt(ax, m.c(1.0)), small, large)


_BODIES = {"exp": _exp, "log": _log, "tanh": _tanh, "sigmoid": _sigmoid, "erf": _erf}


def _poly_function(module: ir.Module, name: str, ty: ir.Type) -> ir.Function:
    """The module's internal `kiln.<name>.<type>` function, defined on first use."""
    full = f"kiln.{name}.{_suffix(ty)}"
    fn = module.globals.get(full)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(ty, [ty]), full)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    bld.ret(_BODIES[name](_Math(bld, ty), fn.args[0]))
    return fn
