"""Winograd convolution F(m x m, 3 x 3) for stride-1 convs in the channel-blocked layout.

A 3x3 conv over m x m output tiles costs (m + 2)^2 multiplies per tile and channel pair
instead of 9 m^2: 2.25x fewer for m = 2, 4x fewer for m = 4 (Lavin & Gray). With
alpha = m + 2 and the tile's (alpha x alpha) input patch d:

    Y = A^T [ (G g G^T) (.) (B^T d B) ] A

summed over input channels before the output transform, so the element-wise product becomes,
per transform point e = (e1, e2), a GEMM over channels:

    V[e, p, c]  = (B^T d_{p,c} B)[e]                  winograd_input_transform
    U[e, c, f]  = (G g_{f,c} G^T)[e]                  pack_winograd_weight (numpy, compile time)
    M[e, f, p]  = sum_c V[e, p, c] U[e, c, f]         winograd_batch_matmul
    y[tile p]   = A^T M[., f, p] A (+ epilogue)       winograd_output_transform

The matrices come from Toom-Cook interpolation at the points 0, +-1, +-2, ... plus infinity
(`winograd_matrices`, exact fractions). The transforms are built from their nonzero terms only:
each output entry is a Select chain over the transform index whose branches are sums of the
nonzero coefficients times their inputs; schedules unroll the transform axes so every select
folds (codegen binds an unrolled loop variable to a constant). The separable form
(sum_i B[e1, i] (sum_j B[e2, j] d[i, j])) shares its inner sums between branches, which
LLVM's value numbering reuses once the branches are unrolled side by side.

Layouts (b = the channel block, 16 in ResNet-sized layers):
    x  [N, C/b, H, W, b]       V [alpha, alpha, P, C]       (P = N * tiles_h * tiles_w)
    U  [alpha, alpha, F/b, C, b]                            M [alpha, alpha, F/b, P, b]
    y  [N, F/b, OH, OW, b]
V is the GEMM's broadcast operand (a row of C contiguous channels per tile), U is panel-packed
so the GEMM's vector operand is one contiguous b-wide row per channel, and M is blocked like y
so the output transform reads and writes whole channel blocks.
"""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

import numpy as np

from .. import expr as E
from ..errors import TEError
from ..tensor import Tensor, compute, reduce_axis
from ..tensor import sum as te_sum
from ._common import check_tensor
from .tags import BATCH_MATMUL, CLAMP_READS, INJECTIVE

R = 3                           # the filter size these transforms are for
TILE_SIZES = (2, 4)             # supported output tile sizes m
# its zero padding selects between a read and 0: lowering clamps the reads (tags.CLAMP_READS)
# so that the discarded ones stay inside x (up to a row before or after it otherwise)
INPUT_TAG = f"injective,winograd_input,{CLAMP_READS}"
OUTPUT_TAG = "injective,winograd_output"


# -- the transform matrices (exact) -----------------------------------------------------------

def _points(count: int) -> list[Fraction]:
    """The first `count` finite interpolation points 0, 1, -1, 2, -2, 1/2, -1/2, ...: small
    magnitudes keep the transforms' rounding error low (Lavin's choice for F(4, 3))."""
    pool = [Fraction(0), Fraction(1), Fraction(-1), Fraction(2), Fraction(-2),
            Fraction(1, 2), Fraction(-1, 2), Fraction(3), Fraction(-3)]
    if count > len(pool):
        raise TEError(f"winograd_matrices(): {count} interpolation points asked for, at most "
                      f"{len(pool)} are defined; use a tile size m <= {len(pool) - R + 2}")
    return pool[:count]


def _poly_mul(a: list[Fraction], b: list[Fraction]) -> list[Fraction]:
    out = [Fraction(0)] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


