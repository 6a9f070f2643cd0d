"""2-D pooling in NCHW layout: max/avg windows (pad stage + window reduction), global pools."""
from __future__ import annotations

from .. import dtype as dt
from .. import expr as E
from .. import tensor as T
from ..errors import TEError
from ..tensor import Tensor, compute, reduce_axis
from ._common import check_tensor, int_tuple, padding4, require_float
from .conv import conv_output_extent
from .reduction import mean, reduce
from .tags import ELEMWISE, POOL
from .transform import pad


def pool_output_extent(op_name: str, extent: int, kernel: int, stride: int, dilation: int,
                       pad_lo: int, pad_hi: int, ceil_mode: bool) -> int:
    """Windows along one dimension; ceil_mode keeps a last partial window only if it starts
    inside the input or the leading padding (PyTorch and ONNX rule)."""
    out = conv_output_extent(op_name, extent, kernel, stride, dilation, pad_lo, pad_hi)
    span = extent + pad_lo + pad_hi - dilation * (kernel - 1) - 1
    if ceil_mode and span % stride:
        out += 1
        if (out - 1) * stride >= extent + pad_lo:
            out -= 1
    return out


class _Window:
    """The geometry of a 2-D pooling window on x[N, C, H, W] (or a channel-blocked
    x[N, C/b, H, W, b] when `blocked`)."""

    def __init__(self, op_name, x, kernel, stride, padding, dilation, ceil_mode,
                 blocked: bool = False):
        check_tensor(op_name, x)
        if x.ndim != 4 and not (blocked and x.ndim == 5):
            raise TEError(f"{op_name}(): expects x[N, C, H, W]"
                          f"{' or x[N, C/b, H, W, b]' if blocked else ''}, got "
                          f"'{x.name}'{list(x.shape)}")
        self.rest = (0,) * (x.ndim - 4)
        self.kernel = int_tuple(op_name, "kernel", kernel, 2)
        self.stride = self.kernel if stride is None else int_tuple(op_name, "stride", stride, 2)
        self.dilation = int_tuple(op_name, "dilation", dilation, 2)
        top, left, bottom, right = padding4(op_name, padding)
        self.lo, self.hi = (top, left), (bottom, right)
        self.out = tuple(pool_output_extent(op_name, x.shape[2 + d], self.kernel[d],
                                            self.stride[d], self.dilation[d], self.lo[d],
                                            self.hi[d], ceil_mode) for d in range(2))
        # the padded input must cover every tap of the last window (ceil mode may need more)
        self.after = tuple(max(self.hi[d], (self.out[d] - 1) * self.stride[d]
                               + self.dilation[d] * (self.kernel[d] - 1) + 1
                               - x.shape[2 + d] - self.lo[d]) for d in range(2))

    def padded(self, x: Tensor, value, name: str) -> Tensor:
        if not any(self.lo) and not any(self.after):
            return x
        return pad(x, (0, 0) + self.lo + self.rest, (0, 0) + self.after + self.rest, value,
                   name=name)

    def taps(self, y, xx, ry, rx):
        return (y * self.stride[0] + ry.var * self.dilation[0],
                xx * self.stride[1] + rx.var * self.dilation[1])


def max_pool2d(x: Tensor, kernel, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               name: str | None = None) -> Tensor:
    """Maximum over each window; padding never wins (it is the dtype's lowest value).

    stride defaults to the kernel size; padding is an int, a pair or (top, left, bottom, right).
    x may be channel-blocked, [N, C/b, H, W, b]: the block axis passes through.
    """
    base = name or "max_pool2d"
    win = _Window(base, x, kernel, stride, padding, dilation, ceil_mode, blocked=True)
    padded = win.padded(x, dt.min_value(x.dtype), f"{base}_pad")
    ry, rx = reduce_axis(win.kernel[0], "ry"), reduce_axis(win.kernel[1], "rx")
    if x.ndim == 5:
        def body(n, c, y, xx, ci):
            return T.max(padded(n, c, *win.taps(y, xx, ry, rx), ci), axis=[ry, rx])
    else:
        def body(n, c, y, xx):
            return T.max(padded(n, c, *win.taps(y, xx, ry, rx)), axis=[ry, rx])
    return compute((x.shape[0], x.shape[1]) + win.out + tuple(x.shape[4:]), body, name=base,
                   tag=f"{POOL},max")


