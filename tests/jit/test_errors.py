"""kiln.jit's errors: one test per message, each naming what is wrong and the user's line."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln.jit import (
    JitError,
    JitShapeError,
    TracerBoolError,
    TracerConversionError,
    UnsupportedNumpyError,
)

HERE = "test_errors.py"
X = np.ones((3, 4), np.float32)


def test_branching_on_a_traced_value_says_what_to_do():
    def f(x):
        if x.sum() > 0:  # the line the error names
            return x
        return -x
    with pytest.raises(TracerBoolError, match=rf"truth value.*{HERE}:\d+ \(f\): if x.sum\(\) "
                                              r"> 0.*static_argnames.*knp.where"):
        kiln.jit(f)(X)


def test_an_unsupported_numpy_function_names_itself_and_the_line():
    with pytest.raises(UnsupportedNumpyError, match=rf"numpy.linalg.inv is not supported.*"
                                                    rf"{HERE}:\d+.*np.linalg.inv\(x\)"):
        kiln.jit(lambda x: np.linalg.inv(x))(X[:3, :3])
    with pytest.raises(UnsupportedNumpyError, match=rf"numpy.sort .*{HERE}:\d+"):
        kiln.jit(lambda x: np.sort(x))(X)
    with pytest.raises(UnsupportedNumpyError, match=rf"numpy.fft .*{HERE}:\d+.*knp.fft"):
        kiln.jit(lambda x: knp.fft.fft(x))(X)
    assert not hasattr(knp, "histogram")
    with pytest.raises(UnsupportedNumpyError, match=r"numpy.exp .*out="):
        kiln.jit(lambda x: np.exp(x, out=x))(X)


def test_a_shape_mismatch_names_both_shapes_and_the_operation():
    with pytest.raises(JitShapeError, match=rf"numpy.add: shapes \[3, 4\] and \[5\] cannot "
                                            rf"be broadcast.*{HERE}:\d+"):
        kiln.jit(lambda x, y: x + y)(X, np.ones(5, np.float32))
    with pytest.raises(JitShapeError, match=r"numpy.matmul: shapes \[3, 4\] and \[3, 4\]: "
                                            r"contraction dimensions 4 and 3"):
        kiln.jit(lambda x: x @ x)(X)
    with pytest.raises(JitShapeError, match=r"numpy.sum: axis -3 is out of range for an "
                                            r"array of shape \[3, 4\]"):
        kiln.jit(lambda x: x.sum(axis=-3))(X)
    with pytest.raises(JitShapeError, match=r"numpy.reshape: cannot reshape array of shape "
                                            r"\[3, 4\] .* into shape \[5, 2\]"):
        kiln.jit(lambda x: x.reshape(5, 2))(X)
    with pytest.raises(JitShapeError, match=r"numpy.einsum: 'ij,jk->ik': label 'j' has size 4 "
                                            r"in operand 0 \[3, 4\] and 3 in operand 1"):
        kiln.jit(lambda x: knp.einsum("ij,jk->ik", x, x))(X)
    with pytest.raises(JitShapeError, match=r"index 3 is out of bounds for axis 0 with size 3"):
        kiln.jit(lambda x: x[3])(X)


def test_concrete_values_of_traced_arrays_are_refused():
    with pytest.raises(TracerConversionError, match=rf"a Python float.*{HERE}:\d+"):
        kiln.jit(lambda x: float(x.sum()))(X)
    with pytest.raises(TracerConversionError, match=r"numpy array"):
        kiln.jit(lambda x: np.asarray(x))(X)


def test_item_assignment_and_boolean_masks_explain_the_alternative():
    def assign(x):
        x[0] = 1
        return x
    with pytest.raises(JitError, match=r"immutable.*knp.where"):
        kiln.jit(assign)(X)
    with pytest.raises(UnsupportedNumpyError, match=r"boolean mask.*knp.where"):
        kiln.jit(lambda x: x[x > 0])(X)


def test_unsupported_argument_types():
    with pytest.raises(JitError, match=r"argument 'x'.*dtype complex128"):
        kiln.jit(lambda x: x)(np.ones(2, np.complex128))
    with pytest.raises(JitError, match=r"'cfg'.*neither an array nor a number.*static"):
        kiln.jit(lambda x, cfg: x)(X, object())


def test_an_index_out_of_range_is_an_error_and_negative_ones_count_from_the_end():
    table = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
    lookup = kiln.jit(lambda t, i: knp.take(t, i, axis=0))
    np.testing.assert_array_equal(lookup(table, np.array([0, 9, -1], np.int64)),
                                  table[[0, 9, -1]])
    with pytest.raises(kiln.KernelArgumentError, match=r"indices in \[2, 10\].*\[-10, 9\]"):
        lookup(table, np.array([2, 10], np.int64))
