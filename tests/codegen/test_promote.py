"""Register promotion of accumulator tiles (schedule/passes/promote.py): the rewrite itself on
hand-built loop IR, the cases it must refuse, results against numpy, and the fix it pins:
a 6-row GEMM register tile keeps its accumulators in registers across the k loop (LLVM's own
promotion gave up from 5 rows on and stored every accumulator back every k step)."""
import re

import numpy as np
import pytest

from .cg_util import buf, load, loop
from .test_loops import blocked_matmul
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.codegen import build
from kiln.schedule.passes.promote import promote_register_tiles
from kiln.schedule.ir import Allocate, ForKind, IfThenElse, Scope, Store, seq
from kiln.schedule.lower import lower
from kiln.te import expr as E
from tests.util import knob, run_config, task_inputs

AVX2_FILE = 16 * 32   # bytes of 16 ymm registers


def _reduction(index, *, tile=(4, 8), kinds=(ForKind.UNROLLED, ForKind.VECTORIZED), k_extent=5,
               guard=None, extra_read=None):
    """acc[index(i, j, k)] += X[k] inside `for k: for i: for j:` (a hand-built update nest)."""
    acc = buf("acc", "float32", [256], Scope.LOCAL)
    X = buf("X", "float32", [k_extent])
    i, j, k = E.var("i"), E.var("j"), E.var("k")
    idx = index(i, j, k)
    value = load(acc, idx) + load(X, k)
    if extra_read is not None:
        value = value + load(acc, extra_read(i, j))
    update = Store(acc, idx, value)
    if guard is not None:
        update = IfThenElse(guard(i, j, k), update)
    nest = loop(k, k_extent, loop(i, tile[0], loop(j, tile[1], update, kinds[1]), kinds[0]))
    return Allocate(acc, nest)


def test_the_tile_gets_its_own_buffer_copied_in_before_and_out_after_the_k_loop():
    body = _reduction(lambda i, j, k: i * 8 + j)
    assert str(promote_register_tiles(body, AVX2_FILE)) == "\n".join([
        "allocate acc: float32[256] (local)",
        "allocate acc.reg: float32[32] (local)",
        "for i in unrolled(4):",
        "  for j in vectorized(8):",
        "    acc.reg[i * 8 + j] = acc[i * 8 + j]",
        "for k in range(5):",
        "  for i in unrolled(4):",
        "    for j in vectorized(8):",
        "      acc.reg[i * 8 + j] = acc.reg[i * 8 + j] + X[k]",
        "for i in unrolled(4):",
        "  for j in vectorized(8):",
        "    acc[i * 8 + j] = acc.reg[i * 8 + j]",
    ])


def test_the_register_buffer_is_dense_over_the_tile_whatever_the_strides():
    # rows 16 apart in the accumulator: the register copy packs them 8 apart
    body = _reduction(lambda i, j, k: i * 16 + j)
    text = str(promote_register_tiles(body, AVX2_FILE))
    assert "acc.reg: float32[32]" in text
    assert "acc.reg[i * 8 + j] = acc[i * 16 + j]" in text


def test_a_guard_on_the_reduction_alone_is_dropped_from_the_copies():
    body = _reduction(lambda i, j, k: i * 8 + j, guard=lambda i, j, k: k < 4)
    text = str(promote_register_tiles(body, AVX2_FILE))
    copies = [line for line in text.splitlines() if "= acc[" in line or "acc[i * 8 + j] =" in line]
    assert len(copies) == 2 and text.count("if ") == 1


def test_a_guard_on_the_tile_is_kept_in_the_copies():
    body = _reduction(lambda i, j, k: i * 8 + j, guard=lambda i, j, k: i * 8 + j < 30)
    text = str(promote_register_tiles(body, AVX2_FILE))
    assert text.count("if i * 8 + j < 30") == 3


def test_a_tile_with_a_tail_gets_a_guard_free_copy_for_the_whole_tiles():
    # 27 rows in tiles of 6: tiles 0-3 are whole, tile 4 has 3 rows
    acc = buf("acc", "float32", [30 * 8], Scope.LOCAL)
    X = buf("X", "float32", [3])
    o, i, j, k = E.var("o"), E.var("i"), E.var("j"), E.var("k")
    idx = o * 48 + i * 8 + j
    update = IfThenElse(o * 6 + i < 27, loop(j, 8, Store(acc, idx, load(acc, idx) + load(X, k)),
                                              ForKind.VECTORIZED))
    body = Allocate(acc, loop(o, 5, loop(k, 3, loop(i, 6, update, ForKind.UNROLLED))))
    lines = str(promote_register_tiles(body, AVX2_FILE)).splitlines()
    assert lines[2] == "  if o * 6 + 5 < 27:"
    split = lines.index("  else:")
    assert not any("if " in line for line in lines[3:split])      # whole tiles: no guard
    assert lines[split + 1] == "    if o * 6 < 27:"                # tiles wholly out: skipped
    assert sum("if o * 6 + i < 27" in line for line in lines[split:]) == 3


