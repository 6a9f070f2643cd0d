"""A vector loop's partial tail (`if lane < n`) as one masked vector statement
(codegen/masked_tail.py): results against numpy at awkward extents, no write past the guard,
the scalar fallback for statements it cannot prove safe, and the plan's rules."""
import numpy as np
import pytest

from .cg_util import buf, load, loop
from kiln.codegen import Target, build
from kiln.codegen.masked_tail import plan
from kiln.schedule.ir import Allocate, ForKind, IfThenElse, PrimFunc, Scope, Store, seq
from kiln.te import expr as E

RNG = np.random.default_rng(3)
LANES = Target.native().vector_bits // 32
MASKED = "avx" in " ".join(sorted(Target.native().features))


def _scale(n: int, room: int, lanes: int = LANES) -> PrimFunc:
    """out[i] = 3 * x[i] + 1 for i < n over vectors of `lanes`; out has `room` extra
    elements past n that the kernel must leave alone."""
    x = buf("x", "float32", [n])
    out = buf("out", "float32", [n + room])
    io, ii = E.var("io"), E.var("ii")
    i = io * lanes + ii
    store = Store(out, i, load(x, i) * E.const(3.0) + E.const(1.0))
    body = loop(io, -(-n // lanes), loop(ii, lanes, IfThenElse(i < n, store),
                                         ForKind.VECTORIZED))
    return PrimFunc("scale", (x, out), body)


@pytest.mark.parametrize("n", [1, 3, LANES - 1, LANES + 1, 2 * LANES + 7, 61])
def test_tail_matches_numpy_and_writes_nothing_past_the_guard(n):
    k = build(_scale(n, room=LANES))
    x = RNG.standard_normal(n).astype(np.float32)
    out = np.full(n + LANES, 123.0, np.float32)
    k(x, out)
    np.testing.assert_allclose(out[:n], 3 * x + 1, rtol=1e-6, atol=1e-6)
    assert (out[n:] == 123.0).all()
    if MASKED and n % LANES:
        assert "llvm.masked.store" in k.llvm_ir() and "llvm.masked.load" in k.llvm_ir()


def test_a_gather_keeps_the_scalar_lanes():
    """x read at 5*i (stride 5, wider than a span read: codegen/emit_expr.STRIDED_MAX): no
    masked form; still correct."""
    n = LANES + 3
    x2, out2 = buf("x", "float32", [5 * n]), buf("out", "float32", [n])
    io, ii = E.var("io"), E.var("ii")
    i = io * LANES + ii
    store = Store(out2, i, load(x2, i * 5) * E.const(3.0) + E.const(1.0))
    f = PrimFunc("gather", (x2, out2), loop(io, -(-n // LANES), loop(
        ii, LANES, IfThenElse(i < n, store), ForKind.VECTORIZED)))
    k = build(f)
    x = RNG.standard_normal(5 * n).astype(np.float32)
    out = np.zeros(n, np.float32)
    k(x, out)
    np.testing.assert_allclose(out, 3 * x[::5] + 1, rtol=1e-6, atol=1e-6)
    assert "llvm.masked.store" not in k.llvm_ir()


def test_plan_rules():
    ii, r = E.var("ii"), E.var("r")
    acc = buf("acc", "float32", [4 * 16], Scope.LOCAL)
    odd = buf("odd", "float32", [4 * 16 + 3], Scope.LOCAL)
    w = buf("w", "float32", [64])
    both = Store(acc, r * 16 + ii, load(acc, r * 16 + ii) + load(w, r * 16 + ii))
    # an aligned stack tile stays plain, the argument is masked
    assert plan(both, ii, E.const(0), 16) == frozenset({acc})
    # a stack buffer whose size is not whole vectors is masked too
    assert plan(Store(odd, r * 16 + ii, load(w, ii)), ii, E.const(0), 16) == frozenset()
    # a row stride that is not a multiple of the lanes: the tile is not whole vectors
    assert plan(Store(acc, r * 8 + ii, load(w, ii)), ii, E.const(0), 16) == frozenset()
    # a strided store, a division by a variable, an else-less sequence with a loop: no plan
    assert plan(Store(acc, ii * 2, load(w, ii)), ii, E.const(0), 16) is None
    idx = buf("idx", "int32", [64])
    assert plan(Store(idx, ii, E.floordiv(load(idx, ii), r + 1)), ii, E.const(0), 16) is None
    assert plan(seq(both, both), ii, E.const(0), 16) == frozenset({acc})


def test_register_tile_with_a_tail_accumulates_in_masked_vectors():
    """acc[r, :] (a LOCAL tile of whole vectors) += x[k] * w[k, :] over a 16-lane panel of
    which the guard keeps `cols`: out matches numpy, past-the-guard lanes of out untouched."""
    rows, cols, depth = 3, 11, 5
    x = buf("x", "float32", [rows * depth])
    w = buf("w", "float32", [depth * 16])
    out = buf("out", "float32", [rows * 16])
    acc = buf("acc", "float32", [rows * 16], Scope.LOCAL)
    r, k, j = E.var("r"), E.var("k"), E.var("j")
    vec = lambda body: loop(j, 16, IfThenElse(j < cols, body), ForKind.VECTORIZED)  # noqa
    body = Allocate(acc, seq(
        loop(r, rows, vec(Store(acc, r * 16 + j, E.const(0.0)))),
        loop(k, depth, loop(r, rows, vec(Store(acc, r * 16 + j, load(acc, r * 16 + j)
                                                + load(x, r * depth + k) * load(w, k * 16 + j))))),
        loop(r, rows, vec(Store(out, r * 16 + j, load(acc, r * 16 + j))))))
    kern = build(PrimFunc("tile", (x, w, out), body))
    xv = RNG.standard_normal(rows * depth).astype(np.float32)
    wv = RNG.standard_normal(depth * 16).astype(np.float32)
    ov = np.full(rows * 16, 7.0, np.float32)
    kern(xv, wv, ov)
    want = xv.reshape(rows, depth) @ wv.reshape(depth, 16)
    got = ov.reshape(rows, 16)
    np.testing.assert_allclose(got[:, :cols], want[:, :cols], rtol=1e-5, atol=1e-5)
    assert (got[:, cols:] == 7.0).all()
