"""The generic kernel library (codegen/generic/library.py): built once per machine, found
again from its own folder whatever KILN_CACHE_DIR holds."""
from __future__ import annotations

import numpy as np
import pytest

from kiln.codegen import runtime
from kiln.codegen.generic import library as lib_mod
from kiln.codegen.generic.runner import CallTable
from kiln.codegen.target import Target
from kiln.te.errors import CodegenError


def test_a_unit_is_compiled_once_then_read(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_GENERIC_DIR", str(tmp_path / "generic"))
    target = Target.native()
    assert lib_mod.unit_of("elementwise.unary.relu") == "elementwise.unary.relu"
    assert not lib_mod.built("elementwise.unary.relu", target)
    code, symbols, _ = lib_mod.unit_object("elementwise.unary.relu", target)
    assert "unary.relu" in symbols and lib_mod.built("elementwise.unary.relu", target)

    def no_llvm(*args, **kwargs):
        raise AssertionError("the family was compiled again")
    monkeypatch.setattr(lib_mod, "optimize", no_llvm)
    again, symbols_again, _ = lib_mod.unit_object("elementwise.unary.relu", target)
    assert again == code and symbols_again == symbols


def test_a_unit_built_for_another_pool_runtime_is_not_taken(tmp_path, monkeypatch):
    """The runtime decides how PARALLEL loops are emitted and which symbols the object
    defines: a unit built under one is never loaded under another."""
    monkeypatch.setenv("KILN_GENERIC_DIR", str(tmp_path / "generic"))
    target = Target.native()
    lib_mod.unit_object("elementwise.unary.relu", target)
    assert lib_mod.built("elementwise.unary.relu", target)
    monkeypatch.setenv("KILN_PARALLEL_RUNTIME", "serial")
    assert not lib_mod.built("elementwise.unary.relu", target)
    assert lib_mod.GenericLibrary(target, 2).kernel("elementwise.unary.relu").address
    assert lib_mod.built("elementwise.unary.relu", target)    # built again, for this one


def test_the_folder_is_apart_from_the_cache_and_can_be_off(tmp_path, monkeypatch):
    monkeypatch.delenv("KILN_GENERIC_DIR", raising=False)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert lib_mod.library_dir() == tmp_path / "xdg" / "kiln-generic"
    monkeypatch.setenv("KILN_GENERIC_DIR", "off")
    assert lib_mod.library_dir() is None
    code, _, _ = lib_mod.unit_object("elementwise.unary.relu", Target.native())  # in memory
    assert code


def test_an_unknown_family_or_kernel_is_named():
    with pytest.raises(CodegenError, match="no generic kernel family 'nope'"):
        lib_mod.unit_object("nope.x", Target.native())
    with pytest.raises(CodegenError, match="no generic kernel unit 'elementwise.nope'"):
        lib_mod.unit_object("elementwise.nope", Target.native())
    with pytest.raises(CodegenError, match="no generic kernel 'elementwise.nope'"):
        lib_mod.library(Target.native(), 1).kernel("elementwise.nope")


def test_the_thread_pool_code_comes_from_the_library_folder(tmp_path, monkeypatch):
    """A cold compile (empty KILN_CACHE_DIR) finds the pool's object with the library."""
    monkeypatch.setenv("KILN_GENERIC_DIR", str(tmp_path / "generic"))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache1"))
    futex = runtime._futex_number()
    if futex is None:
        pytest.skip("no futex: Kiln's pool is not used here")
    target = Target.native()
    code = runtime.runtime_object(target, futex)
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache2"))     # emptied cache

    def no_llvm(*args, **kwargs):
        raise AssertionError("the pool was compiled again")
    monkeypatch.setattr(runtime, "_compile_runtime", no_llvm)
    assert runtime.runtime_object(target, futex) == code


def _plus_one():
    """A generic-style kernel of this test's own: y[i] = x[i] + 1 for i < dims[0]."""
    from kiln.codegen.build import build
    from kiln.codegen.generic.registry import (data, dims_buffer, fparams_buffer, kernel, load,
                                               vector_loop)
    from kiln.schedule.ir import Store
    x, y, dims, fparams = data("x", "float32"), data("y", "float32"), dims_buffer(), \
        fparams_buffer()
    body = vector_loop("i", load(dims, 0), 16, lambda i: Store(y, i, load(x, i) + 1.0))
    return build(kernel("test.plus_one", [x, y], body, dims, fparams), cache_kernel=False,
                 num_threads=1)


def test_the_call_table_runs_calls_in_order_and_checks_them(rng):
    target = Target.native()
    plus_one = _plus_one()
    x = rng.standard_normal(37).astype(np.float32)
    y, z = np.empty_like(x), np.empty_like(x)
    dims, fparams = np.zeros(32, np.int32), np.zeros(8, np.float32)
    dims[0] = x.size
    table = CallTable([(plus_one.address, [x.ctypes.data, y.ctypes.data, dims.ctypes.data,
                                           fparams.ctypes.data]),
                       (plus_one.address, [y.ctypes.data, z.ctypes.data, dims.ctypes.data,
                                           fparams.ctypes.data])], target)
    table()
    np.testing.assert_array_equal(z, (x + np.float32(1)) + np.float32(1))
    with pytest.raises(CodegenError, match="null function or buffer"):
        CallTable([(plus_one.address, [0])], target)
    with pytest.raises(CodegenError, match="at most 16"):
        CallTable([(plus_one.address, [x.ctypes.data] * 17)], target)


def test_kiln_warmup_builds_every_unit(tmp_path, monkeypatch, capsys):
    from kiln.cli import main
    monkeypatch.setenv("KILN_GENERIC_DIR", str(tmp_path / "generic"))
    monkeypatch.setattr(lib_mod, "units", lambda families=None: ["elementwise.unary.relu"])
    assert main(["warmup"]) == 0
    out = capsys.readouterr().out
    assert "elementwise" in out and str(tmp_path / "generic") in out.replace("\n", "")
    assert lib_mod.built("elementwise.unary.relu", Target.native())


def test_the_units_cover_every_kernel_once():
    lib_mod.register_all()
    every = {f"{f}.{n}" for f, kernels in lib_mod.FAMILIES.items() for n in kernels}
    by_unit = [f"{u.partition('.')[0]}.{n}" for u in lib_mod.units()
               for n in lib_mod.unit_kernels(u)]
    assert sorted(by_unit) == sorted(every)
