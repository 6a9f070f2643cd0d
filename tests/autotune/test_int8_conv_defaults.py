"""The cache tile of an implicit-GEMM int8 conv on a VNNI target is one register tile
(autotune/space_int8_conv.py); other targets and plain int8 GEMMs keep the prepacked GEMM
defaults."""
from __future__ import annotations

from kiln.autotune.space import SearchSpace
from kiln.autotune.space_int8_conv import one_register_tile_per_cache_tile
from kiln.autotune.task import Task
from kiln.codegen import Target
from kiln.te.ops.quantized import matmul_int8x4
from kiln.te.ops.quantized_vnni_conv import conv_int8x4_panels
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
