"""The integer dot-product block of the features: an int8 kernel's vector counts its dot4 /
dot2 lanes and their multiply-adds (not float math), and describes its register tile, so two
schedules of one int8 task with other register tiles get other rows."""
from __future__ import annotations

import math

import numpy as np
import pytest

from kiln.autotune.database import Choice, Database, Record
from kiln.autotune.features import (FEATURE_NAMES, FEATURE_VERSION, N_FEATURES, V1_LENGTH,
                                    V1_VERSION, extract_features, upgrade_vector)
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.schedule.ir import Allocate, Buffer, BufferLoad, For, ForKind, PrimFunc, Scope, Store
from kiln.schedule.lower import lower
from kiln.te import expr as E
from kiln.te.ops.int8.core import matmul_int8x4
from kiln.te.tensor import placeholder

TARGET = "llvm -mcpu=znver4"


def _named(vector: np.ndarray) -> dict[str, float]:
    return {name: float(v) for name, v in zip(FEATURE_NAMES, vector)}


def _unlog(x: float) -> float:
    return 2.0 ** x - 1.0


def _register_tile_func(call: str) -> PrimFunc:
    """L[i, j] += call(A[i, k], B[k, j]) for k serial(8) > i unrolled(4) > j vectorized(16):
    a 4 x 16-lane register tile fed by 4 broadcast words of A and 16 words of B per k."""
    A = Buffer("A", "int32", (4, 8), Scope.PARAM)
    B = Buffer("B", "int32", (8, 16), Scope.PARAM)
    L = Buffer("L", "int32", (4, 16), Scope.LOCAL)
    i, j, k = (E.Var("int32", n) for n in "ijk")
    acc = i * 16 + j
    dot = E.call(call, BufferLoad("int32", A, i * 8 + k), BufferLoad("int32", B, k * 16 + j))
    store = Store(L, acc, BufferLoad("int32", L, acc) + dot)
    body = For(k, E.const(0), E.const(8), ForKind.SERIAL,
               For(i, E.const(0), E.const(4), ForKind.UNROLLED,
                   For(j, E.const(0), E.const(16), ForKind.VECTORIZED, store)))
    return PrimFunc("tile", (A, B), Allocate(L, body))


@pytest.mark.parametrize("call, macs_per_dot", [("dot4_u8s8", 4), ("dot2_s16", 2)])
def test_register_tile_figures_on_hand_written_ir(call, macs_per_dot):
    f = _named(extract_features(_register_tile_func(call)))
    dots = 8 * 4 * 16
    assert _unlog(f["log_int_dots"]) == pytest.approx(dots, rel=1e-5)
    assert _unlog(f["log_int_macs"]) == pytest.approx(macs_per_dot * dots, rel=1e-5)
    assert _unlog(f["log_dot_tile_dots"]) == pytest.approx(4 * 16, rel=1e-5)
    assert _unlog(f["log_dot_tile_operand_words"]) == pytest.approx(4 + 16, rel=1e-5)
    assert f["dot_tile_dots_per_operand_word"] == pytest.approx(64 / 20)
    assert f["dot_tile_accumulator_vectors"] == 4 and f["dot_tile_lanes"] == 16
    param_bytes = (4 * 8 + 8 * 16) * 4
    assert f["log_dot_ops_per_byte"] == pytest.approx(
        math.log2((1 + 2 * macs_per_dot * dots) / (1 + param_bytes)), rel=1e-5)
    assert f["log_float_math"] == 0.0          # a dot product is not float math


def _matmul_int8_task(m=7, k4=5, n=33) -> Task:
    a = placeholder((m, k4), "int32", "a")
    b = placeholder((k4, n), "int32", "b")
    c = matmul_int8x4(a, b)
    return Task("matmul_int8x4", (c,), (a, b, c), TARGET)


def _features(space: SearchSpace, config: dict) -> dict[str, float]:
    sch, args = space.apply(config)
    return _named(extract_features(lower(sch, args, name="mm")))


def test_int8_matmul_dot_count_is_the_arithmetic_and_register_tiles_differ():
    m, k4, n = 7, 5, 33                          # primes: no tile divides evenly
    space = SearchSpace(_matmul_int8_task(m, k4, n))
    default = space.default_config()
    f = _features(space, default)
    assert _unlog(f["log_int_dots"]) == pytest.approx(m * n * k4, rel=1e-5)
    assert _unlog(f["log_int_macs"]) == pytest.approx(4 * m * n * k4, rel=1e-5)
    assert f["log_float_math"] == 0.0
    # the same schedule with a 1-row register tile instead of the default's 7 rows
    one_row = _features(space, {**default, "s0/tile/0": [1, 1]})
    assert default["s0/tile/0"] == [1, 7]
    assert f["dot_tile_accumulator_vectors"] == 7 * one_row["dot_tile_accumulator_vectors"]
    assert f["dot_tile_dots_per_operand_word"] > one_row["dot_tile_dots_per_operand_word"]
    assert _unlog(one_row["log_int_dots"]) == pytest.approx(m * n * k4, rel=1e-5)


