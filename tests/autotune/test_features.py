"""Feature extraction on hand-written PrimFuncs: each feature reads what the IR says."""
import numpy as np
import pytest

from kiln.autotune.features import FEATURE_NAMES, N_FEATURES, extract_features
from kiln.schedule.ir import (Allocate, Buffer, BufferLoad, For, ForKind, PrimFunc, Scope,
                              Store, seq)
from kiln.te import expr as E


def _f(features, name):
    return float(features[FEATURE_NAMES.index(name)])


def _rowsum(outer_kind=ForKind.SERIAL, inner_kind=ForKind.SERIAL, n=64, m=32):
    A = Buffer("A", "float32", (n, m), Scope.PARAM)
    C = Buffer("C", "float32", (n,), Scope.PARAM)
    i, j = E.Var("int32", "i"), E.Var("int32", "j")
    body = For(i, E.const(0), E.const(n), outer_kind, For(
        j, E.const(0), E.const(m), inner_kind,
        Store(C, i, BufferLoad("float32", C, i) + BufferLoad("float32", A, i * m + j))))
    return PrimFunc("rowsum", (A, C), body)


def test_length_and_determinism():
    a, b = extract_features(_rowsum()), extract_features(_rowsum())
    assert a.shape == (N_FEATURES,) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)


def test_loop_levels_innermost_first_with_kinds():
    f = extract_features(_rowsum(ForKind.PARALLEL, ForKind.SERIAL, n=64, m=32))
    assert _f(f, "level0_log_extent") == pytest.approx(np.log2(33))
    assert _f(f, "level0_is_serial") == 1.0
    assert _f(f, "level1_log_extent") == pytest.approx(np.log2(65))
    assert _f(f, "level1_is_parallel") == 1.0
    assert _f(f, "level2_log_extent") == 0.0          # padding beyond the nest
    assert _f(f, "log_parallel_extent") == pytest.approx(np.log2(65))


def test_vector_width_and_unroll():
    f = extract_features(_rowsum(ForKind.UNROLLED, ForKind.VECTORIZED, n=4, m=8))
    assert _f(f, "vector_width") == 8.0
    assert _f(f, "log_unrolled_extent") == pytest.approx(np.log2(5))
    assert _f(f, "level0_is_vectorized") == 1.0


def test_op_counts_weighted_by_trip_count():
    f = extract_features(_rowsum(n=64, m=32))
    # one float add per iteration, 64*32 iterations; two loads each
    assert _f(f, "log_float_add") == pytest.approx(np.log2(1 + 64 * 32))
    assert _f(f, "log_load") == pytest.approx(np.log2(1 + 2 * 64 * 32))
    assert _f(f, "log_float_mul") == 0.0


def test_fma_pattern_counted():
    A = Buffer("A", "float32", (16,), Scope.PARAM)
    C = Buffer("C", "float32", (16,), Scope.PARAM)
    i = E.Var("int32", "i")
    load = BufferLoad("float32", A, i)
    func = PrimFunc("fma", (A, C), For(i, E.const(0), E.const(16), ForKind.SERIAL,
                                       Store(C, i, load * load + load)))
    f = extract_features(func)
    assert _f(f, "log_float_fma") == pytest.approx(np.log2(17))
    assert _f(f, "log_float_mul") == pytest.approx(np.log2(17))


def test_reuse_bytes_per_level_and_strides():
    f = extract_features(_rowsum(n=64, m=32))
    # innermost loop j: A row of 32 floats (+ C[i] 1 float, read and written)
    assert _f(f, "log_bytes_global_l0") == pytest.approx(np.log2(1 + 32 * 4 + 4 + 4))
    # both loops: all of A and all of C (twice: load and store)
    assert _f(f, "log_bytes_global_l1") == pytest.approx(np.log2(1 + 64 * 32 * 4 + 2 * 64 * 4))
    assert _f(f, "n_contiguous") == 1.0     # A[i*m + j] moves by 1 with j
    assert _f(f, "n_invariant") == 2.0      # C[i] load and store do not move with j


def test_strided_access_detected():
    A = Buffer("A", "float32", (32, 32), Scope.PARAM)
    C = Buffer("C", "float32", (32,), Scope.PARAM)
    i, j = E.Var("int32", "i"), E.Var("int32", "j")
    body = For(i, E.const(0), E.const(32), ForKind.SERIAL, For(
        j, E.const(0), E.const(32), ForKind.SERIAL,
        Store(C, i, BufferLoad("float32", C, i) + BufferLoad("float32", A, j * 32 + i))))
    f = extract_features(PrimFunc("colsum", (A, C), body))
    assert _f(f, "n_strided") == 1.0 and _f(f, "n_contiguous") == 0.0


def test_local_allocation_and_store_count():
    A = Buffer("A", "float32", (8,), Scope.PARAM)
    L = Buffer("L", "float32", (8,), Scope.LOCAL)
    i = E.Var("int32", "i")
    body = Allocate(L, seq(
        For(i, E.const(0), E.const(8), ForKind.SERIAL, Store(L, i, E.const(0.0))),
        For(i, E.const(0), E.const(8), ForKind.SERIAL,
            Store(A, i, BufferLoad("float32", L, i)))))
    f = extract_features(PrimFunc("local", (A,), body))
    assert _f(f, "log_local_bytes") == pytest.approx(np.log2(1 + 32))
    assert _f(f, "n_stores") == 2.0
    assert _f(f, "n_loops") == 2.0


def test_different_schedules_give_different_features():
    assert not np.array_equal(extract_features(_rowsum(ForKind.PARALLEL)),
                              extract_features(_rowsum(ForKind.SERIAL)))