@lru_cache(maxsize=None)
def winograd_matrices(m: int, r: int = R):
    """(A^T [m x alpha], G [alpha x r], B^T [alpha x alpha]) of F(m, r), alpha = m + r - 1,
    as tuples of tuples of Fractions, with y = A^T ((G g) * (B^T d)) the correlation
    y[k] = sum_j d[k + j] g[j].

    Derivation: the linear convolution s = h * g (deg m-1 times deg r-1) is evaluated at
    alpha - 1 finite points p_i and at infinity (the product of the leading coefficients),
    multiplied pointwise and interpolated back: s = C w with C's column i the coefficients of
    N_i(x) = prod_{l != i} (x - p_l) (the Lagrange numerator; the 1 / prod_{l != i} (p_i - p_l)
    denominator moves into G's row i) and C's infinity column those of prod_l (x - p_l).
    Correlation is the transpose of that bilinear algorithm: B^T = C^T, and A^T is the
    evaluation matrix of h transposed."""
    if m < 1 or r < 1:
        raise TEError(f"winograd_matrices(): m and r must be positive, got m={m}, r={r}")
    alpha = m + r - 1
    pts = _points(alpha - 1)
    a_t = [[p ** k for p in pts] + [Fraction(int(k == m - 1))] for k in range(m)]
    g_rows, c_cols = [], []
    for i, p in enumerate(pts):
        numer, denom = [Fraction(1)], Fraction(1)
        for l, q in enumerate(pts):
            if l != i:
                numer = _poly_mul(numer, [-q, Fraction(1)])
                denom *= p - q
        g_rows.append([p ** j / denom for j in range(r)])
        c_cols.append(numer + [Fraction(0)] * (alpha - len(numer)))
    full = [Fraction(1)]
    for q in pts:
        full = _poly_mul(full, [-q, Fraction(1)])
    g_rows.append([Fraction(int(j == r - 1)) for j in range(r)])
    c_cols.append(full)
    b_t = c_cols                    # B^T[i][n] = C[n][i]
    freeze = lambda rows: tuple(tuple(row) for row in rows)  # noqa: E731
    return freeze(a_t), freeze(g_rows), freeze(b_t)


def winograd_matrices_f64(m: int):
    """The matrices of `winograd_matrices(m)` as float64 numpy arrays."""
    return tuple(np.array([[float(v) for v in row] for row in mat])
                 for mat in winograd_matrices(m))


def _check_m(op: str, m: int) -> None:
    if m not in TILE_SIZES:
        raise TEError(f"{op}(): output tile size m={m} is not supported; use one of "
                      f"{TILE_SIZES}")


