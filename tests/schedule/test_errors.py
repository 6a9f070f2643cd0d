"""Illegal schedule requests raise ScheduleError naming the stage, the axis and the reason."""
import pytest

import kiln
from kiln import te
from kiln.te.errors import LoweringError, ScheduleError
from tests.util import matmul_dag


def _matmul_schedule():
    A, B, C = matmul_dag(16, 8, 16)
    return A, B, C, kiln.create_schedule(C)


def test_vectorize_reduction_axis():
    A, B, C, s = _matmul_schedule()
    with pytest.raises(ScheduleError, match=r"vectorize axis 'k' of stage 'C'.*reduction axis"):
        s[C].vectorize(C.op.reduce_axis[0])


def test_parallel_reduction_axis():
    A, B, C, s = _matmul_schedule()
    with pytest.raises(ScheduleError, match=r"parallel axis 'k'.*reduction"):
        s[C].parallel(C.op.reduce_axis[0])


def test_split_twice():
    A, B, C, s = _matmul_schedule()
    i = C.op.axis[0]
    s[C].split(i, factor=4)
    with pytest.raises(ScheduleError, match=r"axis 'i' of stage 'C'.*already split"):
        s[C].split(i, factor=2)


def test_split_factor_and_nparts():
    A, B, C, s = _matmul_schedule()
    with pytest.raises(ScheduleError, match=r"factor or nparts, not both.*factor=4, nparts=2"):
        s[C].split(C.op.axis[0], factor=4, nparts=2)


def test_split_bad_factor():
    A, B, C, s = _matmul_schedule()
    with pytest.raises(ScheduleError, match=r"factor must be a positive int, got 0"):
        s[C].split(C.op.axis[0], factor=0)


def test_axis_of_other_stage():
    A, B, C = matmul_dag(4, 4, 4)
    D = te.compute((4, 4), lambda i, j: C[i, j] + 1.0, name="D")
    s = kiln.create_schedule(D)
    with pytest.raises(ScheduleError, match=r"axis 'i': it is not an axis of stage 'D'"):
        s[D].reorder(C.op.axis[0], D.op.axis[1])


def test_fuse_not_adjacent():
    A = te.placeholder((2, 3, 4), name="A")
    B = te.compute((2, 3, 4), lambda i, j, k: A[i, j, k], name="B")
    s = kiln.create_schedule(B)
    i, j, k = B.op.axis
    with pytest.raises(ScheduleError, match=r"fuse axes \['i', 'k'\] of stage 'B'.*adjacent"):
        s[B].fuse(i, k)


def test_fuse_spatial_with_reduce():
    A, B, C, s = _matmul_schedule()
    j, k = C.op.axis[1], C.op.reduce_axis[0]
    with pytest.raises(ScheduleError, match=r"spatial and reduce axes cannot be fused"):
        s[C].fuse(j, k)


def test_parallel_inside_parallel():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    s = kiln.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    with pytest.raises(ScheduleError, match=r"parallel inside parallel"):
        s[B].parallel(B.op.axis[1])


def test_parallel_inside_parallel_through_compute_at():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")
    s = kiln.create_schedule(C)
    s[C].parallel(C.op.axis[0])
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].parallel(B.op.axis[1])
    with pytest.raises(ScheduleError, match=r"stage 'B'.*parallel inside parallel"):
        kiln.lower(s, [A, C])


def test_inline_reduction():
    A, B, C = matmul_dag(4, 4, 4)
    D = te.compute((4, 4), lambda i, j: C[i, j] + 1.0, name="D")
    s = kiln.create_schedule(D)
    with pytest.raises(ScheduleError, match=r"cannot inline stage 'C': it has a reduction"):
        s[C].compute_inline()


def test_inline_output():
    A, B, C, s = _matmul_schedule()
    A2 = te.placeholder((4,), name="X")
    Y = te.compute((4,), lambda i: A2[i] + 1.0, name="Y")
    s2 = kiln.create_schedule(Y)
    with pytest.raises(ScheduleError, match=r"cannot inline stage 'Y': it is an output"):
        s2[Y].compute_inline()


def test_schedule_placeholder():
    A, B, C, s = _matmul_schedule()
    with pytest.raises(ScheduleError, match=r"stage 'A': it is a placeholder"):
        s[A].compute_inline()


def test_cache_write_after_split():
    A, B, C, s = _matmul_schedule()
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match=r"cache_write of stage 'C' must come before"):
        s.cache_write(C, "local")


def test_compute_at_non_consumer():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: A[i] + 1.0, name="C")
    D = te.compute((8,), lambda i: B[i] + C[i], name="D")
    s = kiln.create_schedule(D)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(LoweringError, match=r"neither 'C' nor a stage computed inside it reads it"):
        kiln.lower(s, [A, D])


def test_output_missing_from_args():
    A, B, C, s = _matmul_schedule()
    with pytest.raises(LoweringError, match=r"output 'C' is not among the arguments"):
        kiln.lower(s, [A, B])


def test_input_missing_from_args():
    A, B, C, s = _matmul_schedule()
    with pytest.raises(LoweringError, match=r"input 'B' is read but is not among"):
        kiln.lower(s, [A, C])


def test_unknown_tensor_in_schedule():
    A, B, C, s = _matmul_schedule()
    X = te.placeholder((3,), name="X")
    with pytest.raises(ScheduleError, match=r"'X' is not part of this schedule"):
        s[X]


def test_expression_truth_value():
    A = te.placeholder((3,), name="A")
    with pytest.raises(TypeError, match=r"no truth value"):
        bool(A[0] < 1.0)
