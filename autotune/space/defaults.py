"""The default config of a search space: schedules chosen by rules without tuning
(register tiles sized to the vector register file, cache tiles, parallel depth, packing,
row groups). SearchSpace inherits DefaultsMixin; the thread count and target come from the
space (`space.threads`, `space.target`), never from the environment."""
from __future__ import annotations

import math

from ...codegen.target import Target
from ...te.dtype import itemsize
from ...te.ops.linalg import MATMUL_PREPACKED
from ...te.tensor import ComputeOp, TensorLoad
from ...te.visit import walk
from .int8_conv import depthwise_register_rows, one_register_tile_per_cache_tile
from .apply import (AT_ANCHOR, INLINE, MAX_PARALLEL_DEPTH, MIN_PARALLEL_POINTS, ROOT_ROWS,
                    window_axes)
from .int8 import (dot4_register_budget, dot4_vector_tile, is_dot4_gemm,
                   one_row_tile_per_cache_tile, short_k_columns, uses_dot4)
from .stages import Anchor

MAX_WHOLE_REDUCE = 256    # a GEMM's K at most this long is one register-tile loop
REDUCE_STEPS = 256        # multiply-adds per register-tile visit when several reduce axes nest
MIN_STREAM_BALANCE = 0.9  # a GEMV's column blocks keep the cores at least this busy
MAX_WHOLE_CACHE_AXIS = 8  # a cache-tile axis at most this long is taken whole by default
MAX_WHOLE_ROWS = 64       # a prepacked GEMM with at most this many rows ...
WHOLE_ROWS_WEIGHT_BYTES = 1 << 19   # ... and a weight at least this big: one rows tile
STREAM_RUN_BYTES = 1024  # weight bytes of each row per reduce visit of a few-pixel conv ...
STREAM_MAX_PIXELS = 36   # ... with at most this many output pixels (_few_pixels_big_weight)
MIN_TAILED_ROWS = 4       # register rows of such a GEMM at least, when a tail tile follows
MIN_BROADCAST_ACCUMULATORS = 6      # register tiles ranked by loads need this many at least
WIDE_MAX_BLOCKS = 4  # output-channel blocks of a one-vector tile, 32 registers (_blocks_rows_tile_wide)
# Rows of a register tile at most, with 32 vector registers (AVX-512; a 16-register file
# never reaches it), where rows read overlapping windows of a broadcast operand (_max_rows):
# each row reads through its own address, and past ~12 rows those spill from the 16
# general registers (one reload per multiply-add, as in the 12-row grouped convs' code).
# RegNet's stem (3x3/2 over 3 NCHW channels, 2 blocks of 16 at 48 x 48), 1 thread: 16 rows
# 0.195 ms, 12, 8 or 6 rows 0.083 (benchmarks/RESULTS.md, 2026-11-26 14:45 UTC).
WIDE_MAX_ROWS = 12
# A pool's window taps are unrolled inside its register tile (the `window` knob); at most
# this many vector updates per visit. ResNet-50's 7x7 global pool (4 rows x 2 AVX2 vectors)
# was 4 x 2 x 49 = 392 unrolled vector adds (1,900 lines of IR, ~0.3 s to compile) for a
# memory-bound sum; its outer taps now stay a loop (56 per visit). A 3x3 max pool over 4 rows
# x 2 vectors (72) is unaffected. Windows with weights (depthwise convs, stems over 3
# channels) keep their unrolling: the cap would change them too, and that is not measured.
MAX_UNROLLED_TAPS = 128
# A window with weights of this many taps or more (5x5, 7x7 depthwise convs) defaults to its
# taps outside the register tile on AVX-512 (DefaultsMixin._window_default)
WINDOW_TAPS_OUTSIDE = 25