def winograd_tiles(extent: int, m: int) -> int:
    """Tiles of m outputs covering `extent` outputs (the last one cropped)."""
    return -(-extent // m)


# -- compile-time weight transform (numpy) ----------------------------------------------------

def pack_winograd_weight(weight, m: int, block: int):
    """weight[F, C, 3, 3] -> U[alpha, alpha, F / block, C, block] = G g G^T per (f, c),
    computed in float64 and stored in the weight's dtype."""
    weight = np.asarray(weight)
    _check_m("pack_winograd_weight", m)
    if weight.ndim != 4 or weight.shape[2:] != (R, R) or block < 1 or weight.shape[0] % block:
        raise TEError(f"pack_winograd_weight(): expects weight[F, C, 3, 3] with F divisible by "
                      f"block={block}, got shape {list(weight.shape)}")
    _, g, _ = winograd_matrices_f64(m)
    f, c = weight.shape[:2]
    alpha = g.shape[0]
    # the weight as [i, j, c, f]; each U[a, b] is a sum over the taps of whole [c, f] planes
    # with G's nonzero coefficients: the products (taps * G[a, i]) * G[b, j] and the order
    # of the sums of einsum("ai,ijcf,bj->abcf", G, taps, G), so the values are the same
    # bits (a product by a coefficient 1.0 is skipped: it is exact), in ~0.3x its CPU on a
    # 512x512 layer. (einsum also multiplies by G's zeros: a weight holding inf gives inf
    # here where einsum gave nan)
    taps = np.ascontiguousarray(weight.transpose(2, 3, 1, 0), dtype=np.float64)
    u = np.empty((alpha, alpha, f // block, c, block), dtype=weight.dtype)
    term, acc = np.empty((c, f)), np.empty((c, f))
    for a in range(alpha):
        rows = {(i, j): taps[i, j] if g[a, i] == 1 else taps[i, j] * g[a, i]
                for i in range(R) if g[a, i] != 0 for j in range(R)}
        for b in range(alpha):
            acc.fill(0.0)
            for (i, j), scaled in rows.items():
                if g[b, j] == 1:
                    acc += scaled
                elif g[b, j] != 0:
                    np.multiply(scaled, g[b, j], out=term)
                    acc += term
            u[a, b] = acc.reshape(c, f // block, block).transpose(1, 0, 2)
    return u


# -- expressions over only the nonzero coefficients -------------------------------------------

def _scaled(coef: Fraction, value: E.Expr) -> E.Expr:
    if coef == 1:
        return value
    if coef == -1:
        return -value
    return value * float(coef)


def _combination(row, values) -> E.Expr:
    """sum_k row[k] * values[k] over the nonzero row[k]; +-1 coefficients add or subtract."""
    out = None
    for coef, value in zip(row, values):
        if coef == 0:
            continue
        if out is None:
            out = _scaled(coef, value)
        elif coef == 1:
            out = out + value
        elif coef == -1:
            out = out - value
        else:
            out = out + value * float(coef)
    if out is None:
        raise TEError("winograd transform row has no nonzero coefficient; this is a bug in "
                      "Kiln")
    return out


def _select_chain(index: E.Expr, branches: list[E.Expr]) -> E.Expr:
    """branches[index] as nested selects (the last branch is the fallback)."""
    out = branches[-1]
    for k in range(len(branches) - 2, -1, -1):
        out = E.select(index.eq(k), branches[k], out)
    return out


def _two_sided(mat, i1: E.Expr, i2: E.Expr, read) -> E.Expr:
    """(mat X mat^T)[i1, i2] with X[a, b] = read(a, b), as a select chain over (i1, i2) whose
    branches hold only nonzero terms. The inner sums t[a][k] = sum_b mat[k][b] X[a, b] are
    built once and shared by every branch that uses them."""
    rows, cols = len(mat), len(mat[0])
    # each input read built once: the expression is the same, but shared nodes make the
    # walks, hashes and equality tests of building, keying and lowering it cheap
    x = [[read(a, b) for b in range(cols)] for a in range(cols)]
    inner = [[_combination(mat[k], x[a]) for k in range(rows)] for a in range(cols)]
    branches = [_select_chain(i2, [_combination(mat[k1], [inner[a][k2] for a in range(cols)])
                                   for k2 in range(rows)]) for k1 in range(rows)]
    return _select_chain(i1, branches)


# -- the TE stages ----------------------------------------------------------------------------

def _padding(op: str, padding) -> tuple[int, int, int, int]:
    if isinstance(padding, int):
        return (padding,) * 4
    pads = tuple(int(p) for p in padding)
    if len(pads) == 2:
        return pads * 2
    if len(pads) != 4:
        raise TEError(f"{op}(): padding must be an int, (vertical, horizontal) or (top, left, "
                      f"bottom, right), got {padding!r}")
    return pads


def winograd_output_extent(extent: int, pad_lo: int, pad_hi: int) -> int:
    """Output extent of a 3x3, stride 1 conv."""
    return extent + pad_lo + pad_hi - (R - 1)


def winograd_input_transform(x: Tensor, m: int, padding=1, name: str | None = None) -> Tensor:
    """V[alpha, alpha, P, C] = B^T d B for every m x m output tile p of the 3x3 conv of
    x[N, C/b, H, W, b] padded by `padding`; reads outside the padded input (the last tiles'
    crop) are zeros."""
    op = name or "winograd_input_transform"
    check_tensor(op, x)
    _check_m(op, m)
    if x.ndim != 5:
        raise TEError(f"{op}(): expects a channel-blocked x[N, C / b, H, W, b], got "
                      f"'{x.name}'{list(x.shape)}")
    top, left, bottom, right = _padding(op, padding)
    n, co, h, w, b = x.shape
    oh, ow = winograd_output_extent(h, top, bottom), winograd_output_extent(w, left, right)
    if oh < 1 or ow < 1:
        raise TEError(f"{op}(): a 3x3 window does not fit '{x.name}'{list(x.shape)} padded by "
                      f"{(top, left, bottom, right)}")
    th, tw = winograd_tiles(oh, m), winograd_tiles(ow, m)
    alpha = m + R - 1
    _, _, b_t = winograd_matrices(m)
    zero = E.const(0.0, x.dtype)

    def body(e1, e2, p, c):
        img, rest = p // (th * tw), p % (th * tw)
        y0, x0 = (rest // tw) * m - top, (rest % tw) * m - left
        cb, ci = c // b, c % b

        def read(i, j):
            yy, xx = y0 + i, x0 + j
            inside = E.all_of(yy >= 0, yy < h, xx >= 0, xx < w)
            return E.select(inside, x(img, cb, yy, xx, ci), zero)
        return _two_sided(b_t, e1, e2, read)
    return compute((alpha, alpha, n * th * tw, co * b), body, name=op, tag=INPUT_TAG)


def winograd_batch_matmul(v: Tensor, u: Tensor, name: str | None = None) -> Tensor:
    """M[e1, e2, F/b, P, b] = sum_c V[e1, e2, P, c] * U[e1, e2, F/b, c, b]."""
    op = name or "winograd_batch_matmul"
    check_tensor(op, v)
    check_tensor(op, u, "weight")
    if (v.ndim != 4 or u.ndim != 5 or v.shape[:2] != u.shape[:2] or v.shape[0] != v.shape[1]
            or v.shape[3] != u.shape[3]):
        raise TEError(f"{op}(): expects V[alpha, alpha, P, C] and U[alpha, alpha, F / b, C, b] "
                      f"(pack_winograd_weight), got '{v.name}'{list(v.shape)} and "
                      f"'{u.name}'{list(u.shape)}")
    if v.dtype != u.dtype:
        raise TEError(f"{op}(): '{v.name}' is {v.dtype} but '{u.name}' is {u.dtype}; cast one")
    alpha, _, p, c = v.shape
    fo, b = u.shape[2], u.shape[4]
    rc = reduce_axis(c, "rc")
    return compute((alpha, alpha, fo, p, b),
                   lambda e1, e2, ko, q, ki: te_sum(v(e1, e2, q, rc) * u(e1, e2, ko, rc, ki),
                                                    axis=[rc]), name=op, tag=BATCH_MATMUL)


def winograd_output_transform(mm: Tensor, m: int, out_hw: tuple[int, int], batch: int,
                              name: str | None = None) -> Tensor:
    """y[N, F/b, OH, OW, b] = A^T M A of output pixel (oy, ox)'s tile, entry (oy % m, ox % m);
    the tiles past OH/OW (the crop) are never read."""
    op = name or "winograd_output_transform"
    check_tensor(op, mm)
    _check_m(op, m)
    alpha = m + R - 1
    oh, ow = out_hw
    th, tw = winograd_tiles(oh, m), winograd_tiles(ow, m)
    if (mm.ndim != 5 or mm.shape[0] != alpha or mm.shape[1] != alpha
            or mm.shape[3] != batch * th * tw):
        raise TEError(f"{op}(): expects M[{alpha}, {alpha}, F / b, {batch * th * tw}, b] for "
                      f"m={m}, {batch} image(s) of {oh}x{ow} outputs, got "
                      f"'{mm.name}'{list(mm.shape)}")
    a_t, _, _ = winograd_matrices(m)
    fo, b = mm.shape[2], mm.shape[4]

    def body(img, ko, oy, ox, ki):
        p = img * (th * tw) + (oy // m) * tw + ox // m
        return _two_sided(a_t, oy % m, ox % m, lambda e1, e2: mm(e1, e2, ko, p, ki))
    return compute((batch, fo, oh, ow, b), body, name=op, tag=f"{OUTPUT_TAG},m={m}")


def winograd_tag_m(tag: str) -> int | None:
    """The tile size m of a winograd output-transform stage's tag, else None."""
    if not tag.startswith(OUTPUT_TAG + ",m="):
        return None
    return int(tag.rsplit("=", 1)[1])


def conv2d_winograd_nchwc(x: Tensor, u: Tensor, m: int, padding=1,
                          name: str | None = None) -> Tensor:
    """The three stages chained: a 3x3, stride 1 conv of blocked x with the transformed
    weight U (pack_winograd_weight); y[N, F/b, OH, OW, b]."""
    op = name or "conv2d_winograd_nchwc"
    v = winograd_input_transform(x, m, padding, name=f"{op}_input")
    mm = winograd_batch_matmul(v, u, name=f"{op}_gemm")
    top, left, bottom, right = _padding(op, padding)
    out_hw = (winograd_output_extent(x.shape[2], top, bottom),
              winograd_output_extent(x.shape[3], left, right))
    return winograd_output_transform(mm, m, out_hw, x.shape[0], name=op)
