"""Tail splitting (schedule/passes/tails.py): a guarded tile loop becomes a whole-tile copy and one
tail copy of constant extent. The rewrite on hand-built loop IR, the loops it must leave
alone, and compiled kernels with awkward extents (1, 7, 13, 17) against numpy, including
register-promoted tiles whose tail it specialises."""
import numpy as np
import pytest

from .cg_util import buf, load, loop
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.codegen import build
from kiln.schedule.passes.promote import promote_register_tiles
from kiln.schedule.passes.tails import MIN_COPIES_TO_SPLIT_VECTORS, split_tails
from kiln.schedule.ir import Allocate, ForKind, IfThenElse, PrimFunc, Scope, Store, seq
from kiln.te import expr as E
from tests.util import knob, run_config, task_inputs

RNG = np.random.default_rng(7)


def _rows(n_total: int, tile: int, lanes: int = 8, kind=ForKind.UNROLLED, levels: int = 1):
    """out[r, :] = 2 * x[r, :] + 1 over `n_total` rows in tiles of `tile` rows, the tile
    guarded per row; with levels=2 the tile base is o * 2 * tile + m * tile (two loops)."""
    x = buf("x", "float32", [n_total * lanes])
    out = buf("out", "float32", [n_total * lanes])
    o, m, t, j = E.var("o"), E.var("m"), E.var("t"), E.var("j")
    if levels == 1:
        row = o * tile + t
        wrap = lambda body: loop(o, -(-n_total // tile), body)   # noqa: E731
    else:
        row = o * (2 * tile) + m * tile + t
        wrap = lambda body: loop(o, -(-n_total // (2 * tile)), loop(m, 2, body))  # noqa: E731
    index = row * lanes + j
    store = Store(out, index, load(x, index) * E.const(2.0) + E.const(1.0))
    body = loop(t, tile, IfThenElse(row < n_total, loop(j, lanes, store, ForKind.VECTORIZED)),
                kind)
    return PrimFunc("rows", (x, out), wrap(body))


def test_a_guarded_tile_becomes_a_whole_copy_and_a_constant_tail():
    text = str(split_tails(_rows(28, 6).body))
    lines = text.splitlines()
    assert lines[1] == "  if o * 6 + 5 < 28:"
    assert lines[2] == "    for t in unrolled(6):"
    assert "    if o * 6 < 28:" in lines
    assert "      for t in unrolled(4):" in lines
    assert "< 28" not in "".join(line for line in lines if line.startswith("        "))


def test_a_two_level_base_has_one_tail_too():
    text = str(split_tails(_rows(28, 6, levels=2).body))
    assert "for t in unrolled(4):" in text and text.count("for t in unrolled(6):") == 1


def test_tiles_that_divide_have_no_tail_copy():
    # the guard stays (o may run past 24 rows), but no tile is ever partial
    func = _rows(24, 6)
    body = split_tails(func.body)
    text = str(body)
    assert "unrolled(6)" in text and text.count("for t in") == 1 and "else" not in text


@pytest.mark.parametrize("case", ["long-serial", "coefficient", "else", "mixed"])
def test_what_cannot_be_split_is_left_alone(case):
    o, t, j = E.var("o"), E.var("t"), E.var("j")
    x = buf("x", "float32", [256])
    store = Store(x, o * 8 + t, E.const(1.0))
    if case == "long-serial":
        nest = loop(o, 2, loop(t, 100, IfThenElse(o * 100 + t < 150, Store(
            x, o * 100 + t, E.const(1.0))), ForKind.SERIAL))
    elif case == "coefficient":           # base o * 5 is not a multiple of the tile (6)
        nest = loop(o, 5, loop(t, 6, IfThenElse(o * 5 + t < 27, store), ForKind.UNROLLED))
    elif case == "else":
        nest = loop(o, 5, loop(t, 6, IfThenElse(o * 6 + t < 27, store, store),
                               ForKind.UNROLLED))
    else:                                 # the tile variable twice in one term
        nest = loop(o, 5, loop(t, 6, IfThenElse(o * 6 + t * 2 < 27, store), ForKind.UNROLLED))
    assert split_tails(nest) is nest


def test_a_decided_branch_keeps_only_its_copy():
    o, t = E.var("o"), E.var("t")
    x = buf("x", "float32", [64])
    tile = loop(t, 6, IfThenElse(o * 6 + t < 28, Store(x, o * 6 + t, E.const(1.0))),
                ForKind.UNROLLED)
    nest = loop(o, 5, IfThenElse(o * 6 + 5 < 28, tile, tile))
    text = str(split_tails(nest))
    assert text.count("unrolled(6)") == 1 and text.count("unrolled(4)") == 1


@pytest.mark.parametrize("n_total", [1, 7, 13, 17, 28])
@pytest.mark.parametrize("tile,kind,levels", [(6, ForKind.UNROLLED, 1), (4, ForKind.SERIAL, 1),
                                              (6, ForKind.UNROLLED, 2)])
def test_split_kernels_match_numpy(n_total, tile, kind, levels):
    func = _rows(n_total, tile, kind=kind, levels=levels)
    kernel = build(func)
    x = RNG.standard_normal(n_total * 8).astype(np.float32)
    out = np.full(n_total * 8, np.nan, np.float32)
    kernel(x, out)
    np.testing.assert_array_equal(out, x * np.float32(2) + np.float32(1))


def _tail_matmul(M: int, N: int, K: int, ti: int):
    """C = A @ B, rows in guarded tiles of `ti` with a LOCAL accumulator: register promotion
    plus tail splitting give a whole-tile and a constant-tail register tile."""
    A, B, C = buf("A", "float32", [M, K]), buf("B", "float32", [K, N]), buf("C", "float32", [M, N])
    CL = buf("C.local", "float32", [ti, N], Scope.LOCAL)
    io, k = E.var("i.outer"), E.var("k")

    def tile(make):
        ii, j = E.var("i.inner"), E.var("j")
        return loop(ii, ti, IfThenElse(io * ti + ii < M, loop(j, N, make(ii, j),
                                                              ForKind.VECTORIZED)),
                    ForKind.UNROLLED)

    init = tile(lambda ii, j: Store(CL, ii * N + j, E.const(0.0)))
    update = loop(k, K, tile(lambda ii, j: Store(
        CL, ii * N + j, load(CL, ii * N + j) + load(A, (io * ti + ii) * K + k) * load(B, k * N + j))))
    out = tile(lambda ii, j: Store(C, (io * ti + ii) * N + j, load(CL, ii * N + j)))
    return PrimFunc("tail_matmul", (A, B, C),
                    loop(io, -(-M // ti), Allocate(CL, seq(init, update, out))))


@pytest.mark.parametrize("M", [1, 7, 13, 17])
def test_promoted_tiles_with_tails_match_numpy(M):
    func = _tail_matmul(M, 8, 11, 6)
    promoted = split_tails(promote_register_tiles(func.body, 16 * 32))
    if M % 6:
        assert f"for i.inner in unrolled({M % 6}):" in str(promoted)
    kernel = build(func)
    a = RNG.standard_normal((M, 11)).astype(np.float32)
    b = RNG.standard_normal((11, 8)).astype(np.float32)
    c = np.full((M, 8), np.nan, np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("width", [7, 13, 17])
def test_blocked_convs_with_row_tails_match_numpy(width):
    task = Task.from_op("conv2d_nchwc", (1, 16, width, width, 16, 3, 3, 1, 1, 16, 16))
    space = SearchSpace(task)
    config = dict(space.default_config(), **{knob(space, "conv", "tile/3"): [1, 6]})
    config = {k: v for k, v in config.items() if k in {kn.name for kn in space.knobs}}
    inputs = task_inputs(task)
    x, w = (inputs[t] for t in task.args[:2])
    (out,) = run_config(task, space, config, inputs)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.zeros(out.shape, np.float64)
    for ry in range(3):
        for rx in range(3):
            ref += np.einsum("ncyxb,kcbf->nkyxf", xp[:, :, ry:ry + width, rx:rx + width],
                             w[:, :, ry, rx])
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_a_branch_on_memory_is_not_taken_as_decided():
    # A[0] may be stored between the two tests: the inner test must stay
    o = E.var("o")
    a = buf("A", "int32", [4])
    cond = load(a, 0) < 5
    inner = IfThenElse(cond, Store(a, E.const(1), E.const(1)), Store(a, E.const(2), E.const(2)))
    nest = loop(o, 2, IfThenElse(cond, seq(Store(a, E.const(0), E.const(9)), inner)))
    assert str(split_tails(nest)).count("if A[0] < 5") == 2


def _columns(n_total: int, lanes: int = 8, copies: int = MIN_COPIES_TO_SPLIT_VECTORS):
    """out[c] += 2 * x[c] + 1 over `n_total` columns in vectors of `lanes`, each lane
    guarded, `copies` times in an unrolled loop: the vector tail of a width that is not a
    multiple of the vector (a conv's 19 pixels) inside a register tile's unrolled taps."""
    x, out = buf("x", "float32", [n_total]), buf("out", "float32", [n_total])
    o, r, j = E.var("o"), E.var("r"), E.var("j")
    col = o * lanes + j
    body = loop(j, lanes, IfThenElse(col < n_total, Store(
        out, col, load(out, col) + load(x, col) * E.const(2.0) + E.const(1.0))),
        ForKind.VECTORIZED)
    return PrimFunc("cols", (x, out), loop(o, -(-n_total // lanes),
                                           loop(r, copies, body, ForKind.UNROLLED)))


def test_a_guarded_vector_becomes_a_whole_vector_and_a_narrow_tail():
    text = str(split_tails(_columns(19).body))
    assert "vectorized(8)" in text and "vectorized(3)" in text and "j < 19" not in text


def test_a_guarded_vector_in_few_unrolled_copies_keeps_its_mask():
    func = _columns(19, copies=MIN_COPIES_TO_SPLIT_VECTORS // 2)
    assert split_tails(func.body, masked_vector_tails=True) is func.body


def test_without_masked_vectors_every_guarded_vector_is_split():
    """A partial vector that codegen would run lane by lane is split whatever the copies."""
    for copies in (1, 2):
        text = str(split_tails(_columns(19, copies=copies).body))
        assert "vectorized(8)" in text and "vectorized(3)" in text and "j < 19" not in text


@pytest.mark.parametrize("n_total", [1, 3, 8, 19, 23])
def test_split_vector_tails_match_numpy(n_total):
    kernel = build(_columns(n_total))
    x = RNG.standard_normal(n_total).astype(np.float32)
    out = np.zeros(n_total, np.float32)
    kernel(x, out)
    want = np.zeros(n_total, np.float32)
    for _ in range(MIN_COPIES_TO_SPLIT_VECTORS):
        want += x * np.float32(2) + np.float32(1)
    np.testing.assert_allclose(out, want, rtol=1e-6)
