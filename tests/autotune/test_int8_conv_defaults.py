"""Default tiles of int8 convs on AVX-512 / VNNI targets (autotune/space/int8_conv.py): the
cache tile of an implicit-GEMM int8 conv on a VNNI target is one register tile (other targets
and plain int8 GEMMs keep the prepacked GEMM defaults); an NHWC depthwise conv's register
tile takes at most 8 pixels on a 512-bit target (exact on the host)."""
from __future__ import annotations

import numpy as np

from kiln import codegen
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.space.int8_conv import (depthwise_register_rows,
                                           one_register_tile_per_cache_tile)
from kiln.autotune.task import Task
from kiln.codegen import Target
from kiln.schedule.lower import lower
from kiln.te.ops.int8.core import matmul_int8x4
from kiln.te.ops.int8.nhwc import depthwise_conv2d_integer_nhwc
from kiln.te.ops.int8.vnni_conv import conv_int8x4_panels
from kiln.te.tensor import placeholder

VNNI = Target.from_string("llvm -mcpu=znver4")
AVX2 = Target.from_string("llvm -mcpu=znver3")


def _conv(kernel=(1, 1), c4=6, n=144, block=16, hw=56):
    pad = kernel[0] // 2
    x = placeholder((1, hw + 2 * pad, hw + 2 * pad, c4), "int32", "x")
    w = placeholder((-(-n // block), kernel[0] * kernel[1] * c4, block), "int32", "w")
    return x, w, conv_int8x4_panels(x, w, n, kernel, (hw, hw))


def test_vnni_conv_cache_tile_is_one_register_tile():
    for kernel, c4, n, block, hw in (((1, 1), 6, 144, 16, 56), ((3, 3), 16, 64, 32, 56),
                                     ((3, 3), 128, 512, 32, 7)):
        x, w, out = _conv(kernel, c4, n, block, hw)
        assert one_register_tile_per_cache_tile(VNNI, out.op)
        cfg = SearchSpace(Task("c", (out,), (x, w, out), VNNI)).default_config()
        assert cfg["s0/tile/0"][0] == 1 and cfg["s0/tile/1"] == [1, block], cfg
        assert cfg["s0/tile/0"][1] > 1, cfg
        assert not one_register_tile_per_cache_tile(AVX2, out.op)
    x, w, out = _conv()
    cfg = SearchSpace(Task("c", (out,), (x, w, out), AVX2)).default_config()
    assert cfg["s0/tile/0"][0] > 1 or cfg["s0/tile/1"][0] > 1, cfg
    a = placeholder((3136, 6), "int32", "a")
    b = placeholder((6, 144), "int32", "b")
    assert not one_register_tile_per_cache_tile(VNNI, matmul_int8x4(a, b).op)


def _depthwise(h, w, c, stride=1):
    x = placeholder((1, h, w, c), "uint8", "x")
    wt = placeholder((3, 3, c), "int8", "w")
    return x, wt, depthwise_conv2d_integer_nhwc(x, wt, 3, stride, (1, 1, 1, 1))


def test_depthwise_register_tile_takes_at_most_8_pixels_on_512_bits():
    for w, c, want in ((56, 144, 8), (28, 48, 7), (14, 16, 7), (56, 64, None)):
        x, wt, out = _depthwise(5, w, c)
        cfg = SearchSpace(Task("d", (out,), (x, wt, out), VNNI)).default_config()
        if want is not None:
            assert cfg["s0/tile/2"][1] == want, cfg
        assert cfg["s0/tile/2"][1] <= 8, cfg
    assert depthwise_register_rows(AVX2, out.op, 56, 14) == 14
    assert depthwise_register_rows(VNNI, out.op, 13, 13) == 13      # no divisor in [4, 8]
    assert depthwise_register_rows(VNNI, out.op, 56, 6) == 6


def test_depthwise_with_the_host_defaults_is_exact():
    """A 14-pixel-wide, one-vector depthwise conv (capped on a 512-bit host) against numpy,
    zero point 3 in the padding."""
    x, wt, out = _depthwise(5, 14, 16, 1)
    host = Target.from_string("native")
    space = SearchSpace(Task("d", (out,), (x, wt, out), host))
    sch, args = space.apply(space.default_config())
    fn = codegen.build(lower(sch, args, name="d"), target=host, cache_kernel=False)
    rng = np.random.default_rng(5)
    xn = rng.integers(0, 256, (1, 5, 14, 16)).astype(np.uint8)
    wn = rng.integers(-128, 128, (3, 3, 16)).astype(np.int8)
    got = np.empty(out.shape, np.int32)
    fn(xn, wn, got)
    xp = np.pad(xn, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=3).astype(np.int64)
    want = sum(xp[:, ry:ry + 5, rx:rx + 14] * wn[ry, rx].astype(np.int64)
               for ry in range(3) for rx in range(3))
    np.testing.assert_array_equal(got, want)
