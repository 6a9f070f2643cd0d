"""Frame taps: the depth window of a 3-D conv gathered as channels of a batch of frames.

A video tensor stored frames-major, x[N * D, C, ...] (each of the N clips' D frames is one
image of the batch), becomes the input of the 2-D conv that a 3-D conv lowers to: for each
output frame, the KD input frames its depth window sees (stride, dilation and zero padding
applied) side by side as channels. Channels are ordered (group, tap, channel in the group),
so a grouped conv keeps its groups and, with whole channel blocks per group, the same op
runs on the channel-blocked layout x[N * D, C / b, H, W, b] (one unit of axis 1 is then a
block): every read is a whole trailing plane, a contiguous copy.
"""
from __future__ import annotations

from .. import expr as E
from ..errors import TEError
from ..tensor import Tensor, compute
from ._common import check_tensor, clamp
from .tags import INJECTIVE


def frame_taps_shape(shape: tuple[int, ...], frames: int, taps: int, stride: int,
                     dilation: int, begin: int, end: int, groups: int) -> tuple[int, ...]:
    """Output shape of `frame_taps` on `shape`; ValueError naming what does not fit."""
    if len(shape) < 2:
        raise ValueError(f"frame_taps needs x[N * D, C, ...], got {list(shape)}")
    if min(frames, taps, stride, dilation, groups) < 1 or min(begin, end) < 0:
        raise ValueError(f"frame_taps: frames {frames}, taps {taps}, stride {stride}, "
                         f"dilation {dilation}, groups {groups} must be >= 1 and pads "
                         f"{begin}, {end} >= 0")
    if shape[0] % frames or shape[1] % groups:
        raise ValueError(f"frame_taps: {shape[0]} images are not clips of {frames} frames, "
                         f"or {shape[1]} channels not {groups} groups")
    span = frames + begin + end - dilation * (taps - 1)
    if span < 1:
        raise ValueError(f"frame_taps: a window of {taps} taps (dilation {dilation}) is "
                         f"longer than the {frames + begin + end} padded frames")
    out = (span - 1) // stride + 1
    return (shape[0] // frames * out, shape[1] * taps) + tuple(shape[2:])


def frame_taps(x: Tensor, frames: int, taps: int, stride: int = 1, dilation: int = 1,
               begin: int = 0, end: int = 0, groups: int = 1,
               name: str | None = None) -> Tensor:
    """out[n * D_out + o, (g * taps + k) * Cg + c, ...] = x[n * D + f, g * Cg + c, ...] with
    f = o * stride + k * dilation - begin, or 0 where f falls outside [0, D) (the padding)."""
    op = name or "frame_taps"
    check_tensor(op, x)
    try:
        shape = frame_taps_shape(tuple(x.shape), frames, taps, stride, dilation, begin, end,
                                 groups)
    except ValueError as exc:
        raise TEError(f"{op}(): '{x.name}'{list(x.shape)}: {exc}") from None
    d_out = shape[0] // (x.shape[0] // frames)
    per_group = x.shape[1] // groups
    zero = E.const(0, x.dtype)
    # whether the last window reads past the last frame (into the end padding)
    past_end = (d_out - 1) * stride + (taps - 1) * dilation - begin >= frames

    def body(*index):
        image, channel, rest = index[0], index[1], index[2:]
        clip, o = image // d_out, image % d_out
        tap = (channel // per_group) % taps if taps > 1 else 0
        source = channel % per_group if groups == 1 else \
            channel // (taps * per_group) * per_group + channel % per_group
        frame = o * stride + tap * dilation - begin
        conds = ([frame >= 0] if begin else []) + ([frame < frames] if past_end else [])
        read = x(clip * frames + (clamp(frame, frames) if conds else frame), source, *rest)
        return E.select(E.all_of(*conds), read, zero) if conds else read

    return compute(shape, body, name=op, tag=INJECTIVE)
