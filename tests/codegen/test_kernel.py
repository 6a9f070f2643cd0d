"""Kernel argument checking, inspection, timing helper and export/load round trip."""
import shutil

import numpy as np
import pytest

from .cg_util import buf, elementwise
from kiln.codegen import LibraryError, Target, build, export_library, load_library
from kiln.schedule.ir import PrimFunc
from kiln.te import expr as E
from kiln.te.errors import CodegenError, KernelArgumentError


@pytest.fixture(scope="module")
def axpy():
    n = 12
    A, B, C = (buf(name, "float32", [3, 4]) for name in "ABC")
    del n
    f = elementwise("axpy", 12, [A, B], C, lambda a, b: a * 2.0 + b, lanes=4)
    return build(f)


def _args():
    return (np.ones((3, 4), np.float32), np.full((3, 4), 2, np.float32),
            np.zeros((3, 4), np.float32))


def test_call_and_inspection(axpy):
    a, b, c = _args()
    axpy(a, b, c)
    np.testing.assert_array_equal(c, a * 2 + b)
    assert axpy.name == "axpy" and axpy.target == Target.native()
    assert "for io in range(3):" in axpy.ir() and "vectorized(4)" in axpy.ir()
    assert "define void @axpy(" in axpy.llvm_ir()
    assert "axpy:" in axpy.asm()
    times = axpy.benchmark(_args(), number=3, repeat=2)
    assert len(times) == 2 and all(t > 0 for t in times)
    assert len(axpy.time_evaluator(number=2, repeat=3)(*_args())) == 3
    assert [p.written for p in axpy.params] == [False, False, True]


def test_wrong_count(axpy):
    with pytest.raises(KernelArgumentError,
                       match=r"kernel 'axpy' takes 3 arrays \(A, B, C\), got 2"):
        axpy(*_args()[:2])


def test_wrong_dtype(axpy):
    a, b, c = _args()
    with pytest.raises(KernelArgumentError, match=r"argument 'B' of kernel 'axpy': expected "
                       r"float32\[3, 4\], got float64\[3, 4\]\. "
                       r"Cast with B\.astype\(np\.float32\)"):
        axpy(a, b.astype(np.float64), c)


def test_wrong_shape(axpy):
    a, b, c = _args()
    with pytest.raises(KernelArgumentError, match=r"argument 'A'.*got float32\[4, 3\].*shape"):
        axpy(a.reshape(4, 3), b, c)


def test_not_an_array(axpy):
    a, b, c = _args()
    with pytest.raises(KernelArgumentError, match=r"argument 'A'.*expected a numpy array.*list"):
        axpy(a.tolist(), b, c)


def test_non_contiguous(axpy):
    a, b, c = _args()
    wide = np.zeros((3, 8), np.float32)
    with pytest.raises(KernelArgumentError,
                       match=r"argument 'B'.*not C-contiguous.*ascontiguousarray"):
        axpy(a, wide[:, ::2], c)


def test_read_only_output(axpy):
    a, b, c = _args()
    c.flags.writeable = False
    with pytest.raises(KernelArgumentError, match=r"argument 'C'.*writes this array but it is "
                       r"read-only"):
        axpy(a, b, c)
    a.flags.writeable = False   # read-only inputs are fine
    c2 = np.zeros((3, 4), np.float32)
    axpy(a, b, c2)
    np.testing.assert_array_equal(c2, a * 2 + b)


def test_aliasing_arguments_rejected(axpy):
    a, b, c = _args()
    with pytest.raises(KernelArgumentError,
                       match=r"argument .C. of kernel .axpy. shares memory with another"):
        axpy(a, b, a)


def test_build_rejects_non_primfunc_and_duplicate_params():
    with pytest.raises(CodegenError, match=r"build\(\) takes a PrimFunc"):
        build("not a func")
    A = buf("A", "float32", [4])
    with pytest.raises(CodegenError, match=r"buffer 'A' appears twice"):
        build(PrimFunc("dup", (A, A), elementwise("x", 4, [A], A, lambda a: a).body))


def test_bad_thread_env(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "zero")
    A = buf("A", "float32", [4])
    C = buf("C", "float32", [4])
    with pytest.raises(KernelArgumentError, match=r"KILN_NUM_THREADS='zero' is not a positive"):
        build(elementwise("t", 4, [A], C, lambda a: a, lanes=4))


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler driver to link")
def test_export_and_load_round_trip(tmp_path, axpy, monkeypatch):
    n = 50
    X, Y = buf("X", "float32", [n]), buf("Y", "float32", [n])
    vexp = build(elementwise("vexp", n, [X], Y, lambda x: E.exp(x) + 1.0))
    path = export_library([axpy, vexp], tmp_path / "lib.so")
    assert (tmp_path / "lib.so.json").exists()
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    loaded = load_library(path)
    assert sorted(loaded) == ["axpy", "vexp"]
    assert loaded["axpy"].num_threads == 1
    a, b, c = _args()
    loaded["axpy"](a, b, c)
    np.testing.assert_array_equal(c, a * 2 + b)
    x = np.linspace(-5, 5, n).astype(np.float32)
    y1, y2 = np.zeros(n, np.float32), np.zeros(n, np.float32)
    vexp(x, y1)
    loaded["vexp"](x, y2)
    np.testing.assert_array_equal(y1, y2)
    with pytest.raises(KernelArgumentError, match=r"argument 'X' of kernel 'vexp'"):
        loaded["vexp"](x.astype(np.float64), y2)
    with pytest.raises(CodegenError, match=r"loaded from a library"):
        loaded["vexp"].llvm_ir()
    with pytest.raises(LibraryError, match=r"names must be unique"):
        export_library([axpy, axpy], tmp_path / "dup.so")


def test_load_missing_library(tmp_path):
    with pytest.raises(LibraryError, match=r"nothere\.so does not exist"):
        load_library(tmp_path / "nothere.so")


def test_export_without_linker(tmp_path, axpy, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(LibraryError, match=r"no C compiler driver"):
        axpy.export(tmp_path / "x.so")