def test_a_tile_out_of_range_is_not_skipped_when_its_loop_stores_something_else():
    acc = buf("acc", "float32", [30 * 8], Scope.LOCAL)
    X, Y = buf("X", "float32", [3]), buf("Y", "float32", [5 * 3])
    o, i, j, k = E.var("o"), E.var("i"), E.var("j"), E.var("k")
    idx = o * 48 + i * 8 + j
    update = IfThenElse(o * 6 + i < 27, loop(j, 8, Store(acc, idx, load(acc, idx) + load(X, k)),
                                              ForKind.VECTORIZED))
    other = Store(Y, o * 3 + k, load(X, k))
    body = Allocate(acc, loop(o, 5, loop(k, 3, seq(other, loop(i, 6, update,
                                                                 ForKind.UNROLLED)))))
    text = str(promote_register_tiles(body, AVX2_FILE))
    assert "if o * 6 + 5 < 27:" in text and "if o * 6 < 27:" not in text


@pytest.mark.parametrize("case", [
    dict(index=lambda i, j, k: k * 32 + i * 8 + j),              # moves with the k loop
    dict(index=lambda i, j, k: i * 8 + j, extra_read=lambda i, j: i * 8 + j + 1),  # 2nd read
    dict(index=lambda i, j, k: i + j),                           # tile points collide
    dict(index=lambda i, j, k: i * 8 + j, kinds=(ForKind.SERIAL, ForKind.VECTORIZED)),
    dict(index=lambda i, j, k: i * 8 + j, guard=lambda i, j, k: i + k < 6),  # mixed guard
    dict(index=lambda i, j, k: i * 16 + j, tile=(8, 16)),        # 512 bytes: over the cap
], ids=["k-dependent", "second-read", "not-one-to-one", "dynamic-row-loop", "mixed-guard",
        "too-big"])
def test_what_cannot_be_promoted_is_left_alone(case):
    body = _reduction(**case)
    assert promote_register_tiles(body, 256) is body


def test_a_second_store_is_left_alone():
    acc = buf("acc", "float32", [8], Scope.LOCAL)
    i, k = E.var("i"), E.var("k")
    first = Store(acc, i, load(acc, i) + E.const(1.0))
    second = Store(acc, i, load(acc, i) * E.const(2.0))
    body = Allocate(acc, loop(k, 3, loop(i, 8, seq(first, second), ForKind.VECTORIZED)))
    assert promote_register_tiles(body, AVX2_FILE) is body


