"""PARALLEL loop bodies keep their buffers' noalias (codegen/parallel.py): the outlined body
calls an alwaysinline loop function whose buffer arguments are noalias, so LLVM hoists loads
out of the loop past the body's stores; and parallel kernels stay exact at 1 and 2 threads,
on Kiln's pool and libgomp, whatever the shapes and schedules."""
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

import kiln
from .cg_util import buf, load, loop, rand
from kiln.codegen import build
from kiln.codegen.runtime import backend, gomp_available
from kiln.schedule.ir import Allocate, ForKind, IfThenElse, PrimFunc, Scope, Store, seq
from kiln.te import expr as E
from tests.strategies import scheduled
from tests.util import random_array

RNG = np.random.default_rng(7)
RUNTIMES = ["kiln"] + (["gomp"] if gomp_available() else [])
LANES = 16


@pytest.fixture(params=RUNTIMES)
def runtime(request, monkeypatch):
    monkeypatch.setenv("KILN_PARALLEL_RUNTIME", request.param)
    if backend() != request.param:
        pytest.skip(f"the {request.param} runtime is not available here")
    return request.param


# ------------------------------------------------------------------ the optimised IR

def _function(ir_text: str, marker: str) -> str:
    """The text of the one function whose name contains `marker`."""
    found = re.search(r"^define [^\n]*@[\w.]*" + marker + r"[\w.]*\(.*?^}", ir_text,
                      re.M | re.S)
    assert found, f"no function named *{marker}* in the optimised IR"
    return found.group(0)


def _blocks(fn_text: str) -> dict:
    """label -> (instructions, successor labels) of one function's text."""
    blocks, label, lines = {}, "entry", []
    for line in fn_text.splitlines()[1:]:
        head = re.match(r"^([\w.\-]+):", line)
        if head:
            blocks[label] = lines
            label, lines = head.group(1), []
        elif line.strip() and line.strip() != "}":
            lines.append(line.strip())
    blocks[label] = lines
    return {k: (v, [t for ln in v if ln.startswith(("br ", "switch "))
                    for t in re.findall(r"label %([\w.\-]+)", ln)]) for k, v in blocks.items()}


def _in_loops(fn_text: str) -> set:
    """Labels of the blocks on a cycle of the control-flow graph (inside some loop)."""
    blocks = _blocks(fn_text)
    looped = set()
    for start in blocks:
        seen, todo = set(), list(blocks[start][1])
        while todo:
            b = todo.pop()
            if b == start:
                looped.add(start)
                break
            if b not in seen:
                seen.add(b)
                todo.extend(blocks[b][1])
    return looped


def hoist_kernel(name: str, rows: int, chunks: int) -> PrimFunc:
    """y[p, j, v] = x[p, j, v] * s[dims[0]] over `for p parallel: for j: for v vectorized`:
    s[dims[0]] is the same every iteration, but it is a load and y a store."""
    cols = chunks * LANES
    x, y = buf("x", "float32", [rows * cols]), buf("y", "float32", [rows * cols])
    s, dims = buf("s", "float32", [4]), buf("dims", "int32", [2])
    p, j, v = E.var("p"), E.var("j"), E.var("v")
    at = p * cols + j * LANES + v
    body = Store(y, at, load(x, at) * load(s, load(dims, 0)))
    nest = loop(p, rows, loop(j, chunks, loop(v, LANES, body, ForKind.VECTORIZED)),
                ForKind.PARALLEL)
    return PrimFunc(name, (x, s, dims, y), nest)


def test_loop_invariant_loads_leave_the_parallel_body_loops(runtime):
    k = build(hoist_kernel(f"hoist_{runtime}", rows=13, chunks=37))
    par = _function(k.llvm_ir(), "__par")
    looped = _in_loops(par)
    assert looped, "the parallel body should still hold its loops"
    blocks = _blocks(par)
    scalar_loads = [(label, ln) for label, (lines, _) in blocks.items() for ln in lines
                    if re.search(r"= load (float|i32),", ln)]
    assert any("load float" in ln for _, ln in scalar_loads), "s[dims[0]] is not loaded?"
    inside = [ln for label, ln in scalar_loads if label in looped]
    # without noalias both dims[0] and s[dims[0]] are reloaded after every store to y
    assert not inside, f"loads left inside the body's loops: {inside}"
    assert "!noalias" in par and "!alias.scope" in par
    # and the result is right
    x, s = rand((13 * 37 * LANES,), "float32", RNG), rand((4,), "float32", RNG)
    y = np.zeros_like(x)
    k(x, s, np.array([2, 0], np.int32), y)
    np.testing.assert_array_equal(y, x * s[2])


def test_only_the_parallel_bodies_take_the_loop_function(runtime):
    """The alwaysinline loop function is gone after optimisation, and the kernel's
    parameters keep their own noalias."""
    k = build(hoist_kernel(f"gone_{runtime}", rows=3, chunks=2))
    text = k.llvm_ir()
    assert not re.search(r"define [^\n]*__body", text)
    assert re.search(r"define void @gone_\w+\(ptr noalias", text)


