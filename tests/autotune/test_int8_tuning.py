"""Tuning an int8 task: the packed dot4 conv is a task like an fp32 one, its records and feature
vectors land in the database, and the best schedule rebuilt from it is exact."""
from __future__ import annotations

import numpy as np
import pytest

from kiln.autotune.database import Database
from kiln.autotune.features import FEATURE_VERSION
from kiln.autotune.measure import MeasureOptions
from kiln.autotune.task import Task
from kiln.autotune.tuner import build_best, canonical_target, tune_task
from kiln.graph.ops.int8.core import _unpack_words
from kiln.graph.reference import conv_nchw
from kiln.te.ops.int8.core import conv2d_int8x4, pack_weight_int8x4
from kiln.te.tensor import placeholder

FAST = MeasureOptions(timeout=60.0, repeat=2, min_repeat_seconds=0.0)


def _task():
    x = placeholder((1, 3, 7, 5), "int32", "x")          # 12 input channels as 3 words
    w = placeholder((11, 3, 3, 3), "int32", "w")
    y = conv2d_int8x4(x, w, pad_word=0x05050505, stride=1, padding=(1, 1, 1, 1))
    return Task("conv2d_int8x4", (y,), (x, w, y), "native")


def test_int8_task_counts_ops_per_multiply_add():
    task = _task()
    # 11 filters x 7 x 5 outputs x (3 words x 3 x 3 taps) x 4 multiply-adds x 2 ops, plus
    # one select per element of the padded input
    assert task.flops == 11 * 7 * 5 * 3 * 9 * 4 * 2 + 3 * 9 * 7


@pytest.mark.slow
def test_tuning_an_int8_conv_records_measurements_and_features(tmp_path):
    db = Database(tmp_path / "t.db")
    task, target = _task(), canonical_target("native")
    result = tune_task(task, "native", trials=4, db=db, search="random", batch_size=2,
                       options=FAST)
    records = db.records(task.workload_key, target)
    assert result.measured == 4 and len(records) == 4
    assert any(r.status == "OK" for r in records), [r.error_text[-200:] for r in records]
    assert len(db.feature_vectors(task.workload_key, target, FEATURE_VERSION)) == 4

    rng = np.random.default_rng(1)
    x8 = rng.integers(0, 256, (1, 12, 7, 5)).astype(np.uint8)
    w8 = rng.integers(-128, 128, (11, 12, 3, 3)).astype(np.int8)
    x_words = np.ascontiguousarray(x8.reshape(1, 3, 4, 7, 5).transpose(0, 1, 3, 4, 2)).view(
        np.int32)[..., 0]
    out = np.empty((1, 11, 7, 5), np.int32)
    build_best(task, "native", db)(x_words, pack_weight_int8x4(w8, 1), out)
    padded = np.pad(x8, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=5)
    want = conv_nchw(padded.astype(np.int64), w8.astype(np.int64),
                      {"pads": (0, 0, 0, 0), "strides": (1, 1), "dilations": (1, 1),
                       "groups": 1}, (7, 5))
    np.testing.assert_array_equal(out, want)
    assert _unpack_words(x_words, 1, np.uint8).shape == x8.shape
