"""Cache tiles of the implicit-GEMM int8 convs on VNNI targets (te/ops/quantized_vnni_conv.py,
graph/passes/int8_vnni_conv.py) for the default schedule (space_defaults.py).

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

from ..codegen.dot4 import dot4_strategies, target_features
from ..codegen.target import Target
from ..te.tensor import ComputeOp
from .space_int8 import is_dot4_gemm

# the reduce axes of an implicit-GEMM conv: taps ry, rx, channel words
IMPLICIT_CONV_REDUCE_AXES = 3


def one_register_tile_per_cache_tile(target: Target, op: ComputeOp) -> bool:
    """Whether `op` is an implicit-GEMM int8 conv (a dot4 GEMM over taps and channel words)
    on a VNNI target, whose cache tile is then one register tile (module docstring)."""
    if not is_dot4_gemm(op) or len(op.reduce_axis) != IMPLICIT_CONV_REDUCE_AXES:
        return False
    strategies = dot4_strategies(target_features(target))
    return bool(strategies) and strategies[0][1] == "vnni"
