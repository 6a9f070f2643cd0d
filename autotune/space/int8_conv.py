"""Default tiles of int8 convs on AVX-512 / VNNI targets (space_defaults.py): the cache tile of
the implicit-GEMM convs (te/ops/int8/vnni_conv.py, graph/passes/int8/vnni_conv.py) and
the register tile of the NHWC depthwise convs (te/ops/int8/nhwc.py).

A conv_int8x4_panels is a matmul_prepacked over three reduce axes (the taps ry, rx and the
channel words). The prepacked GEMM defaults give it cache tiles of up to 8 register tiles of
rows and up to 4 column panels, accumulated in a local tile that is zeroed first and read by
the fused requantize epilogue after: with a short K (a 1x1 conv over 4-36 words) that local
tile's traffic costs more than the vpdpbusd. One register tile per cache tile keeps the
accumulators in registers from zeroing to the epilogue (znver4, 1 thread, the kernel alone,
with the fused vpdpbusd accumulate: MobileNetV2's 3136 pixels x 6 words -> 144 channels
0.144 -> 0.055 ms, 12544 x 4 words -> 96 0.220 -> 0.096 ms; onnxruntime's convs 0.092 and
0.188). Long K is indifferent (ResNet-18's 3x3 convs at 56 x 56, 28 x 28 and 7 x 7: within
+-4%, noise), so the rule holds for every such conv.
"""
from __future__ import annotations

from ...codegen.dot4 import dot4_strategies, target_features
from ...codegen.target import Target
from ...te.ops.tags import CONV2D_NCHW
from ...te.tensor import ComputeOp
from .int8 import is_dot4_gemm

# the reduce axes of an implicit-GEMM conv: taps ry, rx, channel words
IMPLICIT_CONV_REDUCE_AXES = 3


def one_register_tile_per_cache_tile(target: Target, op: ComputeOp) -> bool:
    """Whether `op` is an implicit-GEMM int8 conv (a dot4 GEMM over taps and channel words)
    on a VNNI target, whose cache tile is then one register tile (module docstring)."""
    if not is_dot4_gemm(op) or len(op.reduce_axis) != IMPLICIT_CONV_REDUCE_AXES:
        return False
    strategies = dot4_strategies(target_features(target))
    return bool(strategies) and strategies[0][1] == "vnni"


# depthwise_conv2d_integer_nhwc's tag, and the most output pixels of its register tile on a
# target with 32 vector registers (depthwise_register_rows)
DEPTHWISE_NHWC = f"{CONV2D_NCHW},nhwc"
MAX_DEPTHWISE_ROWS = 8


def depthwise_register_rows(target: Target, op: ComputeOp, extent: int, rows: int) -> int:
    """The register tile's output pixels (of `extent`) for an int8 NHWC depthwise conv:
    `rows` (the accumulator budget's choice), or, on a 512-bit target where that is more
    than MAX_DEPTHWISE_ROWS, the largest divisor of the extent in [MAX_DEPTHWISE_ROWS / 2,
    MAX_DEPTHWISE_ROWS] (`rows` when there is none). With channels one vector wide (144 =
    9 x 16: 32 does not divide it) the budget gave 14 pixels, each tap row then loading and
    widening 16 input pixels; 8 or 7 pixels run 1.4-1.7x faster (znver4, 1 thread, the
    kernel alone: MobileNetV2's 56 x 56 x 144 3x3 0.215 -> 0.134 ms, stride 2 0.053 ->
    0.037 ms, 56 x 56 x 48 0.067 -> 0.040 ms). Two-vector tiles already take 7-8 pixels."""
    if op.tag != DEPTHWISE_NHWC or target.vector_bits < 512 or rows <= MAX_DEPTHWISE_ROWS:
        return rows
    fits = [d for d in range(MAX_DEPTHWISE_ROWS // 2, MAX_DEPTHWISE_ROWS + 1) if extent % d == 0]
    return max(fits) if fits else rows
