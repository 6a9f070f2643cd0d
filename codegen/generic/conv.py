"""Convolution and pooling generic kernels (NCHW float32).

conv.dense: a grouped conv2d whose weight the lowering re-laid out as
    wp[G, OB, Cg, KH, KW, 16] (OB = ceil(Og / 16) blocks of 16 output channels, zero-filled
    past Og). Each parallel step is one output row of up to BLOCKS 16-channel blocks of one
    group (tile_shape: by the target's registers; a group's last blocks one by one when
    fewer are left); its pixels go in register tiles of PIXELS pixels x BLOCKS x 16
    channels (broadcast-FMAs per tap), the pixels whose taps stay inside the row (the
    interior, [ow_lo, ow_hi), planned by the lowering) without guards (the last tile
    overlapping the one before), the rest in tiles whose taps and pixels are guarded; a 1x1
    window skips the tap loops.
    dims: [N, C, H, W, O, OH, OW, KH, KW, SH, SW, PT, PL, DH, DW, G, Cg, Og, OB, ow_lo, ow_hi]
conv.depthwise_tiles: a conv2d with one input channel per group (Cg == 1; depthwise when
    Og == 1), weight w[O, KH*KW] as is; each output row in register tiles of 2 x 16 pixels,
    taps guarded per lane (border vectors run masked); strides 1 and 2 are compiled as
    constants (stride 2: one span read and a shuffle per tap, codegen/emit_expr).
    dims: [N, C, H, W, O, OH, OW, KH, KW, SH, SW, PT, PL, DH, DW, Og, ow_lo, ow_hi]
conv.pool_max / conv.pool_avg: 2-D pooling windows, in conv.depthwise_tiles' tiles.
    dims: conv.depthwise_tiles' (O = C, Og = 1) + [count_include_pad, H + PB, W + PR]
    (avg: the window counts what lies in [-PT, H + PB) x [-PL, W + PR) with
    count_include_pad, else in the input)
"""
from __future__ import annotations

from ...schedule.ir import Allocate, Buffer, ForKind, IfThenElse, Scope, Store, seq
from ...te import expr as E
from .registry import data, dims_buffer, fparams_buffer, generic_kernel, kernel, load, loop, \
    vector_loop

BLOCK = 16      # output channels per weight block (one float32 vector)
# conv.dense's register tile: BLOCKS blocks of 16 output channels x PIXELS pixels, by the
# target's vector registers (tile_shape). Each tap loads BLOCKS weight vectors and
# broadcasts PIXELS inputs for BLOCKS * PIXELS FMAs: with one block (6 pixels, 12 ymm
# accumulators on AVX2's 16) every FMA needs a broadcast load of its own, and two FMA
# pipes wait on two load ports; two blocks share each broadcast between two FMAs. 7 pixels
# divide the 56/28/14/7-wide rows of ResNet-like models (2 x 6, 2 x 8, 4 x 4 and one block
# of 6, 8, 12, 14: benchmarks/RESULTS.md, 2026-11-29 strided loads)
TILE_NARROW = (1, 6)        # AVX2 (and narrower): 12 of 16 ymm
TILE_WIDE = (2, 7)          # AVX-512: 14 of 32 zmm
LANES = 16      # pixels per vector of the depthwise and pooling kernels


def tile_shape(target) -> tuple[int, int]:
    """(blocks, pixels) of conv.dense's tile for `target` (None: the narrow one, safe
    everywhere)."""
    return TILE_WIDE if target is not None and target.vector_bits >= 512 else TILE_NARROW


def _pos(e):
    """max(e, 1): a run-time divisor that can never be 0."""
    return E.maximum(e, E.const(1))


def _in(v, lo, hi):
    return E.logical_and(lo <= v, v < hi)


def _local(name: str, size: int, dtype: str = "float32") -> Buffer:
    return Buffer(name, dtype, (size,), Scope.LOCAL)


def _let(values, body_of):
    """body_of(names): each value computed once, into a local LLVM promotes to a register
    (run-time divisions and dims loads are not hoisted out of loops otherwise)."""
    buf = _local("let", len(values), "int32")
    stores = [Store(buf, E.const(k), v) for k, v in enumerate(values)]
    return Allocate(buf, seq(*stores, body_of([load(buf, k) for k in range(len(values))])))


def _vec(name, body_of, lanes=BLOCK):
    return loop(name, lanes, body_of, ForKind.VECTORIZED)


def _unrolled(name, n, body_of):
    return loop(name, n, body_of, ForKind.UNROLLED)


