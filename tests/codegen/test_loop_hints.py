"""Loop hints (codegen/loop_hints.py): the zeroing and copy-out loops around an accumulation
get `llvm.loop.unroll.disable`, the accumulation and injective kernels do not. The choice on
hand-built loop IR, the metadata in the emitted module, and compiled kernels with awkward
shapes (1, primes, non-multiples of 8) against numpy: hints must never change a result."""
import re

import numpy as np
import pytest

from .cg_util import buf, elementwise, load, loop
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.codegen import Target, build
from kiln.codegen import loop_hints
from kiln.codegen.emit_module import emit_module, fastmath_flags
from kiln.schedule.ir import Allocate, ForKind, IfThenElse, PrimFunc, Scope, Store, seq
from kiln.schedule.lower import lower
from kiln.te import expr as E
from tests.util import run_config, task_inputs

RNG = np.random.default_rng(11)
HINT = '!"llvm.loop.unroll.disable"'


def _emitted(func: PrimFunc) -> str:
    return str(emit_module(func, Target.from_string("native"), fastmath_flags(("contract",)),
                           parallel="serial"))


def _latches_with_hint(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.lstrip().startswith("br ")
               and "!llvm.loop" in line)


def _acc_matmul(M: int, N: int, K: int, ti: int = 4):
    """C = relu(A @ B) with a LOCAL accumulator per tile of `ti` rows: zero it (init),
    accumulate over K (update), copy out with the epilogue (out); rows guarded."""
    A, B, C = buf("A", "float32", [M, K]), buf("B", "float32", [K, N]), buf("C", "float32", [M, N])
    CL = buf("C.local", "float32", [ti, N], Scope.LOCAL)
    io, k = E.var("i.outer"), E.var("k")

    def tile(make):
        ii, j = E.var("i.inner"), E.var("j")
        return loop(ii, ti, IfThenElse(io * ti + ii < M, loop(j, N, make(ii, j))))

    init = tile(lambda ii, j: Store(CL, ii * N + j, E.const(0.0)))
    update = loop(k, K, tile(lambda ii, j: Store(
        CL, ii * N + j,
        load(CL, ii * N + j) + load(A, (io * ti + ii) * K + k) * load(B, k * N + j))))
    out = tile(lambda ii, j: Store(C, (io * ti + ii) * N + j,
                                   E.maximum(load(CL, ii * N + j), E.const(0.0))))
    func = PrimFunc("acc_matmul", (A, B, C),
                    loop(io, -(-M // ti), Allocate(CL, seq(init, update, out))))
    return func, (init, update, out)


def test_zeroing_and_copy_out_are_cold_the_accumulation_is_not():
    func, (init, update, out) = _acc_matmul(13, 8, 37)
    cold = loop_hints.cold_loops(func.body)
    assert init in cold and out in cold and init.body.then_case in cold
    # outer loops of the accumulation: the tile loop (4 tiles) and the row loop inside k;
    # k (37 > MAX_OUTER_EXTENT) and the innermost (columns) stay LLVM's to unroll
    assert func.body in cold and update.body in cold
    assert update not in cold and update.body.body.then_case not in cold
    assert len(cold) == 6

def test_outer_loops_of_an_accumulation_are_hinted_the_innermost_are_not():
    # for i: for k.outer: for k.inner: acc[i] += ...  -> k.outer (and i) hinted, k.inner not
    x, acc = buf("x", "float32", [5 * 6 * 4]), buf("acc", "float32", [5])
    i, ko, ki = E.var("i"), E.var("k.outer"), E.var("k.inner")
    inner = loop(ki, 4, Store(acc, i, load(acc, i) + load(x, i * 24 + ko * 4 + ki)))
    middle = loop(ko, 6, inner)
    outer = loop(i, 5, middle)
    assert loop_hints.outer_loops(outer) == {outer, middle}
    # an injective nest is never hinted, however deep
    y = buf("y", "float32", [5 * 6 * 4])
    copy = loop(i, 5, loop(ko, 6, loop(ki, 4, Store(y, i * 24 + ko * 4 + ki, load(x, i)))))
    assert not loop_hints.outer_loops(copy) and not loop_hints.cold_loops(copy)


def test_cold_mode_keeps_the_outer_loops_unhinted(monkeypatch):
    func, (init, update, out) = _acc_matmul(13, 8, 37)
    assert update.body in loop_hints.cold_loops(func.body)   # the row loop holds j
    monkeypatch.setenv("KILN_LOOP_HINTS", "cold")
    cold = loop_hints.cold_loops(func.body)
    assert update.body not in cold and init in cold and out in cold


def test_long_outer_loops_are_left_to_llvm():
    x, acc = buf("x", "float32", [40 * 4]), buf("acc", "float32", [1])
    ko, ki = E.var("k.outer"), E.var("k.inner")
    nest = loop(ko, 40, loop(ki, 4, Store(acc, E.const(0), load(acc, 0) + load(x, ko * 4 + ki))))
    assert not loop_hints.outer_loops(nest)


def test_a_copy_out_as_long_as_its_accumulation_stays_hot():
    # K = 2: the zeroing and copy-out run half as often as the update (< COLD_RATIO)
    func, (init, update, out) = _acc_matmul(13, 8, 2)
    cold = loop_hints.cold_loops(func.body)
    assert init not in cold and out not in cold


def test_softmax_like_normalisation_is_not_cold():
    # row max (an accumulation over n), then out = x - max over the same n: equal work
    n = 37
    x, m, o = buf("x", "float32", [n]), buf("m", "float32", [1]), buf("o", "float32", [n])
    i, j = E.var("i"), E.var("j")
    body = seq(Store(m, E.const(0), E.const(-1e30)),
               loop(i, n, Store(m, E.const(0), E.maximum(load(m, 0), load(x, i)))),
               loop(j, n, Store(o, j, load(x, j) - load(m, 0))))
    assert not loop_hints.cold_loops(body)


def test_an_injective_kernel_gets_no_metadata():
    func = elementwise("add1", 29, [buf("a", "float32", [29])], buf("b", "float32", [29]),
                       lambda a: a + E.const(1.0), kind=ForKind.SERIAL)
    assert not loop_hints.cold_loops(func.body)
    text = _emitted(func)
    assert HINT not in text and _latches_with_hint(text) == 0


def test_the_metadata_is_on_the_cold_latches_only():
    func, _ = _acc_matmul(13, 8, 37)
    text = _emitted(func)
    assert HINT in text
    # emission (register promotion, tail splitting) may copy a loop: at least the 6 hinted
    # loops' latches carry the hint, and the innermost accumulating loops' do not
    loops = len(re.findall(r"^for\.end[.\d]*:", text, re.M))
    assert 6 <= _latches_with_hint(text) < loops
    # one loop id per module, whose first operand is itself (LLVM ignores it otherwise)
    ids = re.findall(r"^(!\d+) = !\{ (!\d+), (!\d+) \}$", text, re.M)
    assert len(ids) == 1 and ids[0][0] == ids[0][1]


def test_the_switch_turns_the_metadata_off(monkeypatch):
    func, _ = _acc_matmul(13, 8, 37)
    monkeypatch.setenv("KILN_LOOP_HINTS", "0")
    text = _emitted(func)
    assert HINT not in text and _latches_with_hint(text) == 0


@pytest.mark.parametrize("M,N,K", [(1, 8, 11), (7, 8, 13), (13, 5, 17), (29, 3, 1)])
def test_hinted_hand_built_kernels_match_numpy(M, N, K):
    func, _ = _acc_matmul(M, N, K)
    kernel = build(func, cache_kernel=False)
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,shape,hinted", [
    ("matmul", (1, 7, 13), False),        # one register tile, all unrolled: no LLVM loop
    ("matmul", (13, 17, 29), True), ("matmul", (37, 24, 5), True),
    ("conv2d_nchwc", (1, 16, 7, 7, 16, 3, 3, 1, 1, 16, 16), True),
    ("conv2d_nchwc", (1, 16, 13, 11, 32, 1, 1, 2, 0, 16, 16), True)])
def test_default_schedules_with_hints_match_numpy(op, shape, hinted):
    # AVX2 schedules (whose register tiles the `hinted` column describes), run on this CPU
    task = Task.from_op(op, shape, target="llvm -mcpu=haswell")
    space = SearchSpace(task)
    config = space.default_config()
    sch, args = space.apply(config)
    func = lower(sch, args, name="k")
    assert (HINT in _emitted(func)) == hinted
    inputs = task_inputs(task)
    (out,) = run_config(task, space, config, inputs)
    a, b = (inputs[t].astype(np.float64) for t in task.args[:2])
    if op == "matmul":
        ref = a @ b
    else:
        stride, pad = shape[7], shape[8]
        kh, kw = shape[5], shape[6]
        xp = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad), (0, 0)))
        oh, ow = out.shape[2], out.shape[3]
        ref = np.zeros(out.shape, np.float64)
        for ry in range(kh):
            for rx in range(kw):
                win = xp[:, :, ry:ry + stride * oh:stride, rx:rx + stride * ow:stride]
                ref += np.einsum("ncyxb,kcbf->nkyxf", win, b[:, :, ry, rx])
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