@pytest.mark.parametrize("tile", [(6, 8), (6, 16), (7, 8), (5, 16), (3, 24)])
def test_promoted_hand_built_matmuls_match_numpy(tile):
    M, N, K = 2 * tile[0] * 2, tile[1] * 3, 29
    kernel = build(blocked_matmul(M, N, K, ti=tile[0], tj=tile[1]))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,overrides", [
    ((96, 256, 256), {"s0/tile/0": [4, 6]}),
    ((96, 256, 256), {"s0/tile/0": [4, 6], "s0/local": 0}),          # accumulates into C
    ((90, 100, 72), {"s0/tile/0": [4, 6], "s0/reduce/0": 48}),     # M and K tails
    ((37, 67, 40), {"s0/tile/0": [2, 6], "s0/tile/1": [1, 16], "s0/reduce/0": 16}),
    ((100, 64, 48), {"s0/tile/0": [2, 6]}),                          # a 4-row tail tile
    ((64, 64, 48), {"s0/tile/0": [2, 8], "s0/unroll": 0}),           # rolled rows: not promoted
])
def test_matmul_configs_match_numpy(shape, overrides):
    task = Task.from_op("matmul", shape)
    space = SearchSpace(task)
    config = dict(space.default_config(), **overrides)
    inputs = task_inputs(task)
    a, b = (inputs[t] for t in task.args[:2])
    (c,) = run_config(task, space, config, inputs)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def _conv_nchwc_reference(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """out[n, ko, y, x, ki] = sum over (c, ry, rx, b) of x_pad[n, c, y + ry, x + rx, b] *
    w[ko, c, ry, rx, b, ki] (stride 1)."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad), (0, 0)))
    kh, kw = w.shape[2:4]
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow, w.shape[-1]), np.float64)
    for ry in range(kh):
        for rx in range(kw):
            window = xp[:, :, ry:ry + oh, rx:rx + ow, :]
            out += np.einsum("ncyxb,kcbf->nkyxf", window, w[:, :, ry, rx])
    return out


@pytest.mark.parametrize("overrides", [{}, {"window": 2}, {"tile/4": [1, 16]},
                                       {"tile/3": [1, 6]}])   # a guarded row tail
def test_blocked_conv_configs_match_numpy(overrides):
    task = Task.from_op("conv2d_nchwc", (1, 32, 7, 7, 32, 3, 3, 1, 1, 16, 16))
    space = SearchSpace(task)
    overrides = {knob(space, "conv", k): v for k, v in overrides.items()}
    config = {k: v for k, v in dict(space.default_config(), **overrides).items()
              if k in {kn.name for kn in space.knobs}}
    inputs = task_inputs(task)
    x, w = (inputs[t] for t in task.args[:2])
    (out,) = run_config(task, space, config, inputs)
    np.testing.assert_allclose(out, _conv_nchwc_reference(x, w, 1), rtol=1e-4, atol=1e-4)


def _loop_blocks(llvm_ir: str, function: str) -> list[str]:
    """Bodies of the basic blocks of `function` that branch back to themselves (innermost
    loops after LLVM's rotation and unrolling)."""
    text = llvm_ir[re.search(rf"define [^\n]*@{re.escape(function)}\(", llvm_ir).start():]
    text = text[:text.index("\n}\n")]
    blocks = re.split(r"\n(?=[\w.\"-]+:)", text)
    return [b for b in blocks
            if re.search(r"label %\"?" + re.escape(b.split(":")[0].strip('"')) + r"\"?\b", b)]


def test_a_six_row_gemm_tile_keeps_its_accumulators_in_registers():
    task = Task.from_op("matmul", (96, 256, 256))
    space = SearchSpace(task)
    config = dict(space.default_config(), **{"s0/tile/0": [4, 6], "s0/tile/1": [4, 16],
                                             "s0/local": 1, "s0/unroll": 1, "s0/parallel": 2})
    sch, args = space.apply(config)
    kernel = build(lower(sch, args, name="mm6"))
    ir = kernel.llvm_ir()
    outlined = re.findall(r"define internal void @(mm6__par\d+)\(", ir)
    k_loops = [b for name in outlined for b in _loop_blocks(ir, name)
               if b.count("fmul") >= 6]
    assert k_loops, "no k loop with the tile's 6 multiply-adds found"
    for block in k_loops:
        assert " store " not in block, block


def test_a_unit_loop_with_the_rows_coefficient_does_not_stop_the_promotion():
    # x[M, 1, K] @ W: the unit axis between the rows and the vector indexes the accumulator
    # with the rows' stride; a loop of extent 1 adds no point, so the tile is still one-to-one
    acc = buf("acc", "float32", [256], Scope.LOCAL)
    X = buf("X", "float32", [5])
    i, u, j, k = E.var("i"), E.var("u"), E.var("j"), E.var("k")
    idx = i * 8 + u * 8 + j
    update = Store(acc, idx, load(acc, idx) + load(X, k))
    nest = loop(k, 5, loop(i, 4, loop(u, 1, loop(j, 8, update, ForKind.VECTORIZED),
                                      ForKind.SERIAL), ForKind.UNROLLED))
    text = str(promote_register_tiles(Allocate(acc, nest), AVX2_FILE))
    assert "acc.reg: float32[32]" in text
    assert "acc.reg[i * 8 + u * 8 + j] = acc.reg[i * 8 + u * 8 + j] + X[k]" in text


def test_a_matmul_over_m_1_k_rows_matches_numpy_with_its_tile_promoted():
    # the rows on axis 0 and a unit axis before the columns (ViT's seq-first linears)
    from kiln import te
    from kiln.te import ops
    a = te.placeholder((13, 1, 24), "float32", "A")
    p = te.placeholder((3, 24, 16), "float32", "P")
    c = ops.matmul_prepacked(a, p, 40, name="C")
    task = Task("mmp", (c,), (a, p, c))
    space = SearchSpace(task)
    config = dict(space.default_config(), **{"s0/tile/0": [2, 6], "s0/unroll": 1,
                                             "s0/local": 1})
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (13, 1, 24)).astype(np.float32)
    w = rng.uniform(-1, 1, (24, 40)).astype(np.float32)
    got = run_config(task, space, config, {a: x, p: ops.pack_matmul_weight(w, 16)})[0]
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)
    func = lower(*space.apply(config), name="mmu")
    assert ".reg" not in str(func.body)
    assert ".reg[" in str(promote_register_tiles(func.body, AVX2_FILE))
