"""Default schedules of int8 kernels (autotune/space/int8.py, space_defaults.py): the register
tile leaves room for the dot4 lowering's temporaries where it has some (AVX2/AVX-512BW
madd, not VNNI), and a window anchor (the NCHW depthwise conv) whose rows no vector count
divides takes a tail-free odd vector; every default kernel is exact against numpy."""
from __future__ import annotations

import numpy as np
import pytest

from kiln import codegen
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.space.int8 import MADD_TEMPORARIES, dot4_register_budget
from kiln.autotune.task import Task
from kiln.codegen.target import Target
from kiln.graph.reference import conv_nchw
from kiln.schedule.lower import lower
from kiln.te.ops.int8.core import conv2d_integer, matmul_int8x4, pack_weight_int8x4
from kiln.te.tensor import placeholder

AVX2 = "llvm -mcpu=haswell"


def _tile(space: SearchSpace, stage_prefix: str = "s0") -> list[int]:
    config = space.default_config()
    names = sorted((k for k in config if k.startswith(f"{stage_prefix}/tile/")),
                   key=lambda k: int(k.split("/")[2]))
    return [config[k][1] for k in names]


def _gemm(m: int, k4: int, n: int, symmetric: bool = True):
    a = placeholder((m, k4), "int32", "a")
    b = placeholder((k4, n), "int32", "b")
    c = matmul_int8x4(a, b, symmetric=symmetric)
    return a, b, c


@pytest.mark.parametrize("target,budget", [(AVX2, 16 - MADD_TEMPORARIES),
                                           ("llvm -mcpu=znver4", 24)])
def test_dot4_register_budget_follows_the_lowering(target, budget):
    a, b, c = _gemm(96, 64, 96)
    t = Target.from_string(target)
    assert dot4_register_budget(t, c.op, 24 if t.vector_bits >= 512 else 12) == budget
    rows, cols = _tile(SearchSpace(Task("mm", (c,), (a, b, c), target)))
    lanes = 16 if t.vector_bits >= 512 else 8
    assert cols % lanes == 0 and rows * cols // lanes <= budget
    if target == AVX2:
        assert (rows, cols) == (4, 16)          # not the fp32 GEMM's 6 x 16


def test_fp32_budget_is_unchanged():
    space = SearchSpace(Task.from_op("matmul", (96, 64, 96), target=AVX2))
    config = space.default_config()
    tiles = [config[k][1] for k in sorted(config) if "/tile/" in k]
    assert tiles == [6, 16]


@pytest.mark.parametrize("m,k4,n", [(13, 7, 37), (1, 3, 24), (29, 5, 16)])
def test_default_int8_gemm_is_exact(m, k4, n):
    a, b, c = _gemm(m, k4, n)
    task = Task("mm", (c,), (a, b, c), "native")
    sch, args = SearchSpace(task).apply(SearchSpace(task).default_config())
    f = codegen.build(lower(sch, args, name="mm"), target="native", cache_kernel=False)
    rng = np.random.default_rng(m)
    a8 = rng.integers(0, 256, (m, 4 * k4)).astype(np.uint8)
    w8 = rng.integers(-127, 128, (4 * k4, n)).astype(np.int8)
    a8[0, :] = 0
    out = np.empty((m, n), np.int32)
    f(a8.view(np.int32), pack_weight_int8x4(w8, 0), out)
    np.testing.assert_array_equal(out, a8.astype(np.int32) @ w8.astype(np.int32))


@pytest.mark.parametrize("width,stride,xdtype", [(28, 1, "uint8"), (30, 2, "int8"),
                                                 (13, 1, "uint8")])
