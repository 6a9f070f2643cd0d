"""Low-bit element types as scalar expressions: float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ,
E8M0), float4 (E2M1) and the sub-byte integers (int4, uint4, int2, uint2).

Kiln stores such a tensor one element per byte: a float format as its code in a uint8 (the
ONNX/ml_dtypes bit layout, sign in the top bit of the format's width), a sub-byte integer as
its value in an int8 (signed, sign-extended) or a uint8. Every conversion here is integer and
float arithmetic on the float32 bit pattern (te.reinterpret), so it runs in generated code and
fuses with its neighbours like any elementwise op:

- decode(code, fmt) -> float32 is exact (every code of these formats is a float32 value);
- encode(x, fmt, saturate) rounds a float32 to nearest, ties to even, in one step; a
  float64 is narrowed to float32 first, as ml_dtypes and onnxruntime do (which can round
  twice); out-of-range values clamp to the largest finite code when `saturate`, else
  become the format's infinity (E5M2) or NaN (the others). E2M1 has neither and always
  clamps. NaN -> the format's NaN; -0.0 keeps its sign except in the FNUZ formats (no -0);
- encode_e8m0 follows ONNX Cast's rounding modes ("up", "down", "nearest") on the exponent;
- wrap_int keeps the low `bits` bits of an integer (two's complement), as a C cast does.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import expr as E


@dataclass(frozen=True)
class FloatFormat:
    """A small binary float: `ebits` exponent bits, `mbits` mantissa bits, exponent `bias`.
    `kind`: "ieee" (all-ones exponent is inf/NaN: E5M2), "fn" (finite; only the all-ones code
    S.1111.111 is NaN: E4M3FN), "fnuz" (finite, no -0; 0x80 is the only NaN), "plain"
    (finite, no NaN: E2M1)."""

    name: str
    ebits: int
    mbits: int
    bias: int
    kind: str

    @property
    def width(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def max_code(self) -> int:
        """Code of the largest finite magnitude (sign bit clear)."""
        top = (1 << (self.ebits + self.mbits)) - 1
        if self.kind == "ieee":
            return top - (1 << self.mbits)     # exponent all ones is inf/NaN
        if self.kind == "fn":
            return top - 1                     # S.1111.111 is NaN
        return top

    @property
    def nan_code(self) -> int | None:
        return {"ieee": (1 << (self.ebits + self.mbits)) - (1 << (self.mbits - 1)),
                "fn": (1 << (self.ebits + self.mbits)) - 1,
                "fnuz": 1 << (self.ebits + self.mbits), "plain": None}[self.kind]


E4M3FN = FloatFormat("float8_e4m3fn", 4, 3, 7, "fn")
E4M3FNUZ = FloatFormat("float8_e4m3fnuz", 4, 3, 8, "fnuz")
E5M2 = FloatFormat("float8_e5m2", 5, 2, 15, "ieee")
E5M2FNUZ = FloatFormat("float8_e5m2fnuz", 5, 2, 16, "fnuz")
E2M1 = FloatFormat("float4_e2m1fn", 2, 1, 1, "plain")
FLOAT_FORMATS = {f.name: f for f in (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ, E2M1)}
E8M0 = "float8_e8m0fnu"
# sub-byte integers: name -> (bits, signed)
INT_FORMATS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}


def _and(a, b): return E.call("bit_and", a, b)
def _or(a, b): return E.call("bit_or", a, b)
def _shl(a, b): return E.call("shl", a, b)
def _shr(a, b): return E.call("shr", a, b)          # arithmetic on int32
def _i32(v: int) -> E.Expr: return E.const(v, "int32")
def _f32_bits(bits) -> E.Expr: return E.reinterpret(bits, "float32")


def _nan() -> E.Expr:
    return _f32_bits(_i32(0x7FC00000))


def decode(code: E.Expr, fmt: FloatFormat) -> E.Expr:
    """The float32 value of the code `code` (an integer expression) of format `fmt`."""
    b = E.cast(code, "int32")
    m_mask, e_mask = (1 << fmt.mbits) - 1, (1 << fmt.ebits) - 1
    b = _and(b, _i32((1 << fmt.width) - 1))
    sign = _and(_shr(b, _i32(fmt.width - 1)), _i32(1))
    e = _and(_shr(b, _i32(fmt.mbits)), _i32(e_mask))
    m = _and(b, _i32(m_mask))
    normal = _f32_bits(_or(_shl(e + (127 - fmt.bias), _i32(23)), _shl(m, _i32(23 - fmt.mbits))))
    subnormal = E.cast(m, "float32") * E.const(2.0 ** (1 - fmt.bias - fmt.mbits), "float32")
    mag = E.select(e.eq(0), subnormal, normal)
    value = _f32_bits(_or(E.reinterpret(mag, "int32"), _shl(sign, _i32(31))))
    if fmt.kind == "ieee":
        inf = _f32_bits(_or(_i32(0x7F800000), _shl(sign, _i32(31))))
        special = E.select(m.eq(0), inf, _nan())
        return E.select(e.eq(e_mask), special, value)
    if fmt.kind == "fn":
        return E.select(_and(b, _i32((1 << (fmt.width - 1)) - 1)).eq(fmt.nan_code), _nan(),
                        value)
    if fmt.kind == "fnuz":
        return E.select(b.eq(fmt.nan_code), _nan(), value)
    return value


def encode(x: E.Expr, fmt: FloatFormat, saturate: bool = True) -> E.Expr:
    """The uint8 code of float32 `x` in format `fmt` (round to nearest even; see the module
    docstring for overflow, NaN and -0)."""
    x = E.cast(x, "float32")
    u = E.reinterpret(x, "int32")
    sign = _and(_shr(u, _i32(31)), _i32(1))
    a = _and(u, _i32(0x7FFFFFFF))
    shift = 23 - fmt.mbits
    # normal in the target: re-bias the exponent and round away `shift` mantissa bits (a
    # carry out of the mantissa steps the exponent, which is the right next value)
    adj = a - ((127 - fmt.bias) << 23)
    lsb = _and(_shr(adj, _i32(shift)), _i32(1))
    code_n = _shr(adj + ((1 << (shift - 1)) - 1) + lsb, _i32(shift))
    # subnormal in the target: the multiple of the smallest step, rounded (exact scaling)
    scaled = _f32_bits(a) * E.const(2.0 ** (fmt.bias + fmt.mbits - 1), "float32")
    code_s = E.cast(E.round(scaled), "int32")
    code = E.select(a < ((128 - fmt.bias) << 23), code_s, code_n)
    over = code > fmt.max_code
    if saturate or fmt.kind == "plain":
        code = E.minimum(code, _i32(fmt.max_code))
    elif fmt.kind == "ieee":
        code = E.select(over, _i32(fmt.max_code + 1), code)     # infinity
    elif fmt.kind == "fn":
        code = E.select(over, _i32(fmt.nan_code), code)
    signed = _or(code, _shl(sign, _i32(fmt.width - 1)))
    is_nan = a > 0x7F800000
    if fmt.kind == "fnuz":
        signed = E.select(code.eq(0), _i32(0), signed)           # no negative zero
        if not saturate:
            signed = E.select(over, _i32(fmt.nan_code), signed)
        signed = E.select(is_nan, _i32(fmt.nan_code), signed)
    elif fmt.kind == "plain":
        # no NaN code: ml_dtypes (what ONNX's reference uses) gives the zero of the opposite
        # sign, i.e. 0x8 for a NaN with the sign bit clear
        signed = E.select(is_nan, _shl(_i32(1) - sign, _i32(fmt.width - 1)), signed)
    else:
        signed = E.select(is_nan, _or(_i32(fmt.nan_code), _shl(sign, _i32(fmt.width - 1))),
                          signed)
    return E.cast(signed, "uint8")


def decode_e8m0(code: E.Expr) -> E.Expr:
    """float32 value of an E8M0 code: 2**(code - 127); 0xFF is NaN (no sign, no zero)."""
    b = _and(E.cast(code, "int32"), _i32(0xFF))
    value = E.select(b.eq(0), _f32_bits(_i32(0x00400000)), _f32_bits(_shl(b, _i32(23))))
    return E.select(b.eq(0xFF), _nan(), value)


def encode_e8m0(x: E.Expr, saturate: bool = True, round_mode: str = "up") -> E.Expr:
    """E8M0 code of float32 `x`: its exponent, rounded per `round_mode` ("up": any nonzero
    mantissa rounds up; "down": truncates; "nearest": ONNX's guard/round/sticky rule); inf
    and NaN -> 0xFF; with `saturate`, 0xFE never rounds up into 0xFF. The sign is ignored."""
    if round_mode not in ("up", "down", "nearest"):
        raise ValueError(f"round_mode must be 'up', 'down' or 'nearest', got {round_mode!r}")
    u = E.reinterpret(E.cast(x, "float32"), "int32")
    exponent = _and(_shr(u, _i32(23)), _i32(0xFF))
    if round_mode == "down":
        up = E.const(False, "bool")
    elif round_mode == "up":
        up = _and(u, _i32(0x7FFFFF)).ne(0)
    else:
        g = _and(u, _i32(0x400000)).ne(0)
        r = _and(u, _i32(0x200000)).ne(0)
        s = _and(u, _i32(0x1FFFFF)).ne(0)
        up = g & (r | s | (exponent > 0))
    if saturate:
        up = up & exponent.ne(0xFE)
    rounded = E.select(up, exponent + 1, exponent)
    return E.cast(E.select(exponent.eq(0xFF), _i32(0xFF), rounded), "uint8")


def wrap_int(v: E.Expr, bits: int, signed: bool) -> E.Expr:
    """The low `bits` bits of integer `v`, as int8 (signed, sign-extended) or uint8."""
    low = _and(E.cast(v, "int32"), _i32((1 << bits) - 1))
    if not signed:
        return E.cast(low, "uint8")
    half = 1 << (bits - 1)
    return E.cast(E.call("bit_xor", low, _i32(half)) - half, "int8")
