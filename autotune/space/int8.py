"""Register budgets of int8 (dot4) anchors for the default schedule (space_defaults.py).

A dot4 intrinsic's lowering (codegen/dot4.py) holds vector registers besides the register
tile's accumulators, and how many depends on the target: `vpdpbusd` (VNNI) reads its two
operands and nothing else, like an fp32 FMA, while the AVX2/AVX-512BW `vpmaddubsw` +
`vpmaddwd` lowerings keep per weight vector its word and (sign trick) its 128 * sum term,
and per broadcast activation its masked or |a - 128| bytes plus the pmaddwd ones. With 16
AVX2 registers the fp32 GEMM's 6 x 2-vector tile (12 accumulators) then spills every k:
1024^3 matmul_int8x4, 1 thread, one run: 6 x 16 63.6 GOPS, 4 x 16 57.0, 2 x 32 55.0
(noisy: onnxruntime's MatMulInteger 93.4 in the same run). The int16-pair form
(dot4_u8s16, graph/passes/int8/widen.py) holds per broadcast row its even and odd halves
and per weight vector its two pair vectors: 4 x 16 takes all 16 registers without a spill
(checked in the 1024^3 kernel's assembly).
"""
from __future__ import annotations

from ...codegen.dot4 import dot4_strategies, target_features
from ...codegen.target import Target
from ...te.expr import DOT4_INTRINSICS, Call
from ...te.ops.tags import MATMUL, kind_of
from ...te.tensor import ComputeOp
from ...te.visit import walk

# vector registers the madd lowerings hold besides the accumulators, per register file
MADD_TEMPORARIES = 7
# ... and dot2_s16 (one vpmaddwd of int16 pairs: te/ops/int8/pairs.py), which holds a
# broadcast row, the tile's weight vectors and a product
DOT2_TEMPORARIES = 4


def uses_dot4(op: ComputeOp) -> bool:
    return any(isinstance(node, Call) and node.name in DOT4_INTRINSICS
               for node in walk(op.body))


def _dot_calls(op: ComputeOp) -> set[str]:
    return {node.name for node in walk(op.body)
            if isinstance(node, Call) and node.name in DOT4_INTRINSICS}


def is_dot4_gemm(op: ComputeOp) -> bool:
    """A matmul summing dot4 words: its K may be as short as a window's (a 24-channel 1x1
    conv as a pixel-major GEMM sums 6 words) but it is a GEMM, not a memory-bound window
    reduction: it takes the GEMM's cache tiles (rows dividing the axis, no guard inside the
    register tile), not a whole plane per tile. 3136 x 6 words x 144, 1 thread: 1.9 ms as
    a window (64 x 4-row tiles over 3136 rows, the accumulators in memory), 0.36 ms as a
    GEMM (8 x 4-row tiles)."""
    return kind_of(op.tag) == MATMUL and uses_dot4(op)


def dot4_register_budget(target: Target, op: ComputeOp, budget: int) -> int:
    """Accumulator registers for a register tile of `op`: `budget` (the fp32 rule's 3/4 of
    the register file) unless `op` sums dot4 words and the target lowers them without
    VNNI, then the register file less MADD_TEMPORARIES (AVX2: 16 - 7 = 9, so 4 rows of
    2 vectors)."""
    if not uses_dot4(op):
        return budget
    strategies = dot4_strategies(target_features(target))
    if not strategies or strategies[0][1] == "vnni":
        return budget
    registers = 32 if target.vector_bits >= 512 else 16
    held = (DOT2_TEMPORARIES if _dot_calls(op) <= {"dot2_s16", "dot2_s16s8"}
            else MADD_TEMPORARIES)
    return min(budget, registers - held)


def dot4_vector_tile(extent: int, lanes: int, tile: int) -> int:
    """The vector tile of a dot4 anchor's last axis: `tile` (the fp32 rule's) when it
    divides the axis, else the widest divisor of at least half a vector and at most one
    (49 pixels -> 7 lanes, 196 -> 7), so no guard lands in the register tile. A guarded
    tail kept the int8 conv's accumulators in memory, reloaded and stored on every k
    (ResNet-18's 7 x 7 im2col GEMMs, 512 -> 512: 5.9 -> 4.8 ms, 1 thread); an odd width
    past one vector (14 lanes) was scalarised by LLVM (196 pixels: 5 -> 18 ms)."""
    if extent % tile == 0:
        return tile
    fits = [d for d in range(max(2, lanes // 2), lanes + 1) if extent % d == 0]
    return max(fits) if fits else tile


# a dot4 GEMM summing at most this many words per output keeps one column panel per cache
# tile on a target without VNNI (short_k_columns)
SHORT_K_WORDS = 6


def short_k_columns(target: Target, op: ComputeOp) -> bool:
    """Whether `op` is a dot4 GEMM over at most SHORT_K_WORDS words per output on a target
    that splits the activation words (no VNNI): its cache tile then takes one column panel,
    not several. With several, LLVM hoists the split halves of the register tile's rows (4
    rows x K words x 2) out of the column-panel loop, and they spill: MobileNetV2's 1x1
    expand convs 12544 x 4 words -> 96 and 3136 x 6 -> 144, 1 thread: 0.90 -> 0.76 ms and
    0.47 -> 0.39 ms with one panel (8 words and more: no change)."""
    if not uses_dot4(op):
        return False
    strategies = dot4_strategies(target_features(target))
    if not strategies or strategies[0][1] == "vnni":
        return False
    words = 1
    for axis in op.reduce_axis:
        words *= axis.extent
    return words <= SHORT_K_WORDS


def one_row_tile_per_cache_tile(target: Target, op: ComputeOp) -> bool:
    """Whether `op` is a dot4 GEMM on a VNNI target, whose cache tile then takes one register
    tile of rows (the fp32 rule takes up to 8). Its int32 accumulators are 32 columns wide
    (two zmm), so 8 x 8 rows made the local tile 64 x 128 words, all of L1: with a short K
    the zeroing and the copy-out of that tile cost as much as the vpdpbusd (znver4, 1
    thread, kernel alone: MobileNetV2-shaped 12544 x 4 words -> 96 0.22 -> 0.10 ms; 1024^3,
    BERT's 128 x 256 -> 1024 and 128 x 1024 -> 256 within noise)."""
    if not is_dot4_gemm(op):
        return False
    strategies = dot4_strategies(target_features(target))
    return bool(strategies) and strategies[0][1] == "vnni"
