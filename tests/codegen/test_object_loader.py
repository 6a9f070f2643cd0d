"""Loading object code into the process's JIT (codegen/object_loader.py): symbols resolved,
references into the process (libm) bound, a missing symbol named, a symbol defined twice
loaded through the MCJIT fallback, and loads freed when dropped."""
from __future__ import annotations

import ctypes
import math

import llvmlite.binding as llvm
import pytest

from kiln.codegen import object_loader
from kiln.codegen.target import Target, init_llvm
from kiln.te.errors import CodegenError


def _object(ir_text: str) -> bytes:
    init_llvm()
    target = Target.native()
    module = llvm.parse_assembly(ir_text)
    module.triple = target.triple
    return target.create_target_machine(for_object=True).emit_object(module)


def _adder(name: str, amount: int) -> bytes:
    return _object(f"""
        @{name}_calls = global i64 0
        define i64 @{name}(i64 %x) {{
          %c = load i64, ptr @{name}_calls
          %c1 = add i64 %c, 1
          store i64 %c1, ptr @{name}_calls
          %r = add i64 %x, {amount}
          ret i64 %r
        }}""")


def _call_i64(address: int, value: int) -> int:
    return ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(address)(value)


def test_functions_and_globals_of_several_objects_resolve():
    code = object_loader.load_code(Target.native(), [_adder("plus_one", 1), _adder("plus_ten", 10)],
                                   ["plus_one", "plus_ten", "plus_ten_calls"], "adders")
    assert _call_i64(code.address("plus_one"), 41) == 42
    assert _call_i64(code.address("plus_ten"), 5) == 15
    assert ctypes.c_int64.from_address(code.address("plus_ten_calls")).value == 1


def test_a_reference_into_the_process_is_bound_to_libm():
    obj = _object("""
        declare double @cos(double)
        define double @cosine(double %x) {
          %r = call double @cos(double %x)
          ret double %r
        }""")
    code = object_loader.load_code(Target.native(), [obj], ["cosine"], "libm")
    fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(code.address("cosine"))
    assert fn(0.5) == pytest.approx(math.cos(0.5))


def test_a_missing_symbol_is_named():
    with pytest.raises(CodegenError, match="not_there"):
        object_loader.load_code(Target.native(), [_adder("present", 1)],
                                ["present", "not_there"], "missing")


def test_a_symbol_defined_twice_loads_through_mcjit_which_binds_one_of_them():
    code = object_loader.load_code(Target.native(), [_adder("twice", 1), _adder("twice", 2)],
                                   ["twice"], "twice")
    assert isinstance(code._holder, llvm.ExecutionEngine)
    assert _call_i64(code.address("twice"), 0) in (1, 2)


def test_loads_dropped_and_made_again_stay_correct():
    for k in range(12):      # (nothing holds a LoadedCode in a cycle: del frees it)
        code = object_loader.load_code(Target.native(), [_adder("again", k)], ["again"])
        assert _call_i64(code.address("again"), 100) == 100 + k
        del code
