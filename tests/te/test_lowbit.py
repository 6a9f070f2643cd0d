"""te/ops/lowbit.py: the float8/float4/E8M0 codecs and sub-byte integer wrapping, compiled and
run, against ml_dtypes (what onnx's reference evaluator uses) and onnx.numpy_helper: every
code of each format decoded, and encodes of every float16 value, rounding ties and their
neighbours, saturation boundaries, NaN, +-inf, -0 and float32 subnormals."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest

import kiln
from kiln import te
from kiln.te.ops import lowbit as L
from kiln.te.reference import evaluate
from kiln.te.tensor import compute

FORMATS = list(L.FLOAT_FORMATS.values())


def _run(fn, arr: np.ndarray, out_dtype: str) -> np.ndarray:
    x = te.placeholder(arr.shape, arr.dtype.name, name="x")
    y = compute(arr.shape, lambda *i: fn(x(*i)), name="y")
    kernel = kiln.build(kiln.create_schedule([y]), [x, y], target="native")
    out = np.zeros(arr.shape, out_dtype)
    kernel(arr, out)
    ref = evaluate([y], {x: arr})[0]        # the TE interpreter agrees with the kernel
    np.testing.assert_array_equal(ref.view(np.uint8), out.view(np.uint8))
    return out


def _same_floats(got: np.ndarray, want: np.ndarray) -> None:
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    np.testing.assert_array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))  # -0


def _probe_floats(fmt_dtype) -> np.ndarray:
    """Every float16 value, the midpoints between neighbouring codes of the format (ties) and
    the float32 values just above and below them, large and tiny values, specials."""
    codes = np.arange(256 if np.dtype(fmt_dtype).itemsize == 1 else 16, dtype=np.uint8)
    if fmt_dtype == ml_dtypes.float4_e2m1fn:
        codes = codes[:16]
    values = np.unique(codes.view(fmt_dtype).astype(np.float64))
    values = values[np.isfinite(values)]
    mids = ((values[1:] + values[:-1]) / 2).astype(np.float32)
    top = np.float32(min(values.max(), 1e37))   # E8M0 reaches 2**127
    rng = np.random.default_rng(0)
    wide = (rng.standard_normal(4000) * 10.0 ** rng.uniform(-45, 38, 4000)).astype(np.float32)
    parts = [np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32), mids,
             np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
             np.array([top, top * 1.0625, top * 1.125, top * 2, 3.4e38, 1e-45, -1e-45, 0.0,
                       -0.0, np.inf, -np.inf, np.nan, -np.nan], np.float32), wide]
    out = np.concatenate(parts).astype(np.float32)
    return np.concatenate([out, -out])


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_decode_every_code(fmt):
    t = getattr(ml_dtypes, fmt.name)
    codes = np.arange(1 << fmt.width, dtype=np.uint8)
    got = _run(lambda v: L.decode(v, fmt), codes, "float32")
    _same_floats(got, codes.view(t).astype(np.float32))


@pytest.mark.parametrize("saturate", [True, False], ids=["saturate", "no_saturate"])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_encode_matches_ml_dtypes(fmt, saturate):
    t = getattr(ml_dtypes, fmt.name)
    x = _probe_floats(t)
    got = _run(lambda v: L.encode(v, fmt, saturate), x, "uint8")
    with np.errstate(invalid="ignore", over="ignore"):
        if saturate and fmt.kind != "plain":   # ONNX: clip to the finite range, then round
            info = ml_dtypes.finfo(t)
            want = np.clip(x, info.min, info.max).astype(t).view(np.uint8)
        else:
            want = x.astype(t).view(np.uint8)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(float(x[i]), int(got[i]), int(want[i])) for i in bad[:8]]


def test_encode_saturation_boundaries():
    """E4M3FN: 448 is the largest finite value; 464 (the tie with the missing 480) rounds
    down to it; above it, saturate clamps and no-saturate gives NaN. E5M2: 57344, 61440."""
    x = np.array([448, 464, 464.0001, 480, -464, -500, 57344, 61439, 61440], np.float32)
    sat = _run(lambda v: L.encode(v, L.E4M3FN, True), x, "uint8")
    nosat = _run(lambda v: L.encode(v, L.E4M3FN, False), x, "uint8")
    assert list(sat[:6]) == [0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0xFE]
    assert list(nosat[:6]) == [0x7E, 0x7E, 0x7F, 0x7F, 0xFE, 0xFF]
    e5 = _run(lambda v: L.encode(v, L.E5M2, False), x[6:], "uint8")
    assert list(e5) == [0x7B, 0x7B, 0x7C]          # 61440 is the tie: even code is inf


def test_decode_e8m0_every_code():
    codes = np.arange(256, dtype=np.uint8)
    got = _run(L.decode_e8m0, codes, "float32")
    _same_floats(got, codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32))


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_encode_e8m0_matches_onnx(round_mode, saturate):
    x = _probe_floats(ml_dtypes.float8_e8m0fnu)
    x = np.concatenate([x, np.float32(2.0) ** np.arange(-127, 128, dtype=np.float32) * 1.5,
                        np.array([np.finfo(np.float32).max, 1.7e38], np.float32)])
    got = _run(lambda v: L.encode_e8m0(v, saturate, round_mode), x, "uint8")
    want = onnx.numpy_helper.to_float8e8m0(x, saturate, round_mode).view(np.uint8)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name", list(L.INT_FORMATS))
def test_wrap_int(name):
    bits, signed = L.INT_FORMATS[name]
    v = np.arange(-300, 300, dtype=np.int32)
    got = _run(lambda e: L.wrap_int(e, bits, signed), v, "int8" if signed else "uint8")
    want = v.astype(getattr(ml_dtypes, name)).astype(np.int32)
    np.testing.assert_array_equal(got.astype(np.int32), want)


@pytest.mark.parametrize("fmt", [L.E4M3FN, L.E2M1], ids=lambda f: f.name)
def test_encode_float64_narrows_to_float32_first(fmt):
    """A float64 just off a tie of the format rounds as ml_dtypes (and onnxruntime) round it:
    to float32, then to the format (so the tie decides, as it does for them)."""
    t = getattr(ml_dtypes, fmt.name)
    values = np.unique(np.arange(1 << fmt.width, dtype=np.uint8).view(t).astype(np.float64))
    values = values[np.isfinite(values)]
    mids = (values[1:] + values[:-1]) / 2
    x = np.concatenate([mids * (1 + 2.0 ** -40), mids * (1 - 2.0 ** -40), mids,
                        np.array([1e300, -1e300, 5e-324, np.nan, np.inf, -0.0])])
    got = _run(lambda v: L.encode(v, fmt, False), x, "uint8")
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(t).view(np.uint8)
    np.testing.assert_array_equal(got, want)