def avg_pool2d(x: Tensor, kernel, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               count_include_pad: bool = False, name: str | None = None) -> Tensor:
    """Mean over each window, as a window-sum stage and a divide stage.

    The divisor counts the taps inside the input, plus those in the explicit padding when
    count_include_pad (never the extra taps of a ceil_mode window). Defaults follow ONNX.
    x may be channel-blocked, [N, C/b, H, W, b]: the block axis passes through.
    """
    base = name or "avg_pool2d"
    win = _Window(base, x, kernel, stride, padding, dilation, ceil_mode, blocked=True)
    require_float(base, x)
    padded = win.padded(x, 0.0, f"{base}_pad")
    ry, rx = reduce_axis(win.kernel[0], "ry"), reduce_axis(win.kernel[1], "rx")
    out_shape = (x.shape[0], x.shape[1]) + win.out + tuple(x.shape[4:])
    if x.ndim == 5:
        def window_sum(n, c, y, xx, ci):
            return T.sum(padded(n, c, *win.taps(y, xx, ry, rx), ci), axis=[ry, rx])
    else:
        def window_sum(n, c, y, xx):
            return T.sum(padded(n, c, *win.taps(y, xx, ry, rx)), axis=[ry, rx])
    total = compute(out_shape, window_sum, name=f"{base}_sum", tag=f"{POOL},sum")
    extents = x.shape[2:4]

    def count(d: int, o: E.Expr) -> E.Expr:
        lo = -win.lo[d] if count_include_pad else 0
        hi = extents[d] + (win.hi[d] if count_include_pad else 0)
        start = o * win.stride[d] - win.lo[d]
        return _taps_in(hi - start, win.dilation[d], win.kernel[d]) - \
            _taps_in(lo - start, win.dilation[d], win.kernel[d])

    def mean(n, c, y, xx, *ci):
        return total(n, c, y, xx, *ci) / E.cast(count(0, y) * count(1, xx), x.dtype)

    if x.ndim == 5:
        return compute(total.shape, lambda n, c, y, xx, ci: mean(n, c, y, xx, ci), name=base,
                       tag=ELEMWISE)
    return compute(total.shape, lambda n, c, y, xx: mean(n, c, y, xx), name=base,
                   tag=ELEMWISE)


def _taps_in(distance: E.Expr, dilation: int, kernel: int) -> E.Expr:
    """How many taps r in [0, kernel) have r * dilation < distance: clamp(ceil(d / dil))."""
    ceil = E.floordiv(distance + (dilation - 1), dilation)
    return E.minimum(E.maximum(ceil, 0), kernel)


def global_avg_pool2d(x: Tensor, name: str | None = None) -> Tensor:
    """Mean over H and W of x[N, C, H, W] -> [N, C, 1, 1]."""
    _check_4d("global_avg_pool2d", x)
    return mean(x, (2, 3), keepdims=True, name=name or "global_avg_pool2d")


def global_max_pool2d(x: Tensor, name: str | None = None) -> Tensor:
    """Maximum over H and W of x[N, C, H, W] -> [N, C, 1, 1]."""
    _check_4d("global_max_pool2d", x)
    return reduce("global_max_pool2d", T.max, x, (2, 3), True, name=name or "global_max_pool2d")


def _check_4d(op_name: str, x: Tensor) -> None:
    check_tensor(op_name, x)
    if x.ndim != 4:
        raise TEError(f"{op_name}(): expects x[N, C, H, W], got '{x.name}'{list(x.shape)}")
