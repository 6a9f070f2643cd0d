"""The byte table lookup (te.expr.lookup8, codegen/lookup.py) against numpy indexing: every
index byte, int8 and uint8 both ways, vector widths of 1 to 128 lanes with tails (prime
lengths), a scalar loop, the VBMI path on this host where it has it and the per-lane loads
on an AVX2 target; the interpreter and TE reference agree."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.codegen.dot4 import target_features
from kiln.codegen.target import Target
from kiln.te import expr as E
from kiln.te.errors import TEError
from kiln.te.ops.int8.core import lookup_table
from kiln.te.reference import evaluate
from kiln.te.tensor import placeholder

_HOST_VBMI = "avx512vbmi" in target_features(Target.from_string("native"))


def _table(dtype, seed):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, 256).astype(dtype)


def _build(n, in_dtype, out_dtype, table, lanes, target):
    x = placeholder((n,), in_dtype, "x")
    y = lookup_table(x, table.tolist(), out_dtype)
    s = kiln.create_schedule(y)
    if lanes > 1:
        xo, xi = s[y].split(y.op.axis[0], lanes)
        s[y].vectorize(xi)
    return x, y, kiln.build(s, [x, y], target=target)


def _inputs(n, dtype, seed):
    everything = np.arange(256, dtype=np.uint8).view(dtype)
    rest = np.random.default_rng(seed).integers(0, 256, max(0, n - 256)).astype(np.uint8)
    return np.concatenate([everything, rest.view(dtype)])[:n].copy() if n >= 256 else \
        np.random.default_rng(seed).permutation(everything)[:n].copy()


@pytest.mark.parametrize("in_dtype,out_dtype", [("uint8", "uint8"), ("int8", "int8"),
                                                ("uint8", "int8"), ("int8", "uint8")])
@pytest.mark.parametrize("n,lanes", [(256, 16), (263, 64), (389, 128), (37, 8), (1, 1),
                                     (300, 1)])
def test_lookup_matches_numpy(in_dtype, out_dtype, n, lanes):
    table = _table(out_dtype, n + lanes)
    x_np = _inputs(n, in_dtype, n)
    _, _, f = _build(n, in_dtype, out_dtype, table, lanes, "native")
    out = np.empty(n, out_dtype)
    f(x_np, out)
    np.testing.assert_array_equal(out, table[x_np.view(np.uint8)])


def test_avx2_target_takes_per_lane_loads():
    table = _table("uint8", 1)
    x_np = _inputs(256, "uint8", 2)
    _, _, f = _build(256, "uint8", "uint8", table, 32, "llvm -mcpu=haswell")
    assert "vpermi2b" not in f.asm() and "vpermt2b" not in f.asm()
    out = np.empty(256, np.uint8)
    f(x_np, out)
    np.testing.assert_array_equal(out, table[x_np])


@pytest.mark.skipif(not _HOST_VBMI, reason="host without AVX-512 VBMI")
def test_vbmi_host_uses_vpermi2b():
    _, _, f = _build(128, "uint8", "uint8", _table("uint8", 3), 64, "native")
    asm = f.asm()
    assert "vpermi2b" in asm or "vpermt2b" in asm


def test_reference_and_checks():
    table = _table("int8", 5)
    x = placeholder((256,), "int8", "x")
    y = lookup_table(x, table.tolist(), "int8")
    x_np = np.arange(256, dtype=np.uint8).view(np.int8)
    np.testing.assert_array_equal(evaluate(y, {x: x_np})[0], table[x_np.view(np.uint8)])
    with pytest.raises(TEError, match="256"):
        E.lookup8(E.const(1, "uint8"), [0] * 255, "uint8")
    with pytest.raises(TEError, match="out of range"):
        E.lookup8(E.const(1, "uint8"), [200] * 256, "int8")
    with pytest.raises(TEError, match="int8/uint8"):
        E.lookup8(E.const(1, "int32"), [0] * 256, "uint8")
