"""Default schedules for the slow vision classes of issue 33 item 2: a depthwise window of 25+
taps keeps its taps outside the register tile on AVX-512 (and stays correct), and a vector
axis between one and two 16-lane vectors long is not taken whole."""
import numpy as np
import pytest

from kiln.autotune.space.defaults import _vector_tile
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.te.reference import evaluate
from tests.util import run_config, task_inputs

AVX2 = "llvm -mcpu=haswell"
AVX512 = "llvm -mcpu=skylake-avx512"


def _window_knob(task):
    space = SearchSpace(task)
    config = space.default_config()
    (name,) = [k for k in config if k.endswith("/window")]
    return space, config, config[name]


@pytest.mark.parametrize("k,target,mode", [(7, AVX512, 1), (5, AVX512, 1), (3, AVX512, 2),
                                           (7, AVX2, 2)])
def test_window_mode_by_taps_and_register_file(k, target, mode):
    task = Task.from_op("depthwise_conv2d_nchwc", (1, 48, 13, 13, k, k, 1, k // 2, 16),
                        target=target)
    assert _window_knob(task)[2] == mode


def test_a_pool_keeps_its_taps_inside():
    task = Task.from_op("pooling", (1, 16, 15, 15, 5, 1), target=AVX512)
    assert _window_knob(task)[2] == 2


@pytest.mark.parametrize("shape", [(1, 40, 11, 11, 7, 7, 1, 3, 8), (1, 32, 17, 17, 5, 5, 2, 2, 16)])
def test_taps_outside_default_matches_the_reference(shape):
    """The default (mode 1 on this machine when it has AVX-512) at prime sizes and stride 2."""
    task = Task.from_op("depthwise_conv2d_nchwc", shape)
    space, config, _ = _window_knob(task)
    inputs = task_inputs(task, seed=1)
    (want,) = evaluate(list(task.outputs), inputs)
    (got,) = run_config(task, space, config, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("extent,lanes,tile", [
    (24, 16, 8), (25, 16, 5), (20, 16, 10), (32, 16, 32), (16, 16, 16), (12, 16, 12),
    (7, 16, 7), (17, 16, 16), (12, 8, 12), (24, 8, 8)])
def test_vector_tile(extent, lanes, tile):
    """Between one and two 16-lane vectors: a divisor (8 = half a vector, else a partial
    one), never the whole axis (24 -> 8, 25 -> 5); AVX2 keeps taking a short axis whole."""
    assert _vector_tile(extent, lanes) == tile
