"""Graph passes: verification, constant folding, DCE, CSE, simplification, layouts (channel
blocks, Winograd convs), fusion.

`optimize(graph)` runs PIPELINE, a readable list of (name, pass) pairs; each pass is a pure
function Graph -> Graph that returns its input unchanged when it has nothing to do.
"""
from __future__ import annotations

import logging
from typing import Callable

from ...codegen.target import Target
from ..ir import Graph
from .layout.blocked import to_blocked_layout
from .cse import eliminate_common_subexpressions
from .dce import eliminate_dead_code
from .fold_constants import fold_constants
from .fusion import FusedGroup, fuse_operators
from .half_convs import convs_in_float32
from .int8.implicit import to_implicit_int8_convs
from .int8.vnni_conv import to_vnni_int8_convs
from .int8.nhwc import to_pixel_major_int8
from .int8.pointwise import flatten_pointwise_int8, im2col_int8_convs
from .int8.pairs import to_int16_pairs
from .int8.concat import requantized_concats
from .int8.tables import to_lookup_tables
from .int8.panels import panel_int8_weights, view_int8_rows
from .int8.perm import to_saturation_safe_pairs
from .int8.widen import widen_int8_weights
from .layout.conv_weights import pack_conv_weights
from .layout.prepack import prepack_matmul_weights
from .int8.quantize import fuse_quantized_kernels, pack_integer_kernels
from .int8.add import onnxruntime_rounded_adds
from .int8.mul import onnxruntime_rounded_muls
from .layout.sink import sink_layout_moves
from .simplify import cancel_transposes, fold_batch_norm, remove_identities, simplify
from .verify import verify_graph
from .layout.winograd import to_winograd

log = logging.getLogger(__name__)

# passes that also take the target the graph is compiled for (None: target-neutral, no-op)
TARGET_PASSES = frozenset({"pixel-major int8", "saturation-safe int8 pairs",
                           "implicit int8 convs",
                           "implicit int8 convs (VNNI)",
                           "widen int8 weights",
                           "int16 activation pairs", "int8 weight panels",
                           "int8 activation views"})

PIPELINE: tuple[tuple[str, Callable[[Graph], Graph]], ...] = (
    ("integer kernels", fuse_quantized_kernels),   # QDQ: before folding dequantizes weights
    ("requantized int8 concats", requantized_concats),   # inputs to the output's scale
    ("int8 tables", to_lookup_tables),   # DQ -> SiLU/sigmoid/... -> Q as 256-entry lookups
    ("quantized muls as onnxruntime rounds them", onnxruntime_rounded_muls),
    ("fold constants", fold_constants),
    ("remove identities", remove_identities),
    ("fold batch norm", fold_batch_norm),
    ("float16 convs in float32", convs_in_float32),   # so they take the float32 conv paths
    ("sink layout moves", sink_layout_moves),   # transposes/reshapes past pointwise ops ...
    ("cancel transposes", cancel_transposes),   # ... where they meet their inverse
    ("fold constants again", fold_constants),   # transposed/reshaped weights become constants
    ("pack integer kernels", pack_integer_kernels),   # int8 weights -> dot4 words
    ("pixel-major int8", to_pixel_major_int8),   # int8 convs as pixel-major GEMMs, NHWC
    ("im2col int8", im2col_int8_convs),       # windowed packed convs -> columns + 1x1
    ("flatten pointwise int8", flatten_pointwise_int8),  # 1x1 packed convs over H*W pixels
    # AVX2 without VNNI: vpmaddubsw where the weight pairs provably cannot saturate ...
    ("saturation-safe int8 pairs", to_saturation_safe_pairs),
    ("implicit int8 convs", to_implicit_int8_convs),   # ... read from padded words, no im2col
    # VNNI: conv GEMMs read padded words in place, weights as column panels
    ("implicit int8 convs (VNNI)", to_vnni_int8_convs),
    ("widen int8 weights", widen_int8_weights),   # ... else int16 weight pairs
    ("int16 activation pairs", to_int16_pairs),   # ... and activations split where made
    ("int8 weight panels", panel_int8_weights),   # VNNI: byte-word weights in column panels
    ("int8 activation views", view_int8_rows),    # ... and uint8 rows read as words in place
    ("quantized adds as onnxruntime rounds them", onnxruntime_rounded_adds),
    ("eliminate common subexpressions", eliminate_common_subexpressions),
    ("eliminate dead code", eliminate_dead_code),
    ("blocked layout", to_blocked_layout),      # after folding: BN-scaled weights are final
    ("winograd", to_winograd),                  # blocked 3x3 stride-1 convs
    ("pack conv weights", pack_conv_weights),   # convs the blocked layout left in NCHW
    ("prepack matmul weights", prepack_matmul_weights),  # constant W -> column panels
    # a layout pass may leave a conversion nobody reads; a group without outputs would be
    # a kernel with nothing to compute
    ("eliminate dead code last", eliminate_dead_code),
)


def optimize(graph: Graph, verify: bool = False, skip: tuple[str, ...] = (),
             target=None) -> Graph:
    """Run PIPELINE but the passes named in `skip`; with `verify`, check the graph's
    invariants after every pass. `target` (a Target or target string) is given to the
    TARGET_PASSES; without one they leave the graph target-neutral."""
    target = None if target is None else Target.from_string(target)   # parsed once, here
    unknown = set(skip) - {name for name, _ in PIPELINE}
    if unknown:
        raise ValueError(f"optimize(skip=...): no pass named {sorted(unknown)}; the passes are "
                         f"{[name for name, _ in PIPELINE]}")
    for name, fn in PIPELINE:
        if name in skip:
            continue
        before = len(graph.nodes)
        graph = fn(graph, target) if name in TARGET_PASSES else fn(graph)
        log.debug("after %s: %d -> %d nodes", name, before, len(graph.nodes))
        if verify:
            verify_graph(graph)
    return graph


__all__ = ["PIPELINE", "FusedGroup", "cancel_transposes", "eliminate_common_subexpressions",
           "eliminate_dead_code", "fold_batch_norm", "fold_constants", "fuse_operators",
           "fuse_quantized_kernels", "pack_integer_kernels",
           "optimize", "pack_conv_weights", "remove_identities", "simplify",
           "sink_layout_moves", "to_blocked_layout",
           "to_winograd", "verify_graph"]
