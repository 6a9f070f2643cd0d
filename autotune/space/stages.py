"""What a search space is built around: anchors (a reduction and its elementwise epilogue),
the operands worth packing, and outputs computed a row at a time. rules.py finds them; the
defaults and apply.py read them."""
from __future__ import annotations

from dataclasses import dataclass

from ...te.tensor import ComputeOp, Tensor


@dataclass
class Anchor:
    """A reduction stage and, when it has one, the elementwise output that consumes it."""

    op: ComputeOp
    epilogue: ComputeOp | None
    is_output: bool
    packs: tuple = ()       # Pack candidates: input operands worth a panel-major copy
    # the epilogue is reached through inlined stages that branch and rejoin (GELU's
    # x * 0.5 * (1 + erf(x / sqrt2)) reads x twice); its fusion is the `epilogue` knob
    joined: bool = False


@dataclass(frozen=True)
class Pack:
    """Operand `tensor` of an anchor, indexed along dimension `dim` by exactly the anchor's
    spatial axis `axis_pos`: packing copies it as [dim // p, other dims..., dim % p] with
    p = that axis's register (inner) tile, so the tile's panel is contiguous."""

    tensor: Tensor
    dim: int
    axis_pos: int
    knob: str


@dataclass(frozen=True)
class RowGroup:
    """An output computed one row (every axis but the last) at a time, under knob `knob`:
    its row reductions (`members`: reductions along the contiguous last axis into
    [rows..., 1], e.g. softmax's max and sum, layer norm's mean and variance) are split into
    a vectorised partial over a few vectors of lanes and a final reduction over those lanes,
    both computed per row, and the injective `stages` between them (softmax's exp) are
    inlined or computed per row. `out` may be a member itself (a row sum as the output)."""

    out: ComputeOp
    members: tuple[ComputeOp, ...]
    stages: tuple[ComputeOp, ...]
    knob: str
