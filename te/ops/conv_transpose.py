"""2-D transposed convolution (ONNX ConvTranspose) in NCHW, as a direct conv over phases.

A transposed conv scatters every input pixel, times the kernel, into a stride-spaced output
window. Written as a gather (out[oy] = sum of x[iy] * w[ky] over oy + top = iy*s + ky*d), only
every s-th kernel tap meets an input row at a given output row: the taps split by the output
row's phase r = (oy + top) mod s. Per phase, the sum is an ordinary correlation of x with a
sub-kernel of about K / s taps (the sub-pixel decomposition). So the op is built from stages
Kiln's scheduler already handles:

  pad       x shifted/padded for the sub-kernels (an "injective,pad" stage, or none);
  phases    a plain conv2d_nchw (stride 1) of that with s_h * s_w sub-kernels per filter,
            stacked as filters: P[n, (group, phase, filter), q, qx];
  output    out[n, f, oy, ox] = P[n, channel of (f, phase of oy, ox), q(oy), qx(ox)], an
            injective interleave (none at stride 1, where P is already the output).

Per s_h x s_w block of output pixels this does K_h * K_w * C / groups multiply-adds, as the
scatter form does (plus zero taps when the stride does not divide the kernel, and P's one
extra row and column when the pads are not a multiple of the stride); dilating the input with
zeros and running one conv would do s_h * s_w times that. The sub-kernel weight is a
re-layout of the ONNX weight [C, F / groups, KH, KW]: numpy (`pack_conv_transpose_weight`)
when the weight is a constant, else a compute stage (`conv_transpose_weight`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import expr as E
from ..errors import TEError
from ..tensor import Tensor, compute
from ._common import check_tensor, int_tuple, padding4
from .conv import (conv2d_nchw, conv2d_nchw_kpacked_blocked, pack_conv_weight,
                   unpack_conv_weight)
from .tags import INJECTIVE
from .transform import pad


@dataclass(frozen=True)
class PhaseAxis:
    """How one spatial axis of a transposed conv splits into stride phases.

    Kernel tap k lands at output offset k * dilation = stride * offset + phase; within the
    phase's sub-kernel it is tap `offset // conv_dilation`, and the sub-kernels (all `taps`
    long) run as a correlation with dilation `conv_dilation`: every offset of one axis is a
    multiple of it. The phase conv's row q reads padded rows q + j * conv_dilation, where the
    padded input is x shifted down by `pad_before` (negative: cropped) and `pad_after`; output
    row oy is phase (oy + top) % stride, row (oy + top) // stride - `first_row` of P."""

    stride: int
    kernel: int
    dilation: int
    conv_dilation: int
    taps: int
    first_row: int
    rows: int          # rows of P
    pad_before: int
    pad_after: int
    top: int           # the ONNX begin pad
    out: int           # output extent

    def tap(self, k: int) -> tuple[int, int]:
        """(phase, flipped sub-kernel index) of kernel tap k (the correlation reads the
        sub-kernel backwards: its last tap multiplies the lowest input row)."""
        offset, phase = divmod(k * self.dilation, self.stride)
        return phase, self.taps - 1 - offset // self.conv_dilation


