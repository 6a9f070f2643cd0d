"""Kernels index with int32: a tensor of more than 2**31 - 1 elements is a CodegenError that
names the buffer and its extent (it failed inside llvmlite with mixed i32/i64 operands). The
kernels are lowered and built, never called, so nothing of that size is allocated."""
from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import kiln
from kiln import codegen
from kiln.schedule import create_schedule, lower
from kiln.te import tensor as T
from kiln.te.errors import CodegenError


def _doubling(shape):
    a = T.placeholder(shape, "float32", name="A")
    b = T.compute(shape, lambda *i: a(*i) * 2.0, name="B")
    return lower(create_schedule([b]), [a, b], name="doubling")


@pytest.mark.parametrize("shape,named", [((2 ** 40,), "extent 1099511627776 on axis 0"),
                                         ((2 ** 20, 2 ** 20), "1099511627776 elements"),
                                         ((3, 2 ** 31 - 1), "6442450941 elements")])
def test_a_tensor_beyond_int32_indices_is_an_error_naming_its_extent(shape, named):
    with pytest.raises(CodegenError, match=rf"kernel 'doubling': buffer 'A' float32"
                                           rf"\[{shape[0]}.*{named}.*32-bit"):
        codegen.build(_doubling(shape), cache_kernel=False)


def test_the_largest_int32_tensor_still_builds():
    kernel = codegen.build(_doubling((2 ** 31 - 1,)), cache_kernel=False)
    assert kernel.params[0].shape == (2 ** 31 - 1,)


def test_compile_of_an_onnx_model_with_a_2_40_extent_names_it():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r0")], "big",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2 ** 40])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2 ** 40])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CodegenError, match="buffer 'x' float32\\[1099511627776\\]"):
        kiln.compile(m, db=None, jobs=1)
