"""What makes a kernel compile cheaper must not change what it compiles to: shared constants
(llvm_types.const) keep every value's exact bits, one target machine per process
(jit.machine) gives the objects fresh machines give, and the host CPU detected once is
the host CPU."""
import hashlib
import math

import llvmlite.binding as llvm
import numpy as np
import pytest

from .cg_util import buf, elementwise, rand
from kiln.codegen import Target, build, jit
from kiln.codegen import llvm_types as T
from kiln.codegen.build import DEFAULT_FASTMATH
from kiln.codegen.emit_module import emit_module, fastmath_flags
from kiln.te import expr as E

RNG = np.random.default_rng(33)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_signed_zeros_stay_apart(dtype):
    """0.0 == -0.0 in Python; as cache keys they would share one constant."""
    pos, neg = T.const(dtype, 0.0), T.const(dtype, -0.0)
    assert str(pos) != str(neg)
    assert T.const(dtype, -0.0, lanes=4) is not T.const(dtype, 0.0, lanes=4)
    assert str(T.const(dtype, 0.0)) == str(T._make_const(dtype, 0.0, None))
    assert str(T.const(dtype, -0.0)) == str(T._make_const(dtype, -0.0, None))


def test_nan_payloads_are_not_cached_and_equal_values_are_shared():
    nan = T.const("float32", math.nan)
    assert nan is not T.const("float32", math.nan)
    assert str(nan) == str(T._make_const("float32", math.nan, None))
    assert T.const("int32", 7) is T.const("int32", 7)
    assert T.const("int32", 7, lanes=8) is T.const("int32", 7, lanes=8)
    assert T.const("int32", 7) is not T.const("int64", 7)
    assert str(T.const("int8", 255)) == str(T._make_const("int8", 255, None)) == "i8 255"
    assert str(T.const("bool", 1)) == "i1 1"


def test_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(T, "_CONSTS_MAX", 8)
    monkeypatch.setattr(T, "_CONSTS", {})
    for k in range(40):
        assert str(T.const("int32", k)) == f"i32 {k}"
    assert len(T._CONSTS) <= 8


@pytest.mark.parametrize("n", [1, 7, 16, 37])
def test_kernel_with_repeated_and_signed_zero_constants_matches_numpy(n):
    """Constants shared within and across kernels: copysign(1, x * -0.0 + 0.5) style
    arithmetic where a zero's sign decides the result."""
    A, B = buf("A", "float32", [n]), buf("B", "float32", [n])
    neg0, half = E.const(-0.0, "float32"), E.const(0.5, "float32")
    func = elementwise("signed_zero", n, [A], B, lambda a: (a * half + neg0) * half + half)
    a = rand((n,), "float32", RNG)
    a[0] = -0.0
    out = np.empty(n, np.float32)
    build(func, cache_kernel=False)(a, out)
    np.testing.assert_allclose(out, (a * 0.5 + np.float32(-0.0)) * 0.5 + 0.5, rtol=1e-6)
    # the IR holds both zeros, each with its own sign (the constants are shared)
    text = str(emit_module(func, Target.native(), fastmath_flags(DEFAULT_FASTMATH),
                           parallel="serial"))
    assert "0x8000000000000000" in text and "0x3fe0000000000000" in text


def _object(text: str, target: Target, fresh: bool) -> bytes:
    """Object code of module `text` through jit.compile_object (the per-process machines),
    or with fresh machines for both the pipeline and the object."""
    if not fresh:
        return jit.compile_object(text, target)[1]
    jit.init_llvm()
    mod = llvm.parse_assembly(text)
    tm = target.create_target_machine()
    mod.triple, mod.data_layout = target.triple, str(tm.target_data)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    return target.create_target_machine(for_object=True).emit_object(mod)


def test_shared_target_machine_gives_the_objects_of_fresh_ones():
    target = Target.native()
    texts = []
    for n, fn in ((37, lambda a: a * E.const(3.0, "float32") + a),
                  (64, lambda a: E.maximum(a, E.const(0.0, "float32"))),
                  (5, lambda a: a - E.const(1.5, "float32"))):
        A, B = buf("A", "float32", [n]), buf("B", "float32", [n])
        func = elementwise(f"k{n}", n, [A], B, fn)
        texts.append(str(emit_module(func, target, fastmath_flags(DEFAULT_FASTMATH),
                                     parallel="serial")))
    shared = [hashlib.sha256(_object(t, target, fresh=False)).hexdigest() for t in texts]
    fresh = [hashlib.sha256(_object(t, target, fresh=True)).hexdigest() for t in texts]
    assert shared == fresh
    assert jit.machine(target) is jit.machine(target)
    assert jit.machine(target, for_object=True) is not jit.machine(target)


def test_native_target_is_the_host_as_llvm_detects_it():
    jit.init_llvm()
    t = Target.native()
    assert t.cpu == llvm.get_host_cpu_name()
    assert t == Target.native() and t.can_run_on_host()
    for name, on in llvm.get_host_cpu_features().items():
        if on and name in ("avx2", "avx512f", "fma"):
            assert t.has_feature(name)


def _collected_after_drop(func, release_it: bool) -> int:
    """How many objects the cycle collector frees once `func`'s module is dropped."""
    import gc

    from kiln.codegen.build import param_specs
    from kiln.codegen.emit_module import release
    from kiln.codegen.pyentry import add_python_entry
    module = emit_module(func, Target.native(), fastmath_flags(DEFAULT_FASTMATH), parallel=None)
    add_python_entry(module, func.name, param_specs(func))
    str(module)
    was_on = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        if release_it:
            release(module)
        del module
        return gc.collect()
    finally:
        if was_on:
            gc.enable()


@pytest.mark.parametrize("kind", ["VECTORIZED", "UNROLLED"])
def test_kernel_text_is_the_module_text_and_leaves_few_cycles(kind):
    """parallel_build.kernel_text releases the llvmlite module after formatting it
    (emit_module.release): the same text, and the module's instructions and blocks go with
    their last reference instead of waiting for the cycle collector (which then traversed
    everything a kernel's emission made)."""
    from kiln.codegen.build import param_specs
    from kiln.codegen.pyentry import add_python_entry
    from kiln.graph.compile.parallel_build import kernel_text
    from kiln.schedule.ir import ForKind

    n = 64
    A, B = buf("A", "float32", [n]), buf("B", "float32", [n])
    func = elementwise("released", n, [A], B, lambda a: a * E.const(2.0, "float32") + a,
                       kind=ForKind[kind])
    module = emit_module(func, Target.native(), fastmath_flags(DEFAULT_FASTMATH), parallel=None)
    add_python_entry(module, "released", param_specs(func))
    text, symbol, _ = kernel_text(func, Target.native())
    assert text == str(module) and symbol == "released"
    kept, released = _collected_after_drop(func, False), _collected_after_drop(func, True)
    assert released * 4 < kept, (released, kept)
