"""Strided vector loads (codegen/emit_expr._strided_load): a load whose index steps by a
constant lane stride is one read of the span its lanes cover plus a shuffle, never reading an
element the scalar lanes would not. Arrays are placed against a PROT_NONE page, so a read
one element past the last lane's (or before the lowest lane's) faults."""
from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .cg_util import buf, load, loop
from kiln.codegen import Target, build
from kiln.codegen.emit_expr import strided_load_ok
from kiln.schedule.ir import ForKind, IfThenElse, PrimFunc, Store
from kiln.te import expr as E

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


class Fenced:
    """Arrays of `nbytes` placed right after a PROT_NONE page ("start") or right before
    one ("end"); the mapping is kept alive with the object."""

    def __init__(self, nbytes: int):
        self.pages = (nbytes + PAGE - 1) // PAGE
        self.map = mmap.mmap(-1, (self.pages + 2) * PAGE)
        self.raw = np.frombuffer(self.map, np.uint8)
        addr = self.raw.ctypes.data
        for page in (0, self.pages + 1):
            if _libc.mprotect(addr + page * PAGE, PAGE, 0) != 0:
                raise OSError(ctypes.get_errno(), "mprotect")

    def place(self, a: np.ndarray, where: str) -> np.ndarray:
        start = PAGE if where == "start" else (self.pages + 1) * PAGE - a.nbytes
        view = self.raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
        view[...] = a
        return view


def _kernel(n: int, stride: int, offset: int, lanes: int, dtype: str, size: int) -> PrimFunc:
    """y[i] = x[offset + stride * i], i < n, as vectors of `lanes` (a guarded last vector:
    the masked-tail path) -- x holds exactly the `size` elements the lanes read."""
    x, y = buf("x", dtype, [size]), buf("y", dtype, [n])
    io, ii = E.var("io"), E.var("ii")
    i = io * lanes + ii
    store = Store(y, i, load(x, E.const(offset) + i * stride))
    body = store if n % lanes == 0 else IfThenElse(i < n, store)
    return PrimFunc("strided", (x, y), loop(io, -(-n // lanes), loop(
        ii, lanes, body, ForKind.VECTORIZED)))


def _data(size: int, dtype: str, rng) -> np.ndarray:
    if dtype == "bool":
        return rng.random(size) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(size).astype(dtype)
    return rng.integers(0, 100, size).astype(dtype)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stride=st.sampled_from([2, 3, 4, -1, -2, -3]),
       lanes=st.sampled_from([4, 8, 16, 32]),
       n=st.sampled_from([1, 2, 3, 7, 13, 16, 17, 31, 33, 64, 97]),
       dtype=st.sampled_from(["float32", "float64", "int8", "uint16", "float16", "bool"]),
       seed=st.integers(0, 1 << 16))
def test_strided_load_matches_numpy_and_stays_in_bounds(stride, lanes, n, dtype, seed):
    rng = np.random.default_rng(seed)
    step = abs(stride)
    size = (n - 1) * step + 1            # x is exactly what the lanes read
    offset = 0 if stride > 0 else size - 1
    k = build(_kernel(n, stride, offset, lanes, dtype, size))
    x = _data(size, dtype, rng)
    want = x[offset + stride * np.arange(n)]
    fence = Fenced(x.nbytes)
    for where in ("start", "end"):
        y = np.zeros(n, x.dtype)
        k(fence.place(x, where), y)
        np.testing.assert_array_equal(y, want, err_msg=f"stride {stride}, {lanes} lanes, "
                                      f"n {n}, {dtype}, x against the {where} fence")


@pytest.mark.parametrize("stride", [2, -1])
def test_offset_strided_load_in_a_larger_buffer(stride):
    """A non-zero offset into a buffer longer than the span (the usual case)."""
    n, lanes, offset, size = 37, 16, 50, 200
    k = build(_kernel(n, stride, offset, lanes, "float32", size))
    x = np.arange(size, dtype=np.float32)
    y = np.zeros(n, np.float32)
    k(x, y)
    np.testing.assert_array_equal(y, x[offset + stride * np.arange(n)])


def test_stride_two_is_one_span_read_not_per_lane():
    k = build(_kernel(64, 2, 0, 16, "float32", 127), target=Target.native())
    ir = k.llvm_ir()
    assert "extractelement" not in ir, "a stride-2 load still reads lane by lane"
    assert "shufflevector" in ir
    if Target.native().vector_bits == 512:
        asm = k.asm()
        assert "vpermt2ps" in asm or "vpermi2ps" in asm
        assert "vinsertps" not in asm


def test_avx2_code_for_stride_two_uses_masked_span_and_shuffles():
    """Compiled (not run) for an AVX2 CPU: vmaskmovps for the span's tail, no per-lane
    inserts."""
    k = build(_kernel(64, 2, 0, 16, "float32", 127), target="llvm -mcpu=znver3")
    asm = k.asm()
    assert "vmaskmovps" in asm and "vinsertps" not in asm


def test_which_strides_are_span_reads():
    assert [s for s in range(-6, 7) if strided_load_ok(s)] == [-4, -3, -2, -1, 2, 3, 4]


def test_a_stride_two_tail_runs_masked():
    """The guarded last vector of a stride-2 read is one masked statement (its span read
    under the active lanes' element mask), not a scalar loop over the lanes."""
    k = build(_kernel(19, 2, 0, 16, "float32", 37))
    ir = k.llvm_ir()
    assert "llvm.masked.store" in ir and "llvm.masked.load.v32f32" in ir
    x = np.arange(37, dtype=np.float32)
    y = np.zeros(19, np.float32)
    k(x, y)
    np.testing.assert_array_equal(y, x[::2])
