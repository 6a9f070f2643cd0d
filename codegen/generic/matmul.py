"""Matmul generic kernel: C[b] = A[b] @ B[b] in float32, any sizes and batch broadcasting.

matmul.f32(a, b, c)   dims (all in elements):
    [0] M  [1] N  [2] K
    [3] nb0  [4] nb1                 two batch dims (the lowering merges/pads to two)
    [5] sa0  [6] sa1  [7] sb0  [8] sb1   batch strides of A and B (0 where broadcast)
    [9] sam  [10] sak  [11] sbk      A's row and column strides, B's row stride (B's
                                     column stride is 1; C is contiguous [nb0, nb1, M, N])
    [12] NC  [13] npanels            column panel width (the last panel takes the rest)
    [14] RC  [15] nchunks            rows per chunk (best a multiple of MR; the last
                                     takes the rest)
    [17] a0  [18] b0  [19] c0        where this call's A, B and C start (batch dims
                                     beyond two take one call each)
matmul.f32_packed(a, b_packed, c)    the same, with a constant B packed at plan time
    into zero-padded panels [P][K][32]:  [11] 32  [16] K * 32 (the panel stride)

Why this shape: the PARALLEL loop runs over (batch, column panel, row chunk) tasks, row
chunks innermost, so a thread's consecutive tasks reuse one panel of B (K x NC, chosen at
plan time to stay in L2). Inside a task, a register tile of MR rows (tile_rows: by the
target's vector registers) x 32 columns (two 16-lane vectors) accumulates over K with
broadcast-FMA; the columns a panel leaves over take one or two 16-wide tiles, the last one
shifted left to end at the panel's end (it recomputes a few columns of this same task,
bit-identically, instead of a scalar tail); rows left over take 1-row tiles. A panel
narrower than 16 (only when N < 16) runs a scalar tile per column.
"""
from __future__ import annotations

from ...schedule.ir import Allocate, Buffer, ForKind, IfThenElse, Scope, Store, seq
from ...te import expr as E
from .registry import data, dims_buffer, fparams_buffer, generic_kernel, kernel, load, loop

LANES = 16      # float32 lanes of a vector
WIDE = 2 * LANES
# rows of the register tile: MR x WIDE accumulators fill most of 32 vector registers
# (AVX-512: 16 of 32 zmm) or of 16 (AVX2: 12 of 16 ymm; 4 rows spill, measured 30% slower)
MR_WIDE_REGISTERS, MR_NARROW_REGISTERS = 8, 3
ROW_UNIT = 24   # row chunks are multiples of both


def tile_rows(target) -> int:
    """MR for `target` (None: the wide one)."""
    return MR_NARROW_REGISTERS if target is not None and target.vector_bits < 512 \
        else MR_WIDE_REGISTERS


def _tile(a, b, c, d, rows: int, width: int, a_off, b_at, c_off, row, col, tag: str,
          valid=None):
    """C[row:row+rows, col:col+width] of one batch: acc in a LOCAL buffer (registers).
    `b_at(k, j)`: the index of B's element (k, col + j). `valid`: how many of the `width`
    columns to write (all when None): the tile goes through a second buffer then, so that
    acc's indices stay constant and LLVM keeps it in registers."""
    sam, sak, n, k_ext = load(d, 9), load(d, 10), load(d, 1), load(d, 2)
    acc = Buffer(f"acc{tag}", "float32", (rows * width,), Scope.LOCAL)
    vec = ForKind.VECTORIZED if width > 1 else ForKind.SERIAL

    def over(body_of):
        return loop(f"r{tag}", rows, lambda r: loop(
            f"j{tag}", width, lambda j: body_of(r, j), vec), ForKind.UNROLLED)

    init = over(lambda r, j: Store(acc, r * width + j, E.const(0.0, "float32")))
    step = loop(f"k{tag}", k_ext, lambda k: over(lambda r, j: Store(
        acc, r * width + j,
        load(acc, r * width + j)
        + load(a, a_off + (row + r) * sam + k * sak) * load(b, b_at(k, j)))))
    if valid is None:
        out = over(lambda r, j: Store(c, c_off + (row + r) * n + col + j,
                                      load(acc, r * width + j)))
        return Allocate(acc, seq(init, step, out))
    part = Buffer(f"part{tag}", "float32", (rows * width,), Scope.LOCAL)
    copy = over(lambda r, j: Store(part, r * width + j, load(acc, r * width + j)))
    out = loop(f"r{tag}p", rows, lambda r: loop(f"j{tag}p", valid, lambda j: Store(
        c, c_off + (row + r) * n + col + j, load(part, r * width + j))), ForKind.UNROLLED)
    return Allocate(acc, Allocate(part, seq(init, step, copy, out)))


