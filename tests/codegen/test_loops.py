"""Loop nests: register-blocked matmul (LOCAL tile, UNROLLED, VECTORIZED), PARALLEL loops,
allocation on stack and heap."""
import numpy as np
import pytest

from .cg_util import buf, load, loop, rand
from kiln.codegen import build
from kiln.schedule.ir import For, Allocate, ForKind, PrimFunc, Scope, Store, seq
from kiln.te import expr as E
from kiln.te.errors import CodegenError

RNG = np.random.default_rng(2)


def blocked_matmul(M, N, K, ti=4, tj=8, outer=ForKind.SERIAL, name="matmul"):
    """C = A @ B with a ti x tj LOCAL accumulator tile held across the k loop."""
    A, B = buf("A", "float32", [M, K]), buf("B", "float32", [K, N])
    C = buf("C", "float32", [M, N])
    CL = buf("C.local", "float32", [ti, tj], Scope.LOCAL)
    io, jo, k = E.var("i.outer"), E.var("j.outer"), E.var("k")

    def tile(make):
        ii, ji = E.var("i.inner"), E.var("j.inner")
        return loop(ii, ti, loop(ji, tj, make(ii, ji), ForKind.VECTORIZED), ForKind.UNROLLED)

    row = lambda ii: io * ti + ii  # noqa: E731
    col = lambda ji: jo * tj + ji  # noqa: E731
    init = tile(lambda ii, ji: Store(CL, ii * tj + ji, E.const(0.0)))
    update = loop(k, K, tile(lambda ii, ji: Store(
        CL, ii * tj + ji,
        load(CL, ii * tj + ji) + load(A, row(ii) * K + k) * load(B, k * N + col(ji)))))
    out = tile(lambda ii, ji: Store(C, row(ii) * N + col(ji), load(CL, ii * tj + ji)))
    body = loop(io, M // ti, loop(jo, N // tj, Allocate(CL, seq(init, update, out))), outer)
    return PrimFunc(name, (A, B, C), body)


@pytest.mark.parametrize("fastmath", [False, True])
def test_register_blocked_matmul(fastmath):
    M, N, K = 32, 48, 27
    k = build(blocked_matmul(M, N, K), fastmath=fastmath)
    a, b = rand((M, K), "float32", RNG, -1, 1), rand((K, N), "float32", RNG, -1, 1)
    c = np.zeros((M, N), np.float32)
    k(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)
    # the tile lives in registers: SROA removed the alloca
    assert "alloca" not in k.llvm_ir()


@pytest.mark.parametrize("runtime", ["kiln", "gomp"])
@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_matmul_equal_for_thread_counts(threads, runtime, monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", str(threads))
    monkeypatch.setenv("KILN_PARALLEL_RUNTIME", runtime)
    M, N, K = 28, 16, 9   # 7 parallel iterations: not a multiple of the thread count
    k = build(blocked_matmul(M, N, K, outer=ForKind.PARALLEL))
    assert k.num_threads == threads
    assert ("GOMP_parallel" in k.llvm_ir()) == (runtime == "gomp")
    assert ("__parallel_for" in k.llvm_ir()) == (runtime == "kiln")
    a, b = rand((M, K), "float32", RNG, -1, 1), rand((K, N), "float32", RNG, -1, 1)
    c = np.zeros((M, N), np.float32)
    k(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)
    k.set_num_threads(3 - threads)
    c2 = np.zeros_like(c)
    k(a, b, c2)
    np.testing.assert_array_equal(c, c2)


@pytest.mark.parametrize("extent", [1, 2, 5])
def test_parallel_inner_loop_captures_outer_variable_and_allocates(extent):
    # for r: for p in parallel(extent): allocate T[4]; T[q] = A[r, p] * q; B[r, p] = sum T
    R = 3
    A, B = buf("A", "float32", [R, extent]), buf("B", "float32", [R, extent])
    T = buf("T", "float32", [4], Scope.LOCAL)
    r, p, q, s = E.var("r"), E.var("p"), E.var("q"), E.var("s")
    idx = r * extent + p
    fill = loop(q, 4, Store(T, q, load(A, idx) * E.cast(q, "float32")))
    reduce = seq(Store(B, idx, E.const(0.0)),
                 loop(s, 4, Store(B, idx, load(B, idx) + load(T, s))))
    body = loop(r, R, loop(p, extent, Allocate(T, seq(fill, reduce)), ForKind.PARALLEL))
    a, b = rand((R, extent), "float32", RNG), np.zeros((R, extent), np.float32)
    build(PrimFunc("cap", (A, B), body))(a, b)
    np.testing.assert_allclose(b, a * 6, rtol=1e-6)


def test_nested_parallel_is_rejected():
    A = buf("A", "float32", [4, 4])
    i, j = E.var("i"), E.var("j")
    body = loop(i, 4, loop(j, 4, Store(A, i * 4 + j, E.const(1.0)), ForKind.PARALLEL),
                ForKind.PARALLEL)
    with pytest.raises(CodegenError, match=r"nested PARALLEL loop 'j'.*make the inner loop serial"):
        build(PrimFunc("nest", (A,), body))


def test_large_global_buffer_goes_to_heap():
    n = 100_000   # 400 KB > the 256 KiB stack limit
    A, C = buf("A", "float32", [n]), buf("C", "float32", [n])
    T = buf("T", "float32", [n], Scope.GLOBAL)
    i, j = E.var("i"), E.var("j")
    body = Allocate(T, seq(loop(i, n, Store(T, i, load(A, n - 1 - i))),
                           loop(j, n, Store(C, j, load(T, j) + 1.0))))
    k = build(PrimFunc("rev", (A, C), body))
    assert "aligned_alloc" in k.llvm_ir()
    a, c = rand(n, "float32", RNG), np.zeros(n, np.float32)
    k(a, c)
    np.testing.assert_array_equal(c, a[::-1] + 1)


def test_unrolled_loop_with_symbolic_min_and_serial_fallback():
    # UNROLLED with a non-constant extent falls back to a serial loop
    n = 10
    A = buf("A", "int32", [n, n])
    i, j = E.var("i"), E.var("j")
    body = loop(i, n, For(j, i, E.const(n) - i, ForKind.UNROLLED, Store(A, i * n + j, i + j)))
    a = np.zeros((n, n), np.int32)
    build(PrimFunc("tri", (A,), body))(a)
    ii, jj = np.indices((n, n))
    np.testing.assert_array_equal(a, np.where(jj >= ii, ii + jj, 0))


def test_unbound_variable_and_unknown_buffer_errors():
    A, X = buf("A", "float32", [4]), buf("X", "float32", [4])
    i, free = E.var("i"), E.var("free")
    with pytest.raises(CodegenError, match=r"variable 'free' is used outside the loop"):
        build(PrimFunc("bad", (A,), loop(i, 4, Store(A, i + free, E.const(1.0)))))
    with pytest.raises(CodegenError, match=r"buffer 'X' is used but is neither a parameter"):
        build(PrimFunc("bad", (A,), loop(i, 4, Store(A, i, load(X, i)))))
