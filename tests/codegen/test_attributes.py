"""Kernel functions carry "no-builtin-memcpy": with i64 element offsets LLVM's loop idiom pass
would otherwise turn copy loops into memcpy calls (the max pool's stack-buffer copies ran 0.77x
as library calls)."""
import numpy as np
import pytest

from .cg_util import buf, load, loop, rand
from kiln.codegen import build
from kiln.codegen.emit_expr import WIDE_ADDRESSES
from kiln.schedule.ir import ForKind, PrimFunc, Store, seq
from kiln.te import expr as E

RNG = np.random.default_rng(5)


def copy_twice(n, kind=ForKind.SERIAL):
    """B = A, then C = B + 1: two plain copy-shaped loops over n elements."""
    A, B, C = buf("A", "float32", [n]), buf("B", "float32", [n]), buf("C", "float32", [n])
    i, j = E.var("i"), E.var("j")
    body = seq(loop(i, n, Store(B, i, load(A, i)), kind),
               loop(j, n, Store(C, j, load(B, j) + E.const(1.0)), kind))
    return PrimFunc("copy_twice", (A, B, C), body)


@pytest.mark.parametrize("n", [1, 13, 1031])
@pytest.mark.parametrize("kind", [ForKind.SERIAL, ForKind.PARALLEL])
def test_copy_loops_stay_loops(n, kind):
    k = build(copy_twice(n, kind), cache_kernel=False)
    a = rand((n,), "float32", RNG, -1, 1)
    b, c = np.zeros(n, np.float32), np.zeros(n, np.float32)
    k(a, b, c)
    np.testing.assert_array_equal(b, a)
    np.testing.assert_array_equal(c, a + np.float32(1))
    ir_text = k.llvm_ir()
    assert "memcpy" not in ir_text.replace('"no-builtin-memcpy"', "")
    assert '"no-builtin-memcpy"' in ir_text


def test_wide_addresses_are_on_by_default():
    # back on once the O3 hang on a random graph's reduce_max was traced to a unit parallel
    # loop (tests/codegen/test_compile_time.py)
    assert WIDE_ADDRESSES is True