def _task(d, t):
    """(a_off, b_off, c_off, p0, p1, r0, r1) of task t: its batch's offsets, its column
    panel [p0, p1) and its rows [r0, r1)."""
    m, n, nb1 = load(d, 0), load(d, 1), load(d, 4)
    nc, npanels, rc, nchunks = load(d, 12), load(d, 13), load(d, 14), load(d, 15)
    chunk = E.floormod(t, nchunks)
    rest = E.floordiv(t, nchunks)
    panel = E.floormod(rest, npanels)
    bat = E.floordiv(rest, npanels)
    b0, b1 = E.floordiv(bat, nb1), E.floormod(bat, nb1)
    p0, r0 = panel * nc, chunk * rc
    return (load(d, 17) + b0 * load(d, 5) + b1 * load(d, 6),
            load(d, 18) + b0 * load(d, 7) + b1 * load(d, 8),
            load(d, 19) + bat * (m * n), p0, E.select(panel.eq(npanels - 1), n, p0 + nc),
            r0, E.select(chunk.eq(nchunks - 1), m, r0 + rc))


def _tasks(d):
    return load(d, 3) * load(d, 4) * load(d, 13) * load(d, 15)


@generic_kernel("matmul", "f32")
def build(target=None):
    mr = tile_rows(target)
    a, b, c = data("a", "float32"), data("b", "float32"), data("c", "float32")
    d, fparams = dims_buffer(), fparams_buffer()

    def task(t):
        a_off, b_off, c_off, p0, p1, r0, r1 = _task(d, t)
        width = p1 - p0
        full_rows = E.floordiv(r1 - r0, mr)

        def tile(rows, row, w, col, tag):
            return _tile(a, b, c, d, rows, w, a_off,
                         lambda k, j: b_off + k * load(d, 11) + col + j, c_off, row, col, tag)

        def columns(rows, row, tag):
            """Every column of the panel for `rows` rows from `row`."""
            wides = E.floordiv(width, WIDE)
            left = width - wides * WIDE
            return seq(
                loop(f"jw{tag}", wides,
                     lambda jb: tile(rows, row, WIDE, p0 + jb * WIDE, f"w{tag}")),
                IfThenElse(left >= LANES, tile(rows, row, LANES, p0 + wides * WIDE,
                                               f"h{tag}")),
                IfThenElse(E.floormod(left, LANES) > 0,
                           tile(rows, row, LANES, p1 - LANES, f"t{tag}")))

        vector_rows = seq(
            loop("ib", full_rows, lambda ib: columns(mr, r0 + ib * mr, "4")),
            loop("ir", r1 - r0 - full_rows * mr,
                 lambda i: columns(1, r0 + full_rows * mr + i, "1")))
        # a panel narrower than a vector (N < 16): one scalar tile per column
        scalar_rows = loop("is", r1 - r0, lambda i: loop(
            "js", width, lambda j: tile(1, r0 + i, 1, p0 + j, "s")))
        return IfThenElse(width >= LANES, vector_rows, scalar_rows)

    body = loop("t", _tasks(d), task, ForKind.PARALLEL)
    return kernel("matmul.f32", [a, b, c], body, d, fparams)


@generic_kernel("matmul", "f32_packed")
def build_packed(target=None):
    """B packed at plan time into zero-padded panels of WIDE columns, [P][K][WIDE] (dims[11]
    = WIDE, dims[16] = K * WIDE, the panel stride): the K loop reads B contiguously. Panel
    widths (dims[12]) are multiples of WIDE; a tile past N computes on the zero padding and
    writes only its valid columns."""
    a, b, c = data("a", "float32"), data("b_packed", "float32"), data("c", "float32")
    d, fparams = dims_buffer(), fparams_buffer()
    mr = tile_rows(target)

    def task(t):
        a_off, b_off, c_off, p0, p1, r0, r1 = _task(d, t)
        blocks = E.floordiv(p1 - p0 + (WIDE - 1), WIDE)
        full_rows = E.floordiv(r1 - r0, mr)

        def columns(rows, row, tag):
            def block(jb):
                col = p0 + jb * WIDE
                at = b_off + E.floordiv(col, WIDE) * load(d, 16)
                valid = p1 - col

                def tile(v, sub):
                    return _tile(a, b, c, d, rows, WIDE, a_off,
                                 lambda k, j: at + k * WIDE + j, c_off, row, col,
                                 f"{sub}{tag}", valid=v)
                return IfThenElse(valid >= WIDE, tile(None, "f"), tile(valid, "p"))
            return loop(f"jb{tag}", blocks, block)

        return seq(
            loop("ib", full_rows, lambda ib: columns(mr, r0 + ib * mr, "4")),
            loop("ir", r1 - r0 - full_rows * mr,
                 lambda i: columns(1, r0 + full_rows * mr + i, "1")))

    body = loop("t", _tasks(d), task, ForKind.PARALLEL)
    return kernel("matmul.f32_packed", [a, b, c], body, d, fparams)
