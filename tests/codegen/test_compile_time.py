"""Compile-time measures in codegen: loops of extent 1 never reach LLVM, the pipeline
variants and the pass-timing hook of jit.optimize. (Speed is measured only in
benchmarks/kernel_compile_time.py.)"""
import time

import numpy as np
import pytest

from .cg_util import buf, load, loop, rand, seq
from ..util import finishes_in_child
from kiln.codegen import Target, build, jit
from kiln.codegen.emit_module import emit_module
from kiln.schedule.passes.unit_loops import remove_unit_loops
from kiln.schedule.ir import ForKind, IfThenElse, PrimFunc, Store
from kiln.schedule.printer import stmt_str
from kiln.te import expr as E
from kiln.te.errors import CodegenError

RNG = np.random.default_rng(5)


def _unit_loop_kernel():
    """C[i*8 + j] = A[...] * 2 with unit loops of every removable kind, one starting at 3,
    under a serial and a vectorized loop that stay."""
    A, C = buf("A", "float32", [64]), buf("C", "float32", [64])
    i, j, u, v, w = (E.var(n) for n in ("i", "j", "u", "v", "w"))
    index = i * 8 + j + (u - 3) + v * 5 + w * 7
    body = IfThenElse(index < 64, Store(C, index, load(A, index) * 2.0))
    inner = loop(u, 1, loop(v, 1, loop(w, 1, body, ForKind.VECTORIZED), ForKind.UNROLLED),
                 start=3)
    return PrimFunc("unit_loops", (A, C), loop(i, 8, loop(j, 8, inner, ForKind.VECTORIZED)))


def test_unit_loops_are_removed_and_others_kept():
    func = _unit_loop_kernel()
    text = stmt_str(remove_unit_loops(func.body))
    assert text.strip() == "\n".join([
        "for i in range(8):",
        "  for j in vectorized(8):",
        "    if i * 8 + j < 64:",
        "      C[i * 8 + j] = A[i * 8 + j] * 2.0f"]), text


def test_remove_unit_loops_is_identity_without_unit_loops():
    A, C = buf("A", "float32", [16]), buf("C", "float32", [16])
    i = E.var("i")
    body = loop(i, 16, Store(C, i, load(A, i)))
    assert remove_unit_loops(body) is body


def test_parallel_unit_loop_is_removed():
    A, C = buf("A", "float32", [4]), buf("C", "float32", [4])
    i, j = E.var("i"), E.var("j")
    body = loop(i, 1, loop(j, 4, Store(C, i * 4 + j, load(A, j))), ForKind.PARALLEL)
    assert stmt_str(remove_unit_loops(body)).strip() == "\n".join([
        "for j in range(4):",
        "  C[j] = A[j]"])


def _max_chain_kernel(n: int) -> PrimFunc:
    """C[i] = max over all n elements of A, as the default schedule of a ReduceMax of a whole
    small tensor leaves it: a PARALLEL loop of one iteration around the unrolled chain of
    max steps on the output (whose loads do not depend on the loop variable)."""
    A, C = buf("A", "float32", [n]), buf("C", "float32", [1])
    i, r = E.var("i"), E.var("r")
    body = seq(Store(C, i, E.const(float("-inf"))),
               loop(r, n, Store(C, i, E.maximum(load(C, i), load(A, r))), ForKind.UNROLLED))
    return PrimFunc("max_chain", (A, C), loop(i, 1, body, ForKind.PARALLEL))


def _build_and_check_max_chain(n: int) -> None:
    a = rand((n,), "float32", np.random.default_rng(n))
    c = np.zeros(1, np.float32)
    build(_max_chain_kernel(n), cache_kernel=False)(a, c)
    assert c[0] == a.max(), (c, a.max())


@pytest.mark.parametrize("n", [25, 49])
def test_whole_tensor_max_chain_compiles_in_seconds(n):
    """Regression: with its unit parallel loop kept, this kernel took LLVM's loop vectoriser
    time exponential in n (n=20: 22 s, n=25: 25+ minutes, a hung CI run). Built in a forked
    child so that a regression fails here instead of hanging the suite."""
    assert finishes_in_child(_build_and_check_max_chain, (n,), 60), \
        f"compiling a {n}-step max chain failed or took over 60 s"


def test_kernel_with_unit_loops_matches_numpy():
    a = rand((64,), "float32", RNG)
    c = np.zeros(64, np.float32)
    build(_unit_loop_kernel())(a, c)
    np.testing.assert_array_equal(c, a * 2)


@pytest.mark.parametrize("pipeline", sorted(jit.PIPELINES))
def test_every_pipeline_gives_valid_code(pipeline):
    module = emit_module(_unit_loop_kernel(), Target.native(), ("contract",), parallel="serial")
    mod = jit.optimize(module, Target.native(), pipeline=pipeline)
    assert "define" in str(mod)


def test_pass_timing_report():
    timing = []
    module = emit_module(_unit_loop_kernel(), Target.native(), ("contract",), parallel="serial")
    jit.optimize(module, Target.native(), timing=timing)
    assert len(timing) == 1 and "Pass execution timing report" in timing[0]


def test_unknown_pipeline_names_the_choices():
    module = emit_module(_unit_loop_kernel(), Target.native(), ("contract",), parallel="serial")
    with pytest.raises(CodegenError, match=r"unknown LLVM pipeline 'o4'.*o3.*o1"):
        jit.optimize(module, Target.native(), pipeline="o4")


def test_slow_llvm_compile_is_logged_with_its_ir(monkeypatch, caplog, tmp_path):
    """A kernel that stays in LLVM past jit.SLOW_LLVM_SECONDS is named in a warning, and its
    module is saved to replay (here the limit is 0 s, so every compile is 'slow')."""
    monkeypatch.setattr(jit, "SLOW_LLVM_SECONDS", 0.0)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with caplog.at_level("WARNING", logger="kiln.codegen.jit"):
        kernel = build(_max_chain_kernel(4), cache_kernel=False)
        time.sleep(0.2)    # the timer thread logs concurrently with the compile
    a, c = np.arange(4, dtype=np.float32), np.zeros(1, np.float32)
    kernel(a, c)
    assert c[0] == 3.0
    messages = [r.getMessage() for r in caplog.records if "in LLVM for" in r.getMessage()]
    assert messages and "'max_chain'" in messages[0], caplog.text
    saved = list(tmp_path.glob("kiln-slow-max_chain-*.ll"))
    assert len(saved) == 1 and 'ModuleID = "max_chain"' in saved[0].read_text()


def test_fast_compile_logs_nothing(caplog):
    with caplog.at_level("WARNING", logger="kiln.codegen.jit"):
        build(_max_chain_kernel(4), cache_kernel=False)
    assert "in LLVM for" not in caplog.text