def test_depthwise_default_takes_a_tail_free_vector(width, stride, xdtype):
    channels = 5
    x = placeholder((1, channels, width, width), xdtype, "x")
    w = placeholder((channels, 1, 3, 3), "int8", "w")
    zp = 3 if xdtype == "uint8" else -7
    y = conv2d_integer(x, w, zp, stride, (1, 1, 1, 1), 1, channels)
    task = Task("dw", (y,), (x, w, y), "native")
    space = SearchSpace(task)
    out_w = y.shape[3]
    label = next(k for k in space.default_config() if k.endswith("/window")).split("/")[0]
    vector = _tile(space, label)[-1]
    if out_w % 8:       # (28 -> 14, 15 -> 15 whole, 13 -> 13 whole)
        assert out_w % vector == 0 and vector > 1
    sch, args = space.apply(space.default_config())
    f = codegen.build(lower(sch, args, name="dw"), target="native", cache_kernel=False)
    rng = np.random.default_rng(width)
    info = np.iinfo(xdtype)
    x8 = rng.integers(info.min, info.max + 1, x.shape).astype(xdtype)
    w8 = rng.integers(-128, 128, w.shape).astype(np.int8)
    out = np.empty(y.shape, np.int32)
    f(x8, w8, out)
    padded = np.pad(x8.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=zp)
    want = conv_nchw(padded, w8.astype(np.int64), {"pads": (0, 0, 0, 0), "strides": (stride,
                      stride), "dilations": (1, 1), "groups": channels}, y.shape[2:])
    np.testing.assert_array_equal(out, want)


def test_dot4_vector_tile_leaves_no_guard():
    from kiln.autotune.space.int8 import dot4_vector_tile
    assert dot4_vector_tile(49, 8, 8) == 7 and dot4_vector_tile(196, 8, 8) == 7
    assert dot4_vector_tile(3136, 8, 16) == 16          # whole vectors stay as they are
    assert dot4_vector_tile(37, 8, 8) == 8              # a prime: the guarded tail


@pytest.mark.parametrize("m,k4,n", [(116, 4, 96), (7, 3, 64)])
def test_short_k_pair_gemm_takes_one_panel_a_tile_and_is_exact(m, k4, n):
    """A dot4 GEMM over at most SHORT_K_WORDS words (MobileNetV2's 1x1 expand convs) keeps
    one column panel per cache tile where the activation words are split (AVX2), so LLVM
    does not hoist the rows' halves out of a panel loop and spill them; VNNI keeps its
    tiles."""
    from kiln.autotune.space.int8 import SHORT_K_WORDS, short_k_columns
    from kiln.te.ops.int8.core import panel_weight_pairs, widen_weight_words
    assert k4 <= SHORT_K_WORDS
    rng = np.random.default_rng(k4)
    w8 = rng.integers(-128, 128, (4 * k4, n)).astype(np.int8)
    panels = panel_weight_pairs(widen_weight_words(pack_weight_int8x4(w8, 0), 1), 16)
    a = placeholder((m, k4), "int32", "a")
    b = placeholder(panels.shape, "int32", "b")
    c = matmul_int8x4(a, b, n=n)
    assert short_k_columns(Target.from_string(AVX2), c.op)
    assert not short_k_columns(Target.from_string("llvm -mcpu=znver4"), c.op)
    longer = matmul_int8x4(placeholder((m, 8), "int32", "a8"), placeholder(
        (panels.shape[0], 8, 2, 16), "int32", "b8"), n=n)
    assert not short_k_columns(Target.from_string(AVX2), longer.op)
    task = Task("mm", (c,), (a, b, c), AVX2)
    config = SearchSpace(task).default_config()
    assert config["s0/tile/1"] == [1, 16]
    sch, args = SearchSpace(task).apply(config)
    f = codegen.build(lower(sch, args, name="mm"), target=AVX2, cache_kernel=False)
    a8 = rng.integers(0, 256, (m, 4 * k4)).astype(np.uint8)
    a8[0] = 255
    out = np.empty((m, n), np.int32)
    f(a8.view(np.int32), panels, out)
    np.testing.assert_array_equal(out, a8.astype(np.int32) @ w8.astype(np.int32))