def test_upgrade_vector_carries_v1_vectors_without_dot_products():
    v1 = np.arange(V1_LENGTH, dtype=np.float32)         # float_math != 0: maybe dot products
    float_math = FEATURE_NAMES.index("log_float_math")
    up = upgrade_vector(V1_VERSION, v1, ("float32", "float32", "int64"))
    assert up.shape == (N_FEATURES,) and not up[V1_LENGTH:].any()
    np.testing.assert_array_equal(up[:V1_LENGTH], v1)
    # packed int8 words: v1 counted their dot products as float math
    assert upgrade_vector(V1_VERSION, v1, ("int32", "int32", "int32")) is None
    assert upgrade_vector(V1_VERSION, v1, ("uint8", "float32")) is None
    assert upgrade_vector(V1_VERSION, v1, ()) is None                 # unknown task
    no_calls = v1.copy()
    no_calls[float_math] = 0.0                                        # certainly no dots
    np.testing.assert_array_equal(upgrade_vector(V1_VERSION, no_calls, ())[:V1_LENGTH],
                                  no_calls)
    assert upgrade_vector("v0-other", v1, ("float32",)) is None
    assert upgrade_vector(V1_VERSION, v1[:5], ("float32",)) is None  # wrong length
    full = np.ones(N_FEATURES, np.float32)
    assert upgrade_vector(FEATURE_VERSION, full, ()) is full


def test_database_reads_float_tasks_v1_vectors_as_today_s_layout(tmp_path):
    db = Database(tmp_path / "f.db")
    float_task = Task.from_op("matmul", (16, 8, 24))
    int8_task = _matmul_int8_task()
    v1 = np.linspace(0, 1, V1_LENGTH, dtype=np.float32)     # float_math != 0
    for task in (float_task, int8_task):
        db.commit_task(task.workload_key, task.description, task.shapes, task.flops)
        db.commit_record(Record(task.workload_key, TARGET, {"s0/unroll": 0}, (1e-3,), "OK"),
                         v1, V1_VERSION)
    new = np.full(N_FEATURES, 2.0, np.float32)
    db.commit_record(Record(float_task.workload_key, TARGET, {"s0/unroll": 1}, (2e-3,), "OK"),
                     new, FEATURE_VERSION)
    rows = db.feature_rows(TARGET, FEATURE_VERSION)
    assert set(rows) == {float_task.workload_key}       # the int8 task's v1 row is unread
    X, seconds = rows[float_task.workload_key]
    np.testing.assert_array_equal(X[0], np.concatenate([v1, np.zeros(N_FEATURES - V1_LENGTH)]))
    np.testing.assert_array_equal(X[1], new)
    np.testing.assert_allclose(seconds, [1e-3, 2e-3])
    assert len(db.feature_vectors(float_task.workload_key, TARGET, FEATURE_VERSION)) == 2
    assert db.feature_vectors(int8_task.workload_key, TARGET, FEATURE_VERSION) == {}
    # an explicit read of the old layout still gets it as stored
    old = db.feature_rows(TARGET, V1_VERSION)
    assert set(old) == {float_task.workload_key, int8_task.workload_key}


def test_confirmation_candidates_of_float_tasks_upgrade(tmp_path):
    db = Database(tmp_path / "c.db")
    float_task, int8_task = Task.from_op("matmul", (16, 8, 24)), _matmul_int8_task()
    v1 = [0.5] * V1_LENGTH                                    # float_math != 0
    for task in (float_task, int8_task):
        db.commit_task(task.workload_key, task.description, task.shapes, task.flops)
        candidates = ({"config": {}, "seconds": 1.0, "features": v1,
                       "feature_version": V1_VERSION},)
        db.commit_choice(Choice(task.workload_key, TARGET, 1, {}, True, 1.0, 1.0, 1.0,
                                candidates))
    by_task = {c.task_key: c.candidates[0] for c in db.latest_choices()}
    assert by_task[float_task.workload_key]["feature_version"] == FEATURE_VERSION
    assert by_task[float_task.workload_key]["features"] == v1 + [0.0] * (N_FEATURES
                                                                          - V1_LENGTH)
    assert by_task[int8_task.workload_key]["feature_version"] == V1_VERSION