def phase_axis(op: str, extent: int, kernel: int, stride: int, dilation: int, pad_lo: int,
               pad_hi: int, output_padding: int) -> PhaseAxis:
    """The phase geometry of one axis; raises when the output would be empty."""
    if stride < 1 or dilation < 1 or kernel < 1 or min(pad_lo, pad_hi, output_padding) < 0:
        raise TEError(f"{op}(): stride {stride}, dilation {dilation} and kernel {kernel} must "
                      f"be positive and pads ({pad_lo}, {pad_hi}) and output_padding "
                      f"{output_padding} non-negative")
    out = stride * (extent - 1) + output_padding + (kernel - 1) * dilation + 1 - pad_lo - pad_hi
    if out < 1:
        raise TEError(f"{op}(): pads ({pad_lo}, {pad_hi}) crop the whole output: an input "
                      f"extent of {extent} with kernel {kernel}, stride {stride}, dilation "
                      f"{dilation} and output_padding {output_padding} gives {out} rows")
    offsets = [k * dilation // stride for k in range(kernel)]
    conv_dilation = dilation // math.gcd(dilation, stride)
    if any(o % conv_dilation for o in offsets):    # phases on different grids: dense taps
        conv_dilation = 1
    taps = offsets[-1] // conv_dilation + 1
    first = pad_lo // stride
    rows = (out - 1 + pad_lo) // stride - first + 1
    before = (taps - 1) * conv_dilation - first
    after = rows + (taps - 1) * conv_dilation - extent - before
    return PhaseAxis(stride, kernel, dilation, conv_dilation, taps, first, rows, before, after,
                     pad_lo, out)


@dataclass(frozen=True)
class TransposeGeometry:
    """Both axes of a transposed conv, and its channel counts: input channels `c`, filters
    `f` (ONNX's M), `groups`; P has groups * s_h * s_w * (f / groups) channels."""

    h: PhaseAxis
    w: PhaseAxis
    c: int
    f: int
    groups: int

    @property
    def phases(self) -> int:
        return self.h.stride * self.w.stride

    @property
    def packed_shape(self) -> tuple[int, int, int, int]:
        return (self.phases * self.f, self.c // self.groups, self.h.taps, self.w.taps)

    def channel(self, group, phase_y, phase_x, member):
        """P's channel of filter `member` of `group` at phase (phase_y, phase_x)."""
        per_group = self.f // self.groups
        return ((group * self.h.stride + phase_y) * self.w.stride + phase_x) * per_group + member


def transpose_geometry(op: str, x_shape, weight_shape, stride=1, padding=0, dilation=1,
                       output_padding=0, groups: int = 1) -> TransposeGeometry:
    """Validated geometry of a transposed conv of x[N, C, H, W] with an ONNX-layout weight
    [C, F / groups, KH, KW]."""
    if len(x_shape) != 4 or len(weight_shape) != 4:
        raise TEError(f"{op}(): expects x[N, C, H, W] and weight[C, F/groups, KH, KW], got "
                      f"shapes {list(x_shape)} and {list(weight_shape)}")
    n, c, h, w = x_shape
    c_w, per_group, kh, kw = weight_shape
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or c % groups \
            or c_w != c:
        raise TEError(f"{op}(): with groups={groups!r}, the {c} input channels must divide by "
                      f"groups and weight[C, F/groups, KH, KW] must have C = {c}, got weight "
                      f"{list(weight_shape)}")
    sh, sw = int_tuple(op, "stride", stride, 2)
    dh, dw = int_tuple(op, "dilation", dilation, 2)
    oph, opw = int_tuple(op, "output_padding", output_padding, 2)
    top, left, bottom, right = padding4(op, padding)
    return TransposeGeometry(phase_axis(op, h, kh, sh, dh, top, bottom, oph),
                             phase_axis(op, w, kw, sw, dw, left, right, opw),
                             c, per_group * groups, groups)


# -- the weight re-layout ----------------------------------------------------------------------

PHASE_BLOCKS = (16, 8)    # as graph.passes.layout packs conv weights: 16 = two AVX2 vectors


def phase_weight_block(filters: int, groups: int = 1) -> int | None:
    """The block a dense phase weight of `filters` phase filters (s_h * s_w * F) is packed
    with, or None (grouped, or no block divides): the phase conv then vectorises over
    output channels, not over its width, which is often one more than a multiple of the
    vector (a 4x4 stride-2 kernel with pads 1 over 32 columns has 33 phase columns)."""
    if groups != 1:
        return None
    return next((b for b in PHASE_BLOCKS if filters % b == 0), None)


def pack_conv_transpose_weight(weight, stride=1, dilation=1, groups: int = 1,
                               block: int | None = None) -> np.ndarray:
    """ONNX weight [C, F / groups, KH, KW] -> the phase conv's weight [groups * s_h * s_w *
    F / groups, C / groups, taps_h, taps_w] (zero where a phase has no tap), done once at
    compile time for a constant weight. With `block` (groups == 1 only), further packed as
    [s_h * s_w * F / block, C, taps_h, taps_w, block] (pack_conv_weight): the phase conv
    then vectorises over a block of its filters, whatever its spatial extent."""
    weight = np.asarray(weight)
    if weight.ndim != 4:
        raise TEError(f"pack_conv_transpose_weight(): expects weight[C, F/groups, KH, KW], got "
                      f"shape {list(weight.shape)}")
    c, per_group = weight.shape[:2]
    geo = _weight_geometry("pack_conv_transpose_weight", weight.shape, stride, dilation, groups)
    cg = c // groups
    packed = np.zeros((groups, geo.h.stride, geo.w.stride, per_group, cg, geo.h.taps,
                       geo.w.taps), dtype=weight.dtype)
    by_group = weight.reshape(groups, cg, per_group, *weight.shape[2:])
    for ky in range(geo.h.kernel):
        ry, jy = geo.h.tap(ky)
        for kx in range(geo.w.kernel):
            rx, jx = geo.w.tap(kx)
            packed[:, ry, rx, :, :, jy, jx] = by_group[:, :, :, ky, kx].transpose(0, 2, 1)
    packed = packed.reshape(geo.packed_shape)
    if block is None:
        return packed
    if groups != 1:
        raise TEError(f"pack_conv_transpose_weight(): block={block} packs a dense weight "
                      f"only, got groups={groups}; pass block=None for a grouped one")
    return pack_conv_weight(packed, block)


def unpack_conv_transpose_weight(packed, kernel, stride=1, dilation=1,
                                 groups: int = 1) -> np.ndarray:
    """The inverse of pack_conv_transpose_weight: the ONNX weight [C, F / groups, KH, KW]
    (a 5-D `packed` is a block-packed one)."""
    packed = np.asarray(packed)
    if packed.ndim == 5:
        packed = unpack_conv_weight(packed)
    kh, kw = int_tuple("unpack_conv_transpose_weight", "kernel", tuple(kernel), 2)
    sh, sw = int_tuple("unpack_conv_transpose_weight", "stride", stride, 2)
    if packed.ndim != 4 or packed.shape[0] % (groups * sh * sw):
        raise TEError(f"unpack_conv_transpose_weight(): weight {list(packed.shape)} is not "
                      f"[groups * s_h * s_w * F/groups, C/groups, taps_h, taps_w] for "
                      f"groups={groups}, stride={(sh, sw)}")
    per_group = packed.shape[0] // (groups * sh * sw)
    c = packed.shape[1] * groups
    geo = _weight_geometry("unpack_conv_transpose_weight", (c, per_group, kh, kw), stride,
                           dilation, groups)
    if geo.packed_shape != packed.shape:
        raise TEError(f"unpack_conv_transpose_weight(): weight {list(packed.shape)} does not "
                      f"match kernel {(kh, kw)}, stride {(sh, sw)}, dilation {dilation} "
                      f"(expected {list(geo.packed_shape)})")
    by_phase = packed.reshape(groups, sh, sw, per_group, c // groups, geo.h.taps, geo.w.taps)
    weight = np.empty((groups, c // groups, per_group, kh, kw), dtype=packed.dtype)
    for ky in range(kh):
        ry, jy = geo.h.tap(ky)
        for kx in range(kw):
            rx, jx = geo.w.tap(kx)
            weight[:, :, :, ky, kx] = by_phase[:, ry, rx, :, :, jy, jx].transpose(0, 2, 1)
    return weight.reshape(c, per_group, kh, kw)


def _weight_geometry(op: str, shape, stride, dilation, groups) -> TransposeGeometry:
    """The geometry the weight layout depends on: pads and input size do not matter, so a
    one-pixel input without pads (whose output is never empty) stands in for any."""
    return transpose_geometry(op, (1, shape[0], 1, 1), shape, stride, 0, dilation, 0, groups)


def conv_transpose_weight(weight: Tensor, stride=1, dilation=1, groups: int = 1,
                          block: int | None = None, name: str | None = None) -> Tensor:
    """pack_conv_transpose_weight as a compute stage, for a weight known only at run time.

    packed[(g, ry, rx, m), c, jy, jx] = weight[g * C/groups + c, m, ky, kx] where tap ky is
    the one of phase ry at flipped index jy (see PhaseAxis.tap), else 0; with `block`, read
    as [chan // block, c, jy, jx, chan % block]."""
    op = name or "conv_transpose_weight"
    check_tensor(op, weight, "weight")
    geo = _weight_geometry(op, weight.shape, stride, dilation, groups)
    filters = geo.packed_shape[0]
    if block is not None and (groups != 1 or block < 1 or filters % block):
        raise TEError(f"{op}(): block={block} needs groups=1 (got {groups}) and a block "
                      f"dividing the {filters} phase filters; pass block=None")
    cg, per_group = weight.shape[0] // groups, weight.shape[1]

    def source_tap(axis: PhaseAxis, phase, j):
        """(valid, k): the kernel tap with k * dilation = stride * offset + phase."""
        offset = (axis.taps - 1 - j) * axis.conv_dilation
        total = offset * axis.stride + phase
        k = total // axis.dilation if axis.dilation > 1 else total
        valid = k < axis.kernel
        if axis.dilation > 1:
            valid = E.all_of(valid, E.floormod(total, axis.dilation).eq(0))
        return valid, E.minimum(k, axis.kernel - 1)

    def body(chan, c, jy, jx):
        member = chan % per_group
        phase = chan // per_group
        rx = phase % geo.w.stride
        ry = (phase // geo.w.stride) % geo.h.stride
        group = phase // geo.phases
        vy, ky = source_tap(geo.h, ry, jy)
        vx, kx = source_tap(geo.w, rx, jx)
        value = weight(group * cg + c, member, ky, kx)
        return E.select(E.all_of(vy, vx), value, E.const(0, weight.dtype))

    if block is None:
        return compute(geo.packed_shape, body, name=op, tag=INJECTIVE)
    shape = (filters // block,) + geo.packed_shape[1:] + (block,)
    return compute(shape, lambda fo, c, jy, jx, fi: body(fo * block + fi, c, jy, jx), name=op,
                   tag=INJECTIVE)


# -- the transposed conv -----------------------------------------------------------------------

def conv2d_transpose_nchw(x: Tensor, weight: Tensor, stride=1, padding=0, dilation=1,
                          output_padding=0, groups: int = 1, name: str | None = None) -> Tensor:
    """ONNX ConvTranspose in NCHW: out[n, f, oy, ox] = sum of x[n, c, iy, ix] * weight[c,
    f % (F / groups), ky, kx] over c in f's group and oy + top = iy * s_h + ky * d_h (same
    for x), with weight [C, F / groups, KH, KW].

    padding: an int, (vertical, horizontal) or (top, left, bottom, right), cropped off the
    full output; output_padding: extra rows/columns at the bottom/right. The weight is
    re-laid out by a compute stage; for a constant weight, pack it once with
    pack_conv_transpose_weight and call conv2d_transpose_nchw_packed instead.
    """
    op = name or "conv2d_transpose_nchw"
    check_tensor(op, x)
    check_tensor(op, weight, "weight")
    geo = transpose_geometry(op, x.shape, weight.shape, stride, padding, dilation,
                             output_padding, groups)
    packed = conv_transpose_weight(weight, stride, dilation, groups, name=f"{op}_weight")
    return _phase_conv(op, x, packed, geo)


def conv2d_transpose_nchw_packed(x: Tensor, packed_weight: Tensor, kernel, stride=1,
                                 padding=0, dilation=1, output_padding=0, groups: int = 1,
                                 name: str | None = None) -> Tensor:
    """conv2d_transpose_nchw with the weight already packed by pack_conv_transpose_weight
    (4-D, or 5-D block-packed with groups == 1) for a kernel of `kernel` = (KH, KW) taps."""
    op = name or "conv2d_transpose_nchw"
    check_tensor(op, x)
    check_tensor(op, packed_weight, "weight")
    kh, kw = int_tuple(op, "kernel", kernel, 2)
    sh, sw = int_tuple(op, "stride", stride, 2)
    shape = tuple(packed_weight.shape)
    blocked = len(shape) == 5
    filters = shape[0] * shape[4] if blocked else shape[0] if len(shape) == 4 else 0
    if x.ndim != 4 or not filters or filters % (groups * sh * sw) or (blocked and groups != 1):
        raise TEError(f"{op}(): expects x[N, C, H, W] and a packed weight [groups * s_h * s_w "
                      f"* F/groups, C/groups, taps_h, taps_w] (or, with groups=1, [s_h * s_w * "
                      f"F / block, C, taps_h, taps_w, block]), got '{x.name}'{list(x.shape)} "
                      f"and '{packed_weight.name}'{list(shape)} with groups={groups}")
    per_group = filters // (groups * sh * sw)
    geo = transpose_geometry(op, x.shape, (x.shape[1], per_group, kh, kw), stride, padding,
                             dilation, output_padding, groups)
    plain = (filters,) + shape[1:4]
    if geo.packed_shape != plain:
        raise TEError(f"{op}(): packed weight '{packed_weight.name}'{list(shape)} does not "
                      f"match x '{x.name}'{list(x.shape)}, kernel {(kh, kw)}, stride "
                      f"{(sh, sw)}, dilation {dilation}, groups {groups}: expected "
                      f"{list(geo.packed_shape)} (before block packing); pack it with "
                      "pack_conv_transpose_weight")
    return _phase_conv(op, x, packed_weight, geo)


def _phase_conv(op: str, x: Tensor, packed: Tensor, geo: TransposeGeometry) -> Tensor:
    """pad -> phase conv -> interleave (see the module docstring)."""
    if x.dtype != packed.dtype:
        raise TEError(f"{op}(): '{x.name}' is {x.dtype} but the weight '{packed.name}' is "
                      f"{packed.dtype}; cast one of them")
    h, w = geo.h, geo.w
    before, after = (0, 0, h.pad_before, w.pad_before), (0, 0, h.pad_after, w.pad_after)
    padded = x if not any(before + after) else pad(x, before, after, 0, name=f"{op}_pad")
    dilation = (h.conv_dilation, w.conv_dilation)
    if packed.ndim == 5:
        blocked = conv2d_nchw_kpacked_blocked(padded, packed, 1, 0, dilation, name=op)
        block = packed.shape[4]

        def phases(b, chan, q, qx):
            return blocked(b, chan // block, q, qx, chan % block)
    else:
        phases = conv2d_nchw(padded, packed, 1, 0, dilation, groups=geo.groups,
                             name=op if geo.phases == 1 else f"{op}_phases")
        if geo.phases == 1:      # stride 1: the conv is the output
            return phases
    n, per_group = x.shape[0], geo.f // geo.groups

    def body(b, f, oy, ox):
        ty, tx = oy + h.top, ox + w.top
        group, member = (f // per_group, f % per_group) if geo.groups > 1 else (0, f)
        chan = geo.channel(group, ty % h.stride, tx % w.stride, member)
        return phases(b, chan, ty // h.stride - h.first_row, tx // w.stride - w.first_row)

    return compute((n, geo.f, h.out, w.out), body, name=op, tag=INJECTIVE)
