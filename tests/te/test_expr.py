"""The expression layer: structural equality, cached hashes, folding, dtypes and errors."""
import pickle
from dataclasses import FrozenInstanceError

import pytest

from kiln import te
from kiln.te import expr as E
from kiln.te.errors import TEError


def test_structural_equality_and_hash():
    i = te.var("i")
    a = i * 4 + 1
    b = i * 4 + 1
    assert a == b and a is not b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert (i * 4 + 2) != a


def test_vars_with_one_name_are_different():
    assert te.var("i") != te.var("i")


def test_hash_is_cached_on_the_node():
    e = te.var("x", "float32") + 1.0
    assert e._hash is None
    h = hash(e)
    assert e._hash == h


def test_nodes_are_frozen():
    e = te.var("i") + 1
    with pytest.raises(FrozenInstanceError):
        e.a = te.var("j")


def test_bool_of_expression_raises():
    i = te.var("i")
    with pytest.raises(TypeError, match="no truth value.*select"):
        bool(i < 3)
    with pytest.raises(TypeError, match="no truth value"):
        if i.eq(2):
            pass


def test_comparisons_build_nodes():
    i = te.var("i")
    assert isinstance(i < 3, E.LT)
    assert (i > 3) == E.LT("bool", E.IntImm("int32", 3), i)
    assert isinstance(i.eq(3), E.EQ) and (i.eq(3)).dtype == "bool"


def test_constant_folding():
    assert te.const(2) + 3 == te.const(5)
    assert te.const(7) // 2 == te.const(3)
    assert te.const(-7) // 2 == te.const(-4)          # floor division
    assert te.const(-7) % 2 == te.const(1)            # sign of the divisor
    assert te.minimum(te.const(3), 5) == te.const(3)


def test_dtype_promotion():
    x = te.var("x", "float32")
    n = te.var("n", "int32")
    assert (x + 1).dtype == "float32"                 # a Python int takes the tensor's dtype
    assert (n + 1).dtype == "int32"
    mixed = n + te.var("y", "float64")
    assert mixed.dtype == "float64" and isinstance(mixed.a, E.Cast)
    assert (te.var("a", "int8") + te.var("b", "int32")).dtype == "int32"


def test_raw_node_checks_operand_dtypes():
    with pytest.raises(TEError, match="differ in dtype: float32 vs int32"):
        E.Add("float32", te.var("x", "float32"), te.var("n", "int32"))


def test_intrinsic_errors_name_the_problem():
    with pytest.raises(TEError, match="unknown intrinsic 'expp'.*known: exp"):
        te.call("expp", te.var("x", "float32"))
    with pytest.raises(TEError, match="exp needs float arguments, got int32"):
        te.exp(te.var("n"))


def test_tensor_index_errors():
    A = te.placeholder((4, 5), name="A")
    with pytest.raises(TEError, match="tensor 'A' has 2 dimensions.*indexed with 1"):
        A[te.var("i")]
    with pytest.raises(TEError, match="index of tensor 'A' must be an integer, got float32"):
        A[te.var("x", "float32"), 0]


def test_unsupported_dtype_lists_choices():
    with pytest.raises(TEError, match="unsupported dtype 'complex64'.*float32"):
        te.placeholder((2,), "complex64")


def test_reduction_must_be_whole_body():
    A = te.placeholder((4, 5), name="A")
    k = te.reduce_axis(5, "k")
    with pytest.raises(TEError, match="compute 'bad'.*whole body"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k) + 1.0, name="bad")


def test_compute_arity_error():
    with pytest.raises(TEError, match="compute 'c': the function takes 1 arguments but the "
                       "shape"):
        te.compute((2, 3), lambda i: i, name="c")


def test_compute_pickles():
    A = te.placeholder((3,), name="A")
    B = te.compute((3,), lambda i: A[i] * 2.0, name="B")
    again = pickle.loads(pickle.dumps(B))
    assert again.op.body == B.op.body
    assert te.workload_key(again) == te.workload_key(B)


def test_errors_pickle():
    err = pickle.loads(pickle.dumps(TEError("shape (3,) is wrong")))
    assert isinstance(err, TEError) and "shape (3,)" in str(err)
