"""Operator tags: how the autotuner and graph fusion classify a compute stage.

A tag is a comma-separated list whose first item is the stage's fusion class, e.g.
"injective,pad" or "pool,max". `kind_of(tag)` returns that first item.
"""
from __future__ import annotations

ELEMWISE = "elemwise"            # out[i] = f(in[i]) for inputs of the output's shape
BROADCAST = "broadcast"          # elementwise with numpy broadcasting of some inputs
INJECTIVE = "injective"          # each output reads a computed location (transpose, pad, ...)
REDUCTION = "reduction"          # a reduction over some axes (sum, max, softmax parts)
MATMUL = "matmul"                # 2-D matrix product (also dense)
BATCH_MATMUL = "batch_matmul"
CONV2D_NCHW = "conv2d_nchw"      # every conv2d: plain, grouped and depthwise
POOL = "pool"                    # pooling window reductions
PAD = "injective,pad"
# a tag item, not a class: lowering clamps every index of the stage's reads into its tensor's
# extent (schedule/lower.py). For bodies that select between a read and a constant: a select
# computes both values, and a read meant to be discarded must still stay inside its buffer.
# The same values, so the workload key (which ignores tags) does not change.
CLAMP_READS = "clamp_reads"

INJECTIVE_KINDS = frozenset((ELEMWISE, BROADCAST, INJECTIVE))
COMPLEX_KINDS = frozenset((MATMUL, BATCH_MATMUL, CONV2D_NCHW))


def kind_of(tag: str) -> str:
    """The fusion class of a stage tag ("" for an untagged compute)."""
    return tag.split(",", 1)[0]


def clamps_reads(tag: str) -> bool:
    """True when the stage's reads are clamped into their tensors when lowered."""
    return CLAMP_READS in tag.split(",")


def is_injective(tag: str) -> bool:
    """True when the stage can be inlined into its consumers (compute_inline)."""
    return kind_of(tag) in INJECTIVE_KINDS


def is_complex(tag: str) -> bool:
    """True for anchor stages (matmul, conv) that get multi-level tiling."""
    return kind_of(tag) in COMPLEX_KINDS
