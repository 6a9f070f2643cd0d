"""Kernel taps that only ever read padding, and the smaller window without them.

A dilated conv over a small image can have taps that fall in the zero padding for every
output pixel: DeepLabV3's ASPP runs 3x3 convs with dilation 12, 24 and 36 over an 8x8 map,
where only the centre tap ever sees the image. Those taps multiply zeros; dropping them
gives the same result with a smaller window (there, a 1x1 conv: 9x less work).
"""
from __future__ import annotations


def live_taps(size: int, kernel: int, stride: int, dilation: int, begin: int, end: int
              ) -> tuple[int, int]:
    """(first, last) kernel taps along one axis that read the input for some output
    position; the taps outside read only padding. Live taps are contiguous: tap k reads
    input rows o * stride + k * dilation - begin, an interval in o that slides with k."""
    out = (size + begin + end - dilation * (kernel - 1) - 1) // stride + 1
    live = [k for k in range(kernel)
            if k * dilation - begin < size and (out - 1) * stride + k * dilation - begin >= 0]
    if out < 1 or not live:
        return 0, kernel - 1
    return live[0], live[-1]


def trimmed_window(sizes, kernel, strides, dilations, pads):
    """(first taps, kernel, pads) of the window without its dead taps, or None when every
    tap is live (or trimming would need a negative pad: the kernel then stays whole).
    `pads` is (begin per axis..., end per axis...), as ONNX orders them."""
    n = len(sizes)
    if not all(isinstance(v, int) for v in sizes):
        return None
    first, new_kernel, begins, ends = [], [], [], []
    for axis in range(n):
        k, d, b, e = kernel[axis], dilations[axis], pads[axis], pads[axis + n]
        k0, k1 = live_taps(sizes[axis], k, strides[axis], d, b, e)
        b2, e2 = b - k0 * d, e - (k - 1 - k1) * d
        if b2 < 0 or e2 < 0:
            k0, k1, b2, e2 = 0, k - 1, b, e
        first.append(k0), new_kernel.append(k1 - k0 + 1), begins.append(b2), ends.append(e2)
    if tuple(new_kernel) == tuple(kernel):
        return None
    return tuple(first), tuple(new_kernel), tuple(begins) + tuple(ends)