class DefaultsMixin:
    """`default_config()` and its heuristics; mixed into SearchSpace."""

    def default_config(self) -> dict:
        """A sensible schedule without tuning: a register tile sized to the vector register
        file (see `_anchor_defaults`), local accumulator, one parallel level, vectorised and
        unrolled; the vector operand packed for GEMM-sized anchors; row groups and joined
        epilogues on."""
        config = {}
        anchor_values = {}
        for anchor in self.anchors:
            anchor_values.update(self._anchor_defaults(anchor))
        for op in self.elementwise:
            anchor_values.update(self._elementwise_defaults(op))
        for knob in self.knobs:
            kind = knob.name.split("/")[1]
            if knob.name in anchor_values:
                config[knob.name] = anchor_values[knob.name]
            elif kind == "vector":
                config[knob.name] = _nearest_scalar(knob.choices, 8)
            elif kind in ("local", "parallel", "vectorize", "unroll"):
                config[knob.name] = knob.choices[-1]
            elif kind == "inline":
                config[knob.name] = self._producer_default(knob.name)
            elif kind == "window":
                config[knob.name] = self._window_default(knob.name)
            elif kind == "epilogue":
                config[knob.name] = 1
            elif kind == "rows":
                config[knob.name] = self._rows_default(knob.name)
            elif kind == "pack":
                config[knob.name] = 0
            elif kind == "transform":
                config[knob.name] = 0
            else:
                config[knob.name] = knob.choices[0]
        return config

    def _window_default(self, knob_name: str) -> int:
        """Mode 2 (each tap updates the register tile's rows in place), but for a window with
        weights of WINDOW_TAPS_OUTSIDE taps or more on a 32-register (AVX-512) target: mode 1,
        taps outside the register tile, so the tile's accumulators are independent chains and
        each weight vector is loaded once per tap, not once per pixel. In mode 2 every
        pixel's taps are one chain of dependent multiply-adds, latency-bound once the window
        is long (1 thread, rocketlake: 7x7 depthwise over 40 and 64 channels at 32 x 32, 105
        -> 56 us; 5x5 over 96 at 28 x 28, 48 -> 36 us; 3x3 stays faster in mode 2). Pools
        (no weights) and 16-register targets keep mode 2: not measured."""
        op = next(a.op for a in self.anchors if f"{self._stage_label(a.op)}/window" == knob_name)
        taps = math.prod(r.extent for r in op.reduce_axis)
        if (self.target.vector_bits >= 512 and len(op.input_tensors) > 1
                and taps >= WINDOW_TAPS_OUTSIDE):
            return 1
        return 2

    def _producer_default(self, knob_name: str) -> int:
        """A window anchor's padding is computed per tile, where the anchor reads it (it
        stays in cache); other padding is materialised at root as parallel rows. A stage of
        a row group (whose default is on) is computed per row when two stages read it
        (softmax's exp: computing it twice doubled the kernel's time), else inlined."""
        op = next(o for o in self.optional_inline
                  if f"{self._stage_label(o)}/inline" == knob_name)
        group = next((g for g in self.row_groups if op in g.stages), None)
        if group is not None:
            # per row: materialised when read twice (softmax's exp), else recomputed
            readers = [c for c in self.ops if op in {t.op for t in c.input_tensors}]
            return AT_ANCHOR if len(readers) > 1 else INLINE
        reader = self._sole_anchor_reader(op)
        return AT_ANCHOR if reader is not None and window_axes(reader) else ROOT_ROWS

    def _elementwise_defaults(self, op: ComputeOp) -> dict:
        """The widest vector of at most MAX_VECTOR_TILE lanes (and at least one register)
        that divides the last axis, and a parallel loop only above MIN_PARALLEL_POINTS
        points: `parallel` fuses every loop, the vector axis's outer part included, so each
        vector's indices are recovered by div/mod, and a small kernel pays more for that
        and for the fork than it gains (BERT's 32K-point elementwise groups at 1 thread:
        vector 8 and parallel 10-25 us, vector 64 serial 4-9 us)."""
        label = self._stage_label(op)
        knob = self._by_name[f"{label}/vector"]
        inner = op.axis[-1].extent if op.axis else 1
        lanes = self.target.vector_lanes(op.dtype)
        dividing = [c for c in knob.choices if inner % c == 0 and c >= lanes]
        vector = max(dividing) if dividing else _nearest_scalar(knob.choices, 8)
        points = math.prod(op.shape) if op.shape else 1
        parallel = self._by_name[f"{label}/parallel"].choices[-1]
        return {knob.name: vector,
                f"{label}/parallel": parallel if points >= MIN_PARALLEL_POINTS else 0}

    def _rows_default(self, knob_name: str) -> int:
        """Partials two vectors wide when they divide every row (two accumulator chains:
        layer norm's 256-wide rows 20-25% faster than with one), else one vector."""
        group = next(g for g in self.row_groups if g.knob == knob_name)
        lanes = self.target.vector_lanes(group.out.dtype)
        whole = all(op.reduce_axis[0].extent % (2 * lanes) == 0 for op in group.members)
        return 2 if whole else 1

    def _anchor_defaults(self, anchor: Anchor) -> dict:
        """Tile and reduce knobs of one anchor under a register budget.

        The vectorised (last) axis gets one or two vectors; ONE other spatial axis (the
        nearest before the last with extent > 1) gets as many rows as fill ~3/4 of the vector
        registers with accumulators; every other axis has an inner tile of 1, so a DAG with
        many spatial axes (a channel-blocked conv) does not multiply its register tile. The
        middle tiles make a cache tile, shrunk until the fused parallel loop has at least
        2 x cores iterations. Small reduce axes (kernel windows) are taken whole."""
        op, label = anchor.op, self._stage_label(anchor.op)
        target = self.target
        lanes = target.vector_lanes(op.dtype)
        budget = dot4_register_budget(target, op,
                                      (32 if target.vector_bits >= 512 else 16) * 3 // 4)
        extents = [a.extent for a in op.axis]
        n = len(extents)
        window = window_axes(op) and not is_dot4_gemm(op)

        def knob_choices(pos):
            return self._by_name[f"{label}/tile/{pos}"].choices
        inner, mid = [1] * n, [1] * n
        if n:
            inner[-1] = _vector_tile(extents[-1], lanes, odd=bool(window))
            if uses_dot4(op):
                inner[-1] = dot4_vector_tile(extents[-1], lanes, inner[-1])
            mid[-1] = max(1, min(4, extents[-1] // (2 * inner[-1])))
            rows = next((p for p in range(n - 2, -1, -1) if extents[p] > 1), None)
            if rows is not None:
                # with 16 vector registers, rows two vectors wide take the whole budget and
                # a tail (codegen runs the whole tiles without guards), see balanced_rows
                tails = (target.vector_bits < 512 and not window
                         and not taps_along_rows(op, rows))
                broadcast = (target.vector_bits < 512 and not tails
                             and _rows_broadcast(op, rows))
                inner[rows], inner[-1] = _register_tile(extents[rows], extents[-1],
                                                        inner[-1], lanes, budget, tails,
                                                        broadcast,
                                                        _max_rows(target, op, rows))
                inner[rows] = depthwise_register_rows(target, op, extents[rows], inner[rows])
                mid[-1] = max(1, min(4, extents[-1] // (2 * inner[-1])))
                blocks = (_block_axis(op, rows) if extents[-1] == lanes and not window
                          and not uses_dot4(op) and op.dtype.startswith("float") else None)
                if blocks is not None:
                    spread = (_blocks_rows_tile_wide if target.vector_bits >= 512
                              else _blocks_rows_tile)
                    inner[blocks], inner[rows] = spread(extents[blocks], extents[rows], budget)
                mid[rows] = max(1, min(8, extents[rows] // (2 * inner[rows])))
                if one_row_tile_per_cache_tile(target, op):     # space_int8.py
                    mid[rows] = 1
            for p in range(n - 1):
                if p != rows:
                    mid[p] = max(1, min(8, extents[p] // (2 * inner[p])))
            if window and rows is not None:
                # memory-bound window (depthwise, pooling): one tile is a whole plane of
                # the axes before it (channels), which the parallel loop walks
                mid[rows] = max(1, extents[rows] // inner[rows])
                mid[-1] = max(1, extents[-1] // inner[-1])
                for p in range(rows):
                    mid[p] = 1
            streaming = rows is None and n and extents[-1] > 2 * lanes and not window
            depth = min(2, n)
            if streaming:
                inner[-1], mid[-1] = _streaming_tile(knob_choices(n - 1), extents[-1], lanes,
                                                     budget, _kernel_threads(target, self.threads))
            else:
                depth = _parallel_depth(extents, mid, inner, 2 * max(2, target.num_cores))
            _tail_free_middles(extents, mid, inner)
            if not streaming and not window:
                _whole_short_axes(extents, mid, inner, rows, depth)
        else:
            streaming, depth = False, 0
        values = {f"{label}/parallel": depth}
        for pos, axis in enumerate(op.axis):
            knob = self._by_name[f"{label}/tile/{pos}"]
            values[knob.name] = _nearest(knob.choices, (mid[pos], inner[pos]))
        # one reduce axis (a GEMM's K): the register tile accumulates all of it when it is at
        # most MAX_WHOLE_REDUCE long, else blocks of about 128, so its accumulators are
        # loaded and stored once per block (blocks of 16: BERT's 128x256x256 linear 64 vs
        # 72 GFLOPS, 1024^3 GEMM 55 vs 69)
        gemm_k = (not streaming and len(op.reduce_axis) == 1 and not window)
        nested = (nested_reduce_tiles(op, _reduce_steps(op)) if len(op.reduce_axis) > 1
                  and not streaming else None)
        for pos, axis in enumerate(op.reduce_axis):
            knob = self._by_name[f"{label}/reduce/{pos}"]
            if gemm_k:
                want = _reduce_block(axis.extent)
            elif nested is not None:
                want = nested[pos]
                if window and len(op.input_tensors) == 1:     # a pool: no weights
                    want = _capped_taps(nested, pos, math.prod(inner[:-1]) * max(
                        1, -(-inner[-1] // lanes)) if n else 1)
            else:
                want = 1 if streaming else axis.extent if axis.extent <= 7 else 16
            values[knob.name] = _nearest_scalar(knob.choices, want)
        # packing pays when the copy is amortised over much reuse (a GEMM-sized tile loop):
        # 1024^3 GEMM 0.39x -> 1.08x numpy at 1 thread with both operands packed
        heavy = (n and not streaming and math.prod(extents) >= 4096
                 and math.prod(a.extent for a in op.reduce_axis) >= 64)
        for pack in anchor.packs:
            # with long reduce blocks, each row of the broadcast operand (A) is a sequential
            # stream the prefetcher follows: its strided panel copy costs more than it saves
            # (128x256x256 72 -> 81 GFLOPS, 1024^3 61 -> 69, BERT's batched attention
            # matmuls 15-30% faster unpacked); the vector operand's panel stays packed
            rows_operand = pack.axis_pos != n - 1
            # a panel one wide (the register tile takes one point of the packed axis, e.g.
            # a blocked conv's batch of video frames) is a copy in the operand's own layout
            panel = values[f"{label}/tile/{pack.axis_pos}"][1]
            values[pack.knob] = int(bool(heavy) and math.prod(pack.tensor.shape) >= 16384
                                    and not (gemm_k and rows_operand) and panel > 1)
        return self._panel_defaults(anchor, values)

    def _panel_defaults(self, anchor: Anchor, values: dict) -> dict:
        """A matmul_prepacked anchor's vector tile is one weight panel, so its column index
        j // block, j % block folds to the panel and one contiguous run per k. A GEMM keeps
        its register tile's rows (within the register budget at the panel's width); a GEMV
        (no row axis) walks panel | k | the panel's columns, accumulating a whole panel over
        all of K in registers, instead of the k | columns order that streams a row-major
        weight. 1 thread, old default (plain matmul, B packed in the kernel) vs new: BERT's
        128x256->1024 and 128x1024->256 1.1-1.4x. A GEMV's panels pay while the weight is
        cache-resident (MLP's 784->256 in-model 1.4x); streamed from DRAM they ran slower
        (1280->1000 in-model 0.78x at 1 thread), so the graph pass keeps large GEMV weights
        row-major (graph/passes/layout/prepack.py)."""
        op = anchor.op
        panel = _panel_width(op)
        if panel is None:
            return values
        label = self._stage_label(op)
        target = self.target
        lanes = target.vector_lanes(op.dtype)
        budget = dot4_register_budget(target, op,
                                      (32 if target.vector_bits >= 512 else 16) * 3 // 4)
        extents = [a.extent for a in op.axis]
        out = dict(values)
        vec = self._by_name[f"{label}/tile/{len(extents) - 1}"]
        rows = next((p for p in range(len(extents) - 2, -1, -1) if extents[p] > 1), None)
        mid, inner = values[vec.name]
        if rows is None or inner != panel:
            mid = mid if rows is not None and extents[-1] % (mid * panel) == 0 else 1
            out[vec.name] = _nearest(vec.choices, (mid, panel))
        if rows is None:
            knob = self._by_name[f"{label}/reduce/0"]
            out[knob.name] = op.reduce_axis[0].extent
            return out
        knob = self._by_name[f"{label}/tile/{rows}"]
        mid_r, inner_r = values[knob.name]
        cap = max(1, budget // -(-panel // lanes))
        if inner_r > cap:
            inner_r = _rows_tile(extents[rows], cap)
            out[knob.name] = _nearest(knob.choices, (mid_r, inner_r))
        if short_k_columns(target, op):       # one panel a cache tile (space_int8.py)
            out[vec.name] = _nearest(vec.choices, (1, out[vec.name][1]))
        few = _few_rows_big_weight(extents, rows, op)
        whole = _whole_rows_tile(knob.choices, extents, rows, inner_r) if few else None
        leading = _whole_leading_axes(self, label, extents, rows) if few else None
        par = self._by_name[f"{label}/parallel"]
        depth = min(len(extents), max(par.choices))
        # rows over several axes: only where the parallel loop still reaches the column
        # blocks (the outer loops fused up to the vector axis), or on one thread
        if leading and depth < len(extents) and _kernel_threads(target, self.threads) > 1:
            leading = None
        if leading is not None:
            out[knob.name] = list(whole or _most_rows_tile(knob.choices, extents[rows],
                                                           out[knob.name][1]))
            out.update(leading)
            # the parallel loop then needs the column blocks too (the rows' is one iteration)
            out[par.name] = max(out[par.name], depth)
            # the weight streams panel after panel, in address order: one prefetch stream,
            # not four interleaved (4 kernels of ViT-S and ConvNeXt-T, weights from DRAM,
            # 1 thread: 1.04-1.14x faster with one-panel cache tiles)
            if (1, panel) in vec.choices:
                out[vec.name] = [1, panel]
        if one_register_tile_per_cache_tile(target, op):     # space_int8_conv.py
            out[vec.name] = _nearest(vec.choices, (1, out[vec.name][1]))
            out[knob.name] = _nearest(knob.choices, (1, out[knob.name][1]))
        return out



def _few_rows_big_weight(extents: list[int], rows: int, op: ComputeOp) -> bool:
    """Whether a prepacked GEMM has few rows (counting those of every axis before the
    register tile's: an NHWC activation's H x W pixels) over a weight too big for L2.

    The outer loops are rows | column blocks: with 12-row cache tiles a 50-row GEMM reads its
    whole weight 5 times, from DRAM or a shared L3 when the model's weights do not stay
    cached (in a model; alone, the weight stays in L3 and it does not show). One cache tile
    over all rows reads each weight panel once and keeps it in L1 for every row, while the
    accumulators (rows x the column tile) fit in L1. ViT-S/16's 50-token linears (384x1152 ..
    1536x384), ConvNeXt's 7x7 and 3x3 stages at 1 thread, in the model: see
    benchmarks/RESULTS.md. (Float panels only: the int8 pair panels' tiles were not measured
    with it.)"""
    weight = _panel_weight(op)
    return (weight is not None and weight.ndim == 3
            and math.prod(extents[:rows + 1]) <= MAX_WHOLE_ROWS
            and math.prod(weight.shape) * itemsize(weight.dtype) >= WHOLE_ROWS_WEIGHT_BYTES)


def _whole_rows_tile(choices: tuple, extents: list[int], rows: int, inner: int
                     ) -> tuple | None:
    """The (mid, inner) rows tile that covers all of a few-row GEMM's rows in one cache tile
    with no tail: rows per register tile a divisor of the extent in (inner / 2, inner] (a
    guarded row inside the unrolled tile spills its accumulators: 49 rows as 9 x 6 ran 5x
    slower, and 7 rows x 2 vectors spilled too, 1.7x); None without such a divisor."""
    extent = extents[rows]
    exact = [c for c in choices if c[0] * c[1] == extent and inner // 2 < c[1] <= inner]
    if not exact:
        return None
    return max(exact, key=lambda c: c[1])


def _most_rows_tile(choices: tuple, extent: int, cap: int) -> tuple:
    """A register tile of MIN_TAILED_ROWS..`cap` rows repeated over as many rows as fit the
    extent, the rest one tail tile (split off unguarded by schedule/passes/tails.py): the fewest
    row tiles, then the longest tail. 49 rows as 8 x 6 + 1 (one cache tile of 48 rows), not
    4 x 6 (the weight read 3 times) nor 12 x 4 + 1; 11 as 6 + 5, not 4 + 4 + 3 (1.12x); 7
    as 4 + 3, not 6 + 1 (1.04x). Swin-T's 7x7-pixel stage (768 x 3072 weights), 1 thread:
    benchmarks/RESULTS.md."""
    inners = sorted({c[1] for c in choices if MIN_TAILED_ROWS <= c[1] <= min(cap, extent)})
    if not inners:
        inners = [min(cap, extent)]

    def cost(inner):
        tiles = -(-extent // inner)
        return tiles, -(extent - (tiles - 1) * inner)
    inner = min(inners, key=cost)
    fits = [c for c in choices if c[1] == inner and c[0] * c[1] <= extent]
    return max(fits, key=lambda c: c[0], default=(1, inner))


def _whole_leading_axes(space, label: str, extents: list[int], rows: int) -> dict | None:
    """Tiles that put every axis before the register tile's rows whole into the cache tile,
    so the rows spread over several axes (an NHWC activation's few pixels, H x W) share one
    read of each weight panel too; None when a knob lacks the (extent, 1) choice. The rows
    of ConvNeXt-T's last stage (3 x 3 pixels, 768 x 3072 weights from DRAM): each of the 3
    image rows re-read the whole 9.4 MB weight, 2.4 -> 1.5 ms a GEMM, 1 thread."""
    values = {}
    for pos in range(rows):
        if extents[pos] == 1:
            continue
        knob = space._by_name[f"{label}/tile/{pos}"]
        if (extents[pos], 1) not in knob.choices:
            return None
        values[knob.name] = [extents[pos], 1]
    return values


def _panel_weight(op: ComputeOp):
    """The column-panel weight of a matmul_prepacked anchor ([N / panel, K, panel], or int8
    pairs [N / panel, K4, 2, panel] or words [N / panel, K4, 1, panel]: the operand its
    vector axis indexes in the last dim, with no reduce axis there: a grouped conv's
    activation words [N, H, W, C4] take their word from the column's group plus the
    reduce axis), else None."""
    if op.tag != MATMUL_PREPACKED or len(op.axis) < 2:
        return None
    reduce_vars = {r.var for r in op.reduce_axis}
    for node in walk(op.body):
        if isinstance(node, TensorLoad) and node.tensor.ndim in (3, 4):
            last = set(walk(node.indices[-1]))
            if op.axis[-1].var in last and not reduce_vars & last:
                return node.tensor
    return None


def _panel_width(op: ComputeOp) -> int | None:
    """The column-panel width of a matmul_prepacked anchor (the last dim of the weight its
    vector axis indexes), else None."""
    weight = _panel_weight(op)
    return None if weight is None else weight.shape[-1]


def _nearest(choices: tuple, want: tuple) -> list:
    best = min(choices, key=lambda c: sum(abs(math.log2(a) - math.log2(b))
                                          for a, b in zip(c, want)))
    return list(best)


def _nearest_scalar(choices: tuple, want: int):
    return min(choices, key=lambda c: (abs(math.log2(max(c, 1)) - math.log2(want)), c))


def _reduce_block(extent: int) -> int:
    """The reduce tile of a GEMM-like anchor: the whole axis up to MAX_WHOLE_REDUCE, else
    the largest divisor in [32, 128] (a guarded tail in the register tile's k loop costs
    more than a shorter block), else 128."""
    if extent <= MAX_WHOLE_REDUCE:
        return extent
    return max((d for d in range(32, 129) if extent % d == 0), default=128)


def _reduce_steps(op: ComputeOp) -> int:
    """The register tile's reduce budget of a nested-reduce anchor (`nested_reduce_tiles`):
    REDUCE_STEPS, or, for few output pixels over a big weight (`_few_pixels_big_weight`),
    the steps that read about STREAM_RUN_BYTES of each weight row the cache tile holds per
    visit: the reduce axes after the outermost whole, the outermost (a blocked conv's
    input-channel blocks) in the divisor of its extent nearest that run. Each visit then
    uses its short run of the weight for all the tile's pixels before the next, so the
    weight streams at an even pace through the kernel; with runs of 256 multiply-adds (up
    to 16 KB), each was read from DRAM in a burst for the first pixel row and the other rows
    computed with no memory traffic to hide it behind, and shorter runs (512 bytes: one
    input block of 8 x 16 outputs) ran slower again. RegNet-X-1.6GF's last two stages (1x1
    convs, 408 x 408 over 6 x 6 pixels and 912 x 912 over 3 x 3, the weights from DRAM as
    in the model), 1 thread: benchmarks/RESULTS.md, 2026-11-26 11:40 UTC."""
    few = _few_pixels_big_weight(op)
    if few is None:
        return REDUCE_STEPS
    weight, blocks = few
    inner = math.prod(r.extent for r in op.reduce_axis[1:])
    outer = op.reduce_axis[0].extent
    run = math.prod(weight.shape) * itemsize(weight.dtype) / (outer * blocks)
    tile = min((d for d in range(1, outer + 1) if outer % d == 0),
               key=lambda d: (abs(math.log2(d * run / STREAM_RUN_BYTES)), d))
    return max(1, min(REDUCE_STEPS, tile * inner))


def _few_pixels_big_weight(op: ComputeOp):
    """(weight, output blocks) when an anchor's output has at most STREAM_MAX_PIXELS points
    per weight element (the axes its biggest operand is not indexed by: a conv's batch x
    output pixels) while that operand is at least WHOLE_ROWS_WEIGHT_BYTES (too big for L2):
    the weight is then read from memory for little arithmetic, as a prepacked GEMM's few
    rows (_few_rows_big_weight). At 7 x 7 pixels the short runs lost (ResNet-50's 256 ->
    1024 1x1 conv at 112 x 112 input, 1 MB weight, weights from DRAM: 0.55 vs 0.47 ms);
    at 6 x 6 and 3 x 3 they won. Output blocks: the points of the axes before the vector
    axis that index the weight (a blocked conv's output-channel blocks). Else None."""
    if len(op.input_tensors) < 2 or not op.axis or not op.reduce_axis:
        return None
    weight = max(op.input_tensors, key=lambda t: math.prod(t.shape))
    if math.prod(weight.shape) * itemsize(weight.dtype) < WHOLE_ROWS_WEIGHT_BYTES:
        return None
    used = set()
    for node in walk(op.body):
        if isinstance(node, TensorLoad) and node.tensor is weight:
            for index in node.indices:
                used |= set(walk(index))
    if op.reduce_axis[0].var not in used:
        return None
    pixels = math.prod(a.extent for a in op.axis if a.var not in used)
    if pixels > STREAM_MAX_PIXELS:
        return None
    return weight, math.prod(a.extent for a in op.axis[:-1] if a.var in used)


def nested_reduce_tiles(op: ComputeOp, steps: int = REDUCE_STEPS) -> list[int]:
    """Inner tiles of several reduce axes (a conv's channels and window, a blocked conv's
    channel blocks, window and in-block channels): taken whole from the innermost axis out
    while the register tile's reduction stays within `steps` multiply-adds, so the weights one
    cache tile reads per visit stay cache-sized whatever the layout splits channels into."""
    tiles = [1] * len(op.reduce_axis)
    budget = steps
    for pos in range(len(op.reduce_axis) - 1, -1, -1):
        extent = op.reduce_axis[pos].extent
        if extent <= budget:
            tiles[pos], budget = extent, budget // extent
        else:
            tiles[pos] = max(1, max((f for f in range(1, budget + 1) if extent % f == 0),
                                    default=1))
            budget = 1
    return tiles


def _capped_taps(tiles: list[int], pos: int, vectors: int) -> int:
    """Reduce tile `pos` of a window anchor whose register tile holds `vectors` vectors:
    from the outermost reduce axis in, tiles become 1 (a loop) until the unrolled taps times
    `vectors` are at most MAX_UNROLLED_TAPS; the innermost tile is kept whatever its size."""
    tiles = list(tiles)
    for p in range(len(tiles) - 1):
        if math.prod(tiles) * vectors <= MAX_UNROLLED_TAPS:
            break
        tiles[p] = 1
    return tiles[pos]


def _vector_tile(extent: int, lanes: int, odd: bool = False) -> int:
    """Two vectors or one, whichever divides `extent` (a guarded tail in the register tile
    costs more than a narrower tile); a short axis is taken whole. With 16-lane (AVX-512)
    vectors a half vector, still a full 256-bit register, is the fallback when it divides:
    56-wide rows (MobileNetV2, ResNet-18) and 1000 columns are whole 8-lane vectors but
    not whole 16-lane ones. With `odd` (window anchors), an axis no such width divides
    takes `_odd_vector_tile`; otherwise, with 16-lane vectors, the widest divisor between
    a quarter of a vector and one (50 -> 10, 49 -> 7), else one vector with a guarded
    tail. Outside window anchors, with 16-lane vectors, an axis between one and two
    vectors long is taken whole only at exactly two: a 24- or 25-lane register tile (a
    register and a partial one) leaves LLVM splitting its accumulators into scalars,
    10-20x slower than three 8-lane tiles
    (MobileViT's (16, 64, 64) @ (16, 64, 24) attention, 1 thread: 843 us whole, 45 us as
    3 x 8 lanes; 128x96 @ 96x24: 0.17 vs 0.008 ms), so it takes a half or partial vector
    as above (24 -> 8, 20 -> 10), or one vector with a guarded tail (17, 23, 31). (8-lane
    vectors keep the whole axis: AVX2 showed no such cliff, 12 columns ran 0.07 ms whole,
    0.12 as 8 lanes and a tail.)"""
    if extent <= lanes or (extent <= 2 * lanes and (odd or lanes < 16 or extent % lanes == 0)):
        return extent
    widths = (2 * lanes, lanes, lanes // 2) if lanes >= 16 else (2 * lanes, lanes)
    for width in widths:
        if extent % width == 0:
            return width
    if odd:
        return _odd_vector_tile(extent, lanes)
    return (_partial_vector_tile(extent, lanes) if lanes >= 16 else None) or lanes


def _partial_vector_tile(extent: int, lanes: int) -> int | None:
    """With 16-lane vectors, the widest divisor of `extent` between a quarter of a vector
    and one: one partial register, no guarded tail. ViT-S's 50 x 50 attention scores as
    5 x 10 lanes: 0.21 -> 0.037 ms at 1 thread (16 lanes with a guarded tail before,
    two-register 25-lane tiles 0.46); Swin-T's 49 x 49 window scores as 7 x 7 lanes: 2.56 ->
    0.92 ms (3 x 8 lanes and a tail, the AVX2 tile, 1.38). Else None. (8-lane vectors keep
    the guarded tail: not measured.)"""
    if lanes < 16:
        return None
    return max((d for d in range(max(2, lanes // 4), lanes) if extent % d == 0),
               default=None)


def _odd_vector_tile(extent: int, lanes: int) -> int:
    """The vector tile of a window anchor's axis that no whole vector count divides: the
    widest divisor between half a vector and two vectors (28 -> 14, 30 -> 15: a 14-lane
    vector is one register and a partial one, no guard), else one vector with a guarded
    tail. In a window anchor's whole-plane tile the guard sits inside the vectorised loop
    and scalarises it: MobileNetV2 112's NCHW int8 depthwise 3x3 over 144 x 28 x 28 took
    5.0 ms with 3 x 8 lanes and a guard, 0.16 ms with 2 x 14. (A GEMM-like conv runs its
    whole tiles unguarded and keeps one vector: 64->64 3x3 at 28, 7 x 8 lanes with a tail
    vs 4 x 14, 1.99 vs 2.30 ms.)"""
    fits = [d for d in range(max(2, lanes // 2), 2 * lanes + 1) if extent % d == 0]
    return max(fits) if fits else lanes


def _streaming_tile(choices: tuple, extent: int, lanes: int, budget: int, cores: int):
    """(inner, mid) of the vector axis of a GEMV-shaped anchor (no row axis: no reuse of
    the big operand): the loop order becomes k | column block | vector, so every k streams
    one contiguous run of the row B[k, :] per thread into accumulators that stay in L1.
    A run is the widest tail-free one of at most `budget` // 2 vectors; a column block the
    most runs that keep the `cores` threads busy (`_core_balance` at least
    MIN_STREAM_BALANCE) and divide the axis (a guarded tail puts a guard on every lane:
    1000 columns as 3 blocks of 12 runs ran at 0.6x, weights from DRAM, 1 thread): 256
    columns as 2 blocks of 4 runs of 32; 1000 columns (25 runs of 40, 25 = 5 x 5) as 25
    one-run blocks dealt out 13 + 12 on 2 threads, one block on 1 thread. A one-run block
    is `run / lanes` one-vector steps (as one 5-vector tile it ran at 0.3-0.7x). On one
    thread the single block stays the fastest: 25 blocks ran at 0.78x with MobileNetV2's
    classifier (1280 x 1000) streaming from DRAM, which is why `cores` is the kernel's
    thread count (`_kernel_threads`). Old vs new default at 2 threads, weights in L3 (a
    busy machine: libgomp's worker sometimes waits a time slice, ~8 ms, for any parallel
    kernel): 1280 x 1000 1.9x, ResNet-18's 512 x 1000 1.2-2.0x."""
    # a step is one vector, or the tail-free half vector `_vector_tile` falls back to
    step = lanes if extent % lanes == 0 else min(lanes, _vector_tile(extent, lanes))
    run = max((w for w in range(step, _stream_run_cap(choices, lanes, budget) + 1, step)
               if extent % w == 0), default=step)
    blocks = -(-extent // run)
    mids = sorted({m for m, i in choices if i == run and blocks % m == 0}) or [1]
    mid = max(mids, key=lambda m: (min(_core_balance(blocks // m, cores),
                                       MIN_STREAM_BALANCE), m))
    if mid == 1 and blocks > 1 and run > step and run % step == 0 and \
            (run // step, step) in choices:
        return step, run // step
    return run, mid


def _stream_run_cap(choices: tuple, lanes: int, budget: int) -> int:
    """The longest run of a GEMV's column block: `budget` // 2 vectors, and with 16-lane
    vectors no more than the widest inner tile the knob offers. Past it (12 x 16 lanes
    against a cap of 64) no mid tile pairs with the run and the block fell back to
    one-vector steps over 8 vectors: 32 blocks of 128 columns, each a strided 512-byte
    stream per row. AlexNet's 9216 x 4096 classifier (151 MB from DRAM), 1 thread: 12.1 ms
    so, 7.0 ms as one block of 64-lane runs over the whole row (benchmarks/RESULTS.md,
    2026-11-26 14:45 UTC). On 8-lane vectors the fallback's one-run blocks are what was measured
    (1000 columns as 25 blocks of 5 steps): unchanged."""
    cap = lanes * max(1, budget // 2)
    if lanes >= 16:
        cap = min(cap, max(i for _, i in choices))
    return cap


def _kernel_threads(target: Target, threads: int) -> int:
    """Threads the kernel will likely run on: the target's cores, or fewer when the space's
    thread count (SearchSpace(threads=), by default KILN_NUM_THREADS) asks for fewer. Only
    the GEMV column split reads it: its single block is the fastest on one thread and leaves
    every other core idle."""
    return max(1, min(target.num_cores or 1, threads))


def _core_balance(count: int, cores: int) -> float:
    """Share of the cores' time spent working when a parallel loop of `count` equal
    iterations runs on `cores` threads (1.0: every core gets the same number)."""
    return count / (cores * -(-count // cores))


def _max_rows(target: Target, op: ComputeOp, rows: int) -> int | None:
    """The most rows a register tile takes: WIDE_MAX_ROWS with 32 vector registers where
    the rows read overlapping windows of a broadcast operand (`_rows_broadcast` and
    `taps_along_rows`: NCHW-input convs, stems over 3 channels), else None (the register budget bounds them). Elsewhere
    the cap measured neutral to slower (depthwise convs and pools 0.8-1.0x, blocked 1x1
    convs 1.0x, 2026-11-26 14:45 UTC)."""
    if (target.vector_bits < 512 or not _rows_broadcast(op, rows)
            or not taps_along_rows(op, rows)):
        return None
    return WIDE_MAX_ROWS


def _register_tile(rows_extent: int, vec_extent: int, width: int, lanes: int,
                   budget: int, tails: bool = False, broadcast: bool = False,
                   max_rows: int | None = None) -> tuple[int, int]:
    """(rows, vector width) of the accumulator tile: the most accumulators within `budget`
    vector registers, rows dividing the axis (with `tails`, rows two vectors wide are
    `balanced_rows` instead: measured on AVX2 for GEMMs and blocked convs; 12 x 1-vector
    rows with a tail made an NCHW conv 0.75x); ties keep the wider vector. One vector wide
    can win for short rows when rows must divide: 7 rows x 1 vector beats 2 rows x 2
    vectors on a 14-wide axis (and 7 x 2 vectors would spill: 14 accumulators + operands
    > 16 registers). With `broadcast` (rows that must divide the axis and read an operand as
    one broadcast per row, `_rows_broadcast`), tiles of at least MIN_BROADCAST_ACCUMULATORS
    accumulators rank by multiply-adds per load instead: SqueezeNet's 3x3/2 stem over 3 NCHW
    channels to 63 x 63 x 64 (63 = 7 x 9), 3 rows x 2 vectors instead of 9 x 1 (each input
    broadcast once per 16 output channels, not twice): 0.50 -> 0.32 ms at 1 thread.
    `max_rows` caps the rows (WIDE_MAX_ROWS)."""
    widths = [width]
    if width == 2 * lanes or (width > lanes and width % lanes == 0):
        widths.append(lanes)
    best = None
    for w in widths:
        vectors = -(-w // lanes)
        cap = max(1, min(budget // vectors, max_rows or budget))
        if tails and w == 2 * lanes:
            rows = balanced_rows(rows_extent, cap)
        else:
            rows = _rows_tile(rows_extent, cap)
        if rows > cap:                      # _rows_tile may take one more row than asked
            rows = max(d for d in range(1, min(cap, rows_extent) + 1) if rows_extent % d == 0)
        score = rows * vectors
        if broadcast and score >= MIN_BROADCAST_ACCUMULATORS:
            # per reduce step the tile loads one broadcast per row and one vector per
            # vector column: rank by multiply-adds per load (ahead of any tile with fewer
            # accumulators than MIN_BROADCAST_ACCUMULATORS)
            score = budget + rows * vectors / (rows + vectors)
        if best is None or score > best[0]:
            best = (score, rows, w)
    if vec_extent % best[2]:
        cap = max(1, min(budget // -(-width // lanes), max_rows or budget))
        rows = _rows_tile(rows_extent, cap)
        if max_rows is not None and rows > max_rows:
            rows = max(d for d in range(1, min(cap, rows_extent) + 1) if rows_extent % d == 0)
        return rows, width
    return best[1], best[2]


def _block_axis(op: ComputeOp, rows: int) -> int | None:
    """The axis of a one-vector-wide anchor whose points share the register tile rows'
    broadcast operand: indexed, with the vector axis, by the operand the rows do not index
    (a blocked conv's output-channel blocks, ko in w[ko, .., ki]), never by one the rows do;
    None without one (a GEMM, whose only such axis is the vector one)."""
    row, vec = op.axis[rows].var, op.axis[-1].var
    loads = [node for node in walk(op.body) if isinstance(node, TensorLoad)]
    used = [set().union(*(set(walk(i)) for i in load.indices)) if load.indices else set()
            for load in loads]
    for pos in range(rows):
        var = op.axis[pos].var
        if op.axis[pos].extent > 1 and \
                any(var in u and vec in u and row not in u for u in used) and \
                not any(var in u and row in u for u in used):
            return pos
    return None


def _blocks_rows_tile(blocks: int, rows: int, budget: int) -> tuple[int, int]:
    """(blocks, rows) of a one-vector register tile spread over output-channel blocks and
    pixel rows, as divisors (a guarded block or row inside the unrolled tile spills it):
    the most accumulators within `budget`, then the fewest loads per reduce step (one
    weight vector per block, one broadcast per row). Each broadcast then feeds several
    blocks: RegNet-X-1.6GF's 1x1 convs over blocks of 8 channels (168 x 168 at 12 x 12,
    3 blocks x 4 pixels instead of 12 pixels: 0.150 -> 0.101 ms; 408 x 408 at 6 x 6, 3 x 3
    instead of 6 x 1), 1 thread: benchmarks/RESULTS.md, 2026-11-26 11:40 UTC."""
    best = (1, 1)
    for c in (d for d in range(1, min(blocks, budget) + 1) if blocks % d == 0):
        for r in (d for d in range(1, min(rows, budget // c) + 1) if rows % d == 0):
            if (c * r, -(c + r)) > (best[0] * best[1], -(best[0] + best[1])):
                best = (c, r)
    return best


def _blocks_rows_tile_wide(blocks: int, rows: int, budget: int) -> tuple[int, int]:
    """`_blocks_rows_tile` for a 32-register file (AVX-512): among the divisor tiles
    within `budget` (and, where none reaches half of it, tiles of at least MIN_TAILED_ROWS
    rows followed by a tail) with at least half of it in accumulators (or the most there
    are), the
    fewest loads per multiply-add ((blocks + rows) / (blocks x rows)), then the most
    accumulators. Ranking by accumulators first, 24 registers took 16 blocks x 1 pixel
    wherever the pixel rows are prime or 7-ish (7 x 7 outputs, Winograd's 49 tiles): 17
    loads per 16 multiply-adds, the 16 weight vectors rows of the weight 16-147 KB apart
    (one L1 set each), and ResNet-18's 7 x 7 stage ran 4-7x slower than 2 blocks x 7
    pixels (benchmarks/RESULTS.md, 2026-11-26 14:45 UTC). At most WIDE_MAX_BLOCKS blocks: with few
    pixels (RegNet-X-1.6GF's 912 channels at 3 x 3, 57 blocks) 8 or 16 blocks x 1 pixel
    ran 2.3x slower than 3 x 3."""
    widths = [c for c in range(1, min(blocks, budget, WIDE_MAX_BLOCKS) + 1) if blocks % c == 0]
    tiles = [(c, r) for c in widths
             for r in range(1, min(rows, budget // c) + 1) if rows % r == 0]
    if max(c * r for c, r in tiles) < budget // 2:
        # rows with few divisors (31, 62): rows beyond a divisor, the rest one tail tile
        # (split off unguarded, schedule/passes/tails.py), not 4 blocks x 1 pixel. SqueezeNet-1.1's
        # 3x3 16->64 convs at 31 x 31: 4 x 1 pixel 0.32 ms, 4 x 6 (5 x 6 + 1) 0.167 ms, any
        # tile of 12-24 accumulators 0.16-0.17 (onnxruntime 0.155), 1 thread
        tiles += [(c, r) for c in widths
                  for r in range(MIN_TAILED_ROWS, min(rows, budget // c) + 1) if rows % r]
    enough = min(budget // 2, max(c * r for c, r in tiles))
    return min((t for t in tiles if t[0] * t[1] >= enough),
               key=lambda t: ((t[0] + t[1]) / (t[0] * t[1]), -t[0] * t[1], t[0]))


def _rows_broadcast(op: ComputeOp, rows: int) -> bool:
    """Whether an operand is read per register-tile row as one scalar broadcast to every
    lane: it is indexed by the rows axis and not by the vectorised (last) one (a GEMM's A,
    an NCHW-input conv's x; a depthwise conv's or a pool's input, indexed by the channel
    lanes too, is a vector load)."""
    row, vec = op.axis[rows].var, op.axis[-1].var
    for node in walk(op.body):
        if isinstance(node, TensorLoad):
            used = set().union(*(set(walk(i)) for i in node.indices)) if node.indices else set()
            if row in used and vec not in used:
                return True
    return False


def balanced_rows(extent: int, cap: int) -> int:
    """Rows of a register tile that may leave a tail: as few tiles as `cap` rows allow, each
    as short as that count permits (7 rows: 4 + 3, not 6 + 1; 14: 6 + 6 + 2, 5 is not a
    tile choice), a knob choice of the axis. A tail costs little since codegen runs every
    whole tile without guards (schedule/passes/promote.py), and fewer, fuller tiles load the
    shared operand less often. Old vs new default at 1 thread: ResNet-18's blocked 3x3
    convs 1.05x (@56) to 1.53x (256->512/2 @14), 512->512 @7 (4+3 rows x 16 over 7 x 8)
    1.32x; GEMMs 0.98-1.12x (512^3 1.09x, 1024^3 1.00x). Not used where the row axis
    shares an operand index with the innermost taps (NCHW-input convs, the 7x7/2 stem over
    3 channels among them): `taps_along_rows`."""
    if extent <= cap:
        return extent
    tiles = -(-extent // cap)
    choices = [r for r in factor_candidates(extent, cap) if -(-extent // r) == tiles]
    return min(choices) if choices else cap


def _rows_tile(extent: int, want: int) -> int:
    """`want` rows, or a nearby divisor of `extent` (down to half of want, or one more) to
    avoid a guarded tail."""
    want = min(want, extent)
    for rows in list(range(want, (want + 1) // 2 - 1, -1)) + [want + 1]:
        if rows >= 1 and extent % rows == 0:
            return rows
    return want


def _outer_iterations(extents, mid, inner, depth: int) -> int:
    return math.prod(-(-extents[p] // (mid[p] * inner[p])) for p in range(depth))


def _parallel_depth(extents, mid, inner, want: int) -> int:
    """How many outer loops the default parallel loop fuses: the first two (shrinking their
    middle tiles to make `want` iterations), or three when two cannot make them (a conv with
    few output-channel blocks), shrinking the third's tile too. Returns the depth."""
    n = len(extents)
    _ensure_parallel_work(extents, mid, inner, min(2, n), want)
    if n < 3 or _outer_iterations(extents, mid, inner, 2) >= want:
        return min(2, n)
    depth = min(MAX_PARALLEL_DEPTH, n)
    _ensure_parallel_work(extents, mid, inner, depth, want)
    return depth


def _ensure_parallel_work(extents, mid, inner, depth: int, want: int) -> None:
    """Shrink middle tiles of the first `depth` axes until their outer loops (fused into the
    parallel loop) have at least `want` iterations, or every middle tile is 1."""
    def outer_iterations():
        return _outer_iterations(extents, mid, inner, depth)
    while outer_iterations() < want:
        candidates = [p for p in range(depth) if mid[p] > 1]
        if not candidates:
            return
        p = max(candidates, key=lambda q: mid[q])
        mid[p] //= 2


def _tail_free_middles(extents, mid, inner) -> None:
    """Round each middle tile down to a divisor of extent / inner: a cache tile that does
    not divide the axis puts its bound guard inside the unrolled register tile (e.g. 3 x 4
    pixels over a 28-wide row), which stops the accumulators living in registers."""
    for p, (extent, m, i) in enumerate(zip(extents, mid, inner)):
        if i and extent % i == 0:
            q = extent // i
            mid[p] = max(d for d in range(1, min(m, q) + 1) if q % d == 0)


def _whole_short_axes(extents, mid, inner, rows, depth: int) -> None:
    """Take each cache-tile axis after the parallel ones (`depth`), other than the register
    tile's rows and the vector axis, whole when it is at most MAX_WHOLE_CACHE_AXIS long:
    its middle tile, half the axis rounded down to a divisor, is one row when the length is
    prime, and a blocked conv's cache tile at 7x7 then re-reads its weights for each of the
    7 output rows. Whole 7-row tiles, old vs new default at 1 thread (medians, two runs):
    ResNet-18's blocked 3x3 512->512 @7 1.06-1.10x, 256->512/2 to 7 1.28-1.33x, the 1x1/2
    to 7 1.0x; 14/28/56-wide layers keep their tiles (7, 7, 8 rows)."""
    for p in range(depth, len(extents) - 1):
        if p != rows and inner[p] == 1 and extents[p] <= MAX_WHOLE_CACHE_AXIS:
            mid[p] = extents[p]


def taps_along_rows(op: ComputeOp, rows: int) -> bool:
    """Whether the anchor's innermost reduce axis longer than 1 and its register tile's row
    axis index the same dimension of an operand (an NCHW-input conv's x taps along its
    output columns, x[.., s * xx + rx]): the unrolled rows then read overlapping windows
    of that operand, and rows beyond a divisor (`balanced_rows`) measured slower, not
    faster. Old (6 rows with a tail) vs new (divisor rows) default at 1 thread: ResNet-18's
    7x7/2 stem over 3 NCHW channels 1.00-1.15x (6-row tiles ran at 0.78x the 4-row ones
    in one run; with its x taps outside the register tile, 6 and 4 rows ran alike), its
    NCHW-layout 3x3 convs (conv2d_nchw_kpacked_blocked) 1.9-2.8x at 14-56, 1.07-1.18x at 7.
    A blocked conv's innermost reduce axis is the channel block, indexed on its own."""
    taps = [r for r in op.reduce_axis if r.extent > 1]
    if not taps:
        return False
    row, tap = op.axis[rows].var, taps[-1].var      # (a 1x1 conv's unit taps do not count)
    for node in walk(op.body):
        if isinstance(node, TensorLoad):
            for index in node.indices:
                used = set(walk(index))
                if row in used and tap in used:
                    return True
    return False


def factor_candidates(extent: int, cap: int) -> list[int]:
    """Divisors of `extent`, powers of two and 3 x powers of two (register tiles such as 6
    rows x 2 vectors fill a 16-register file; non-divisors are legal: tails are guarded)."""
    out = {d for d in range(1, min(extent, cap) + 1) if extent % d == 0}
    out |= {m << p for p in range(0, 12) for m in (1, 3) if (m << p) <= min(extent, cap)}
    return sorted(out)