@generic_kernel("conv", "dense")
def _dense(target=None):
    nb, TILE = tile_shape(target)    # noqa: N806
    x, w, y = data("x", "float32"), data("w", "float32"), data("y", "float32")
    dims, fparams = dims_buffer(), fparams_buffer()
    # a parallel step: one output row of `nb` adjacent blocks (of one group)
    groups_of = lambda ob_: (ob_ + nb - 1) // nb   # noqa: E731
    rows = load(dims, 0) * load(dims, 15) * groups_of(load(dims, 18)) * load(dims, 5)

    def step(p):
        return _let([load(dims, k) for k in range(21)], lambda d: _derive(p, d))

    def _derive(p, d):
        oh_, ob_, g_ = d[5], d[18], d[15]
        oh = p % _pos(oh_)
        t = p // _pos(oh_)
        bg = t % _pos(groups_of(ob_))
        t2 = t // _pos(groups_of(ob_))
        return _let([oh, bg * nb, t2 % _pos(g_), t2 // _pos(g_)], lambda q: _blocks(d, *q))

    def _blocks(d, oh, ob, g, n):
        """`nb` blocks from ob in one tile where they all exist, else one by one."""
        if nb == 1:
            return _row(d, oh, ob, g, n, 1)
        here = d[18] - ob
        return IfThenElse(nb <= here, _row(d, oh, ob, g, n, nb), loop(
            "b1", E.minimum(here, E.const(nb)), lambda b: _row(d, oh, ob + b, g, n, 1)))

    def _row(d, oh, ob, g, n, nb):
        n_, c_, h, wd, o_, oh_, ow_, kh_, kw_, sh, sw, pt, pl, dh, dw, g_, cg, og, ob_, lo, hi = d
        valid = og - ob * BLOCK                      # channels of the first block that exist
        xbase = (n * c_ + g * cg) * h * wd
        wblock = cg * kh_ * kw_ * BLOCK              # one block's weights
        wbase = (g * ob_ + ob) * wblock
        plane = oh_ * ow_
        ybase = ((n * o_ + g * og + ob * BLOCK) * oh_ + oh) * ow_
        ih0 = oh * sh - pt

        def taps(acc, npix, ow0, end, one):
            """acc[(b*npix + r)*16 + v] += x[tap of pixel ow0 + r] * w[block b, tap, v]
            over every tap (`one`: the window is 1x1); pixels at or past `end` (when given)
            and taps outside the row are skipped."""
            def tap(c, kh, kw):
                ih = ih0 + kh * dh
                at = wbase + ((c * kh_ + kh) * kw_ + kw) * BLOCK
                wv = lambda b, v: load(w, at + b * wblock + v)   # noqa: E731

                def pixel(r):
                    iw = (ow0 + r) * sw - pl + kw * dw
                    xv = load(x, xbase + (c * h + ih) * wd + iw)
                    upd = seq(*[_vec("v", lambda v, b=b: Store(
                        acc, (b * npix + r) * BLOCK + v,
                        load(acc, (b * npix + r) * BLOCK + v) + xv * wv(b, v)))
                        for b in range(nb)])
                    if end is None:
                        return upd
                    return IfThenElse(E.logical_and(ow0 + r < end, _in(iw, 0, wd)), upd)
                return _unrolled("r", npix, pixel)
            if one:
                zero = E.const(0)
                return IfThenElse(_in(ih0, 0, h), loop("c", cg, lambda c: tap(c, zero, zero)))
            return loop("c", cg, lambda c: loop("kh", kh_, lambda kh: IfThenElse(
                _in(ih0 + kh * dh, 0, h), loop("kw", kw_, lambda kw: tap(c, kh, kw)))))

        def tile(ow0, end=None, one=False):
            acc = _local("acc", nb * TILE * BLOCK)
            zero = _unrolled("r", nb * TILE, lambda r: _vec(
                "v", lambda v: Store(acc, r * BLOCK + v, E.const(0.0))))

            def out(b):
                # constant acc indices only (unrolled, guarded stores): acc stays in registers
                return _unrolled("r", TILE, lambda r: _unrolled("v", BLOCK, lambda v: IfThenElse(
                    v < valid - b * BLOCK if end is None else E.logical_and(
                        v < valid - b * BLOCK, ow0 + r < end),
                    Store(y, ybase + (b * BLOCK + v) * plane + ow0 + r,
                          load(acc, (b * TILE + r) * BLOCK + v)))))
            return Allocate(acc, seq(zero, taps(acc, TILE, ow0, end, one),
                                     *[out(b) for b in range(nb)]))

        def guarded(start, end):
            """Pixels [start, end) in guarded tiles."""
            return loop("tg", (end - start + TILE - 1) // TILE,
                        lambda t: tile(start + t * TILE, end))

        # an interior of at least TILE pixels runs in unguarded tiles, the last one moved
        # back to end at hi (recomputing a few pixels, same values); the rest of the row
        # (all of it when the interior is narrower) in guarded tiles
        wide = TILE <= hi - lo
        tiles = E.select(wide, (hi - lo + TILE - 1) // TILE, 0)
        at = lambda t: E.minimum(lo + t * TILE, hi - TILE)   # noqa: E731
        pointwise = E.logical_and(kh_.eq(1), kw_.eq(1))
        interior = IfThenElse(pointwise, loop("t", tiles, lambda t: tile(at(t), one=True)),
                              loop("t", tiles, lambda t: tile(at(t))))
        left_end = E.select(wide, lo, ow_)
        return seq(interior, guarded(E.const(0), left_end),
                   guarded(E.select(wide, hi, ow_), ow_))

    body = loop("p", rows, step, ForKind.PARALLEL)
    return kernel("conv.dense", [x, w, y], body, dims, fparams)


UNROLL = 2     # vectors per register tile of the window kernels


def _window_kernel(name: str, kind: str):
    """conv.depthwise_tiles / conv.pool_max / conv.pool_avg: every output row in register
    tiles of UNROLL vectors of pixels (one vector when the row fits in one), each tap
    guarded per lane (a lane's pixel past the row, or its input column in the padding):
    whole vectors run unmasked, border ones masked (stride 2 too: a masked span read). `kind`: "dw" (sum of x * w), "max" (the largest tap in the input; padding never
    wins), "avg" (the sum of the taps in the input over the count of taps in the counted
    region: [-PT, H + PB) x [-PL, W + PR) with count_include_pad, else the input)."""
    @generic_kernel(*name.split(".", 1))
    def build():
        x, w, y = data("x", "float32"), data("w", "float32"), data("y", "float32")
        dims, fparams = dims_buffer(), fparams_buffer()
        nd = 18 if kind == "dw" else 21

        def row(d, q, sw):
            h, wd, ow_, kh_, kw_, pl, dh, dw = (d[2], d[3], d[6], d[7], d[8], d[12], d[13],
                                                d[14])
            xbase, ih0, ybase, wbase = q[:4]

            def tile(ow0, unroll):
                span = unroll * LANES
                acc = _local("acc", span)
                each = lambda body_of: _unrolled("u", unroll, lambda u: _vec(
                    "v", lambda v: body_of(u * LANES + v, ow0 + u * LANES + v), LANES))

                def tap(kh, kw):
                    ih = ih0 + kh * dh

                    def lane(k, ow):
                        iw = ow * sw - pl + kw * dw
                        xv = load(x, xbase + ih * wd + iw)
                        if kind == "dw":
                            new = load(acc, k) + xv * load(w, wbase + kh * kw_ + kw)
                        elif kind == "max":
                            new = E.maximum(load(acc, k), xv)
                        else:
                            new = load(acc, k) + xv
                        return IfThenElse(E.all_of(ow < ow_, 0 <= iw, iw < wd),
                                          Store(acc, k, new))
                    return each(lane)
                init = E.const(float("-inf") if kind == "max" else 0.0)
                zero = each(lambda k, ow: Store(acc, k, init))
                taps = loop("kh", kh_, lambda kh: IfThenElse(_in(ih0 + kh * dh, 0, h), loop(
                    "kw", kw_, lambda kw: tap(kh, kw))))
                if kind != "avg":
                    out = each(lambda k, ow: IfThenElse(ow < ow_, Store(
                        y, ybase + ow, load(acc, k))))
                    return Allocate(acc, seq(zero, taps, out))
                # the count: the window's rows in the counted region (q[4]) x its columns
                incl, wend = d[18], d[20]
                clo = E.select(incl.ne(0), -pl, 0)
                chi = E.select(incl.ne(0), wend, wd)
                cnt = _local("cnt", span)
                count = loop("kw", kw_, lambda kw: each(lambda k, ow: IfThenElse(
                    _in(ow * sw - pl + kw * dw, clo, chi),
                    Store(cnt, k, load(cnt, k) + E.const(1.0)))))
                out = each(lambda k, ow: IfThenElse(ow < ow_, Store(
                    y, ybase + ow, load(acc, k) / (q[4].astype("float32") * load(cnt, k)))))
                zero_cnt = each(lambda k, ow: Store(cnt, k, E.const(0.0)))
                return Allocate(acc, Allocate(cnt, seq(zero, zero_cnt, taps, count, out)))
            def tiles(unroll):
                span = unroll * LANES
                return loop("t", (ow_ + span - 1) // span, lambda t: tile(t * span, unroll))
            # a row of one vector or less in one-vector tiles (no lanes wasted on a second)
            return IfThenElse(ow_ <= LANES, tiles(1), tiles(UNROLL))

        def step(p):
            def with_dims(d):
                sw = d[10]
                values = _dw_derive(d, p) + ([] if kind != "avg" else [_rows_counted(d, p)])
                # strides 1 and 2 as constants: a tap's pixels are then one contiguous
                # (stride 1) or span read (stride 2: codegen/emit_expr._strided_load)
                # instead of a per-lane gather
                return _let(values, lambda q: IfThenElse(
                    sw.eq(1), row(d, q, E.const(1)), IfThenElse(
                        sw.eq(2), row(d, q, E.const(2)), row(d, q, sw))))
            return _let([load(dims, k) for k in range(nd)], with_dims)
        rows = load(dims, 0) * load(dims, 4) * load(dims, 5)
        return kernel(name, [x, w, y], loop("p", rows, step, ForKind.PARALLEL), dims, fparams)
    return build


def _rows_counted(d, p):
    """The rows of an avg pool window in its counted region."""
    h, oh_, kh_, sh, pt, dh, incl, hend = d[2], d[5], d[7], d[9], d[11], d[13], d[18], d[19]
    ih0 = (p % _pos(oh_)) * sh - pt
    rlo = E.select(incl.ne(0), -pt, 0)
    rhi = E.select(incl.ne(0), hend, h)
    first = E.maximum(rlo - ih0 + dh - 1, E.const(0)) // _pos(dh)   # first kh in it
    last = E.minimum((rhi - 1 - ih0) // _pos(dh), kh_ - 1)        # last kh in it
    return E.maximum(last - first + 1, E.const(0))


def _dw_derive(d, p):
    """A depthwise row's [xbase, ih0, ybase, wbase] (output channel o reads input channel
    o // Og)."""
    c_, h, wd, o_, oh_, sh, pt, og = d[1], d[2], d[3], d[4], d[5], d[9], d[11], d[15]
    oh = p % _pos(oh_)
    o = (p // _pos(oh_)) % _pos(o_)
    n = p // _pos(oh_ * o_)
    return [(n * c_ + o // _pos(og)) * h * wd, oh * sh - pt, ((n * o_ + o) * oh_ + oh) * d[6],
            o * d[7] * d[8]]


_window_kernel("conv.depthwise_tiles", "dw")
_window_kernel("conv.pool_max", "max")
_window_kernel("conv.pool_avg", "avg")


# ---------------------------------------------------------------------------- resize, pad
# resize.nearest: y[nc, oh, ow] = x[nc, hidx[oh], widx[ow]] (the lowering plans the index
#     tables from the op's coordinate mode).   dims: [NC, H, W, OH, OW]
# resize.linear: the bilinear blend of rows h0[oh], h1[oh] (weight ht[oh] on h1) and
#     columns w0[ow], w1[ow] (weight wt[ow] on w1).   dims: as resize.nearest
# pad.<type>: y = x padded (begin/end pads >= 0; a crop is the lowering's view) in 6 dims,
#     rows of the last one copied as vectors; mode 0 constant (fill[0]), 1 reflect, 2 edge.
#     dims: [out0..5, in0..5, instride0..5, begin0..5, mode, in_offset]

@generic_kernel("conv", "resize_nearest")
def _resize_nearest():
    x, y = data("x", "float32"), data("y", "float32")
    hidx, widx = data("hidx", "int32"), data("widx", "int32")
    dims, fparams = dims_buffer(), fparams_buffer()

    def step(p):
        def row(d):
            h, wd, oh_, ow_ = d[1], d[2], d[3], d[4]
            oh = p % _pos(oh_)
            return _let([(p // _pos(oh_)) * h * wd + load(hidx, oh) * wd], lambda q: vector_loop(
                "ow", ow_, LANES, lambda ow: Store(y, p * ow_ + ow, load(x, q[0] + load(
                    widx, ow)))))
        return _let([load(dims, k) for k in range(5)], row)
    body = loop("p", load(dims, 0) * load(dims, 3), step, ForKind.PARALLEL)
    return kernel("conv.resize_nearest", [x, y, hidx, widx], body, dims, fparams)


@generic_kernel("conv", "resize_linear")
def _resize_linear():
    x, y = data("x", "float32"), data("y", "float32")
    h0, h1, ht = data("h0", "int32"), data("h1", "int32"), data("ht", "float32")
    w0, w1, wt = data("w0", "int32"), data("w1", "int32"), data("wt", "float32")
    dims, fparams = dims_buffer(), fparams_buffer()

    def step(p):
        def row(d):
            h, wd, oh_, ow_ = d[1], d[2], d[3], d[4]
            oh = p % _pos(oh_)
            plane = (p // _pos(oh_)) * h * wd

            def pixel(q, ow):
                r0, r1 = q
                th, tw = load(ht, oh), load(wt, ow)
                one = E.const(1.0)
                a, b = load(x, r0 + load(w0, ow)), load(x, r0 + load(w1, ow))
                c, e = load(x, r1 + load(w0, ow)), load(x, r1 + load(w1, ow))
                return Store(y, p * ow_ + ow, (one - th) * (one - tw) * a + (one - th) * tw * b
                             + th * (one - tw) * c + th * tw * e)
            return _let([plane + load(h0, oh) * wd, plane + load(h1, oh) * wd],
                        lambda q: vector_loop("ow", ow_, LANES, lambda ow: pixel(q, ow)))
        return _let([load(dims, k) for k in range(5)], row)
    body = loop("p", load(dims, 0) * load(dims, 3), step, ForKind.PARALLEL)
    return kernel("conv.resize_linear", [x, y, h0, h1, ht, w0, w1, wt], body, dims, fparams)


PAD_RANK = 6
PAD_TYPES = {1: "uint8", 2: "uint16", 4: "float32", 8: "int64"}   # by element size


def _source(i, begin, n, mode):
    """The input index output index i reads along one axis (constant mode: maybe outside
    [0, n), see _inside); reflect and edge map it inside (the lowering checks pads < n)."""
    s = i - begin
    reflect = E.select(s < 0, -s, E.select(n <= s, 2 * (n - 1) - s, s))
    edge = E.minimum(E.maximum(s, E.const(0)), n - 1)
    return E.select(mode.eq(1), reflect, E.select(mode.eq(2), edge, s))


def _pad(dtype: str):
    @generic_kernel("conv", f"pad_{dtype}")
    def build():
        x, y, fill = data("x", dtype), data("y", dtype), data("fill", dtype)
        dims, fparams = dims_buffer(), fparams_buffer()
        r = PAD_RANK

        def step(p):
            def with_dims(d):
                out, ins, strides, begin = d[0:r], d[r:2 * r], d[2 * r:3 * r], d[3 * r:4 * r]
                mode, offset = d[4 * r], d[4 * r + 1]
                idx, rest = [], p
                for k in reversed(range(r - 1)):
                    idx.insert(0, rest % _pos(out[k]))
                    rest = rest // _pos(out[k])
                src = [_source(idx[k], begin[k], ins[k], mode) for k in range(r - 1)]
                inside = E.all_of(*[_in(s, 0, ins[k]) for k, s in enumerate(src)])
                xrow = offset
                for k, s in enumerate(src):
                    xrow = xrow + s * strides[k]

                def row(q):
                    xr, ok = q
                    ow_, n, b = out[r - 1], ins[r - 1], begin[r - 1]
                    yr = p * ow_
                    mid = E.maximum(E.minimum(n, ow_ - b), E.const(0))
                    value = lambda j: E.select(mode.eq(0), load(fill, 0), load(
                        x, xr + E.minimum(E.maximum(_source(j, b, n, mode), E.const(0)),
                                          n - 1)))
                    # a constant-mode edge element never reads x (select on a clamped index)
                    edges = seq(loop("j", E.minimum(b, ow_), lambda j: Store(
                        y, yr + j, value(j))), loop("j", ow_ - (b + mid), lambda j: Store(
                            y, yr + j, value(j)), start=b + mid))
                    copy = vector_loop("j", mid, LANES, lambda j: Store(
                        y, yr + b + j, load(x, xr + j)))
                    filled = vector_loop("j", ow_, LANES, lambda j: Store(
                        y, yr + j, load(fill, 0)))
                    return IfThenElse(ok.ne(0), seq(edges, copy), filled)
                return _let([xrow, E.select(inside, 1, 0)], row)
            return _let([load(dims, k) for k in range(4 * r + 2)], with_dims)
        rows = load(dims, 0)
        for k in range(1, r - 1):
            rows = rows * load(dims, k)
        body = loop("p", rows, step, ForKind.PARALLEL)
        return kernel(f"conv.pad_{dtype}", [x, y, fill], body, dims, fparams)
    return build


for _dtype in PAD_TYPES.values():
    _pad(_dtype)