# ------------------------------------------------------------------ correctness

def guarded_kernel(name: str, rows: int, cols: int) -> PrimFunc:
    """y[p, c] = (x[p, c] + y[p, c]) * w[c] + b[p] with c in vector chunks whose tail is
    guarded (cols need not be a multiple of the lanes); y is read and written."""
    x, y = buf("x", "float32", [rows, cols]), buf("y", "float32", [rows, cols])
    w, b = buf("w", "float32", [cols]), buf("b", "float32", [rows])
    p, j, v = E.var("p"), E.var("j"), E.var("v")
    c = j * LANES + v
    at = p * cols + c
    store = Store(y, at, (load(x, at) + load(y, at)) * load(w, c) + load(b, p))
    body = store if cols % LANES == 0 else IfThenElse(c < cols, store)
    chunks = -(-cols // LANES)
    return PrimFunc(name, (x, w, b, y), loop(p, rows, loop(
        j, chunks, loop(v, LANES, body, ForKind.VECTORIZED)), ForKind.PARALLEL))


@pytest.mark.parametrize("rows,cols", [(1, 1), (1, 17), (2, 16), (7, 31), (13, 1), (17, 53)])
@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_body_matches_numpy(rows, cols, threads, runtime):
    k = build(guarded_kernel(f"guarded_{runtime}_{rows}_{cols}", rows, cols))
    k.set_num_threads(threads)
    x, w = rand((rows, cols), "float32", RNG), rand((cols,), "float32", RNG)
    b, y = rand((rows,), "float32", RNG), rand((rows, cols), "float32", RNG)
    expected = (x + y) * w + b[:, None]
    k(x, w, b, y)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


def scratch_kernel(name: str, rows: int, cols: int) -> PrimFunc:
    """Buffers allocated around the parallel loop and captured by it: a heap GLOBAL `g`
    (filled before the loop, read inside) and a stack LOCAL `t` (read only inside); inside,
    each iteration has its own LOCAL accumulator `acc`.
    y[p] = sum_c x[p, c] * g[c] + t[p % 3]."""
    x, y = buf("x", "float32", [rows, cols]), buf("y", "float32", [rows])
    g = buf("g", "float32", [70_000], Scope.GLOBAL)      # 280 KB: on the heap
    t = buf("t", "float32", [3], Scope.LOCAL)
    acc = buf("acc", "float32", [1], Scope.LOCAL)
    c, p, q, r = E.var("c"), E.var("p"), E.var("q"), E.var("r")
    fill = seq(loop(c, cols, Store(g, c, E.cast(c, "float32") * 0.5)),
               loop(q, 3, Store(t, q, E.cast(q, "float32") + 1.0)))
    row = Allocate(acc, seq(
        Store(acc, E.const(0), load(t, p % 3)),
        loop(r, cols, Store(acc, E.const(0), load(acc, 0) + load(x, p * cols + r) * load(g, r))),
        Store(y, p, load(acc, 0))))
    body = Allocate(g, Allocate(t, seq(fill, loop(p, rows, row, ForKind.PARALLEL))))
    return PrimFunc(name, (x, y), body)


@pytest.mark.parametrize("rows,cols", [(1, 5), (11, 37)])
@pytest.mark.parametrize("threads", [1, 2])
def test_allocated_buffers_captured_by_the_parallel_loop(rows, cols, threads, runtime):
    k = build(scratch_kernel(f"scratch_{runtime}_{rows}", rows, cols))
    k.set_num_threads(threads)
    x, y = rand((rows, cols), "float32", RNG), np.zeros(rows, np.float32)
    k(x, y)
    expected = x @ (np.arange(cols, dtype=np.float32) * 0.5) + (np.arange(rows) % 3 + 1)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-4)


def test_serial_fallback_without_a_pool_matches(monkeypatch):
    """KILN_PARALLEL_RUNTIME=serial: no outlining at all; the same answer."""
    monkeypatch.setenv("KILN_PARALLEL_RUNTIME", "serial")
    k = build(guarded_kernel("guarded_serial", 7, 31))
    x, w = rand((7, 31), "float32", RNG), rand((31,), "float32", RNG)
    b, y = rand((7,), "float32", RNG), rand((7, 31), "float32", RNG)
    expected = (x + y) * w + b[:, None]
    k(x, w, b, y)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)
    assert "__par" not in k.llvm_ir()


# ------------------------------------------------------------------ random schedules

def _has_parallel(sch) -> bool:
    return any(kind is ForKind.PARALLEL for stage in sch.stages
               for kind in stage.iter_kinds.values())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scheduled())
def test_random_parallel_schedules_match_numpy_at_two_threads(case):
    s, inputs, out, reference = case
    assume(_has_parallel(s))
    kernel = kiln.build(s, [*inputs, out])
    kernel.set_num_threads(2)
    rng = np.random.default_rng(0)
    arrays = [random_array(t.shape, rng=rng) for t in inputs]
    result = np.zeros(out.shape, np.float32)
    kernel(*arrays, result)
    np.testing.assert_allclose(result, reference(*arrays), rtol=1e-4, atol=1e-5)
