"""matmul onto the generic matmul kernel (codegen/generic/matmul.py): numpy semantics (1-D
operands, batch broadcasting) reduced at plan time to two batch dims with strides (batches
of A over one shared B fold into A's rows), and the work split into (batch, column panel,
row chunk) tasks. A constant 2-D B (a weight) is packed into 32-column panels at plan time
for matmul.f32_packed; batch dims beyond two that do not merge take one call each."""
from __future__ import annotations

import numpy as np

from ...codegen.generic.matmul import LANES, ROW_UNIT, WIDE
from .lowering import MAX_ELEMENTS, Unsupported, lowers, merge_dims

# a panel of B (K x NC floats) should stay in L2 while a thread runs its row chunks
PANEL_BYTES = 256 * 1024
TASKS = 16          # aim for this many parallel tasks when the work allows it
MIN_TASK_FLOPS = 1 << 15
MAX_CALLS = 4096    # calls for batch dims beyond two (each costs a few microseconds)


def batch_dims(shape_a, shape_b, batch):
    """[(size, stride in A, stride in B)] of the broadcast batch dims, merged where both
    operands' strides allow and without size-1 dims."""
    def strides(shape, own):
        padded = (1,) * (len(batch) - len(shape)) + tuple(shape)
        out, acc = [], own
        for size in reversed(padded):
            out.append(acc if size > 1 else 0)
            acc *= size
        return list(reversed(out))

    sa = strides(shape_a[:-2], shape_a[-2] * shape_a[-1])
    sb = strides(shape_b[:-2], shape_b[-2] * shape_b[-1])
    return merge_dims(batch, sa, sb)


def plan(shape_a, shape_b, packed: bool = False) -> list[list[int]]:
    """The dims of each call of matmul.f32 for A @ B (numpy shapes): one call, or one per
    index of the batch dims beyond the two the kernel loops over; none when the output is
    empty. `packed`: of matmul.f32_packed (B 2-D, packed by pack_b)."""
    sa = tuple(shape_a) if len(shape_a) > 1 else (1,) + tuple(shape_a)
    sb = tuple(shape_b) if len(shape_b) > 1 else tuple(shape_b) + (1,)
    m, k = sa[-2:]
    n = sb[-1]
    batch = tuple(max(x, y) for x, y in zip(
        (1,) * (len(sb) - len(sa)) + sa[:-2], (1,) * (len(sa) - len(sb)) + sb[:-2]))
    dims = batch_dims(sa, sb, batch)
    if len(dims) == 1 and dims[0][2] == 0 and dims[0][1] == m * k:
        m, dims = m * dims[0][0], []        # B shared by every batch: one taller A
    while len(dims) < 2:
        dims.insert(0, (1, 0, 0))
    lead, dims = dims[:-2], dims[-2:]
    nb = dims[0][0] * dims[1][0]
    calls = int(np.prod([size for size, _, _ in lead], dtype=np.int64))
    if nb * m * n * calls == 0:
        return []
    if calls > MAX_CALLS:
        raise ValueError(f"{calls} calls for the batch dims beyond two")
    nc = max(WIDE, PANEL_BYTES // (4 * max(k, 1)) // WIDE * WIDE)
    npanels = max(1, n // nc)
    if npanels == 1 and not packed:
        nc = n
    rows_tasks = max(1, -(-m // ROW_UNIT))
    work = 2 * nb * m * n * k
    want = max(1, min(TASKS, work // MIN_TASK_FLOPS))
    nchunks = min(rows_tasks, max(1, -(-want // (nb * npanels))))
    rc = -(-rows_tasks // nchunks) * ROW_UNIT
    nchunks = -(-m // rc)
    common = [m, n, k, dims[0][0], dims[1][0], dims[0][1], dims[1][1], dims[0][2],
              dims[1][2], k, 1, WIDE if packed else n, nc, npanels, rc, nchunks,
              k * WIDE if packed else 0]
    out = []
    for flat, at in enumerate(np.ndindex(*(size for size, _, _ in lead))):
        a0 = sum(i * x for i, (_, x, _) in zip(at, lead))
        b0 = sum(i * y for i, (_, _, y) in zip(at, lead))
        out.append(common + [a0, b0, flat * nb * m * n])
    return out


def pack_b(b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """B[K, N] as zero-padded panels [ceil(N / WIDE), K, WIDE] (matmul.f32_packed's B),
    written into `out` when given: one strided copy (a model's cold compile packs every
    weight)."""
    k, n = b.shape
    panels, full = -(-n // WIDE), n // WIDE
    if out is None:
        out = np.empty((panels, k, WIDE), np.float32)
    out[:full] = b[:, :full * WIDE].reshape(k, full, WIDE).transpose(1, 0, 2)
    if full < panels:
        out[full, :, :n - full * WIDE] = b[:, full * WIDE:]
        out[full, :, n - full * WIDE:] = 0
    return out


@lowers("matmul")
def _matmul(node, ctx):
    ctx.require_dtype("float32")
    a, b, c = ctx.input(0), ctx.input(1), ctx.output(0)
    weight = ctx.constant(1)
    packed = (weight is not None and b.ndim == 2 and b.shape[1] >= LANES
              and b.shape[0] * -(-b.shape[1] // WIDE) * WIDE <= MAX_ELEMENTS)
    try:
        calls = plan(a.shape, b.shape, packed)
    except ValueError as exc:
        raise Unsupported(ctx.describe(f"{list(a.shape)} @ {list(b.shape)}: {exc}")) from None
    if not calls:
        return
    if packed:
        b = pack_b(b, ctx.temp((-(-b.shape[1] // WIDE), b.shape[0], WIDE)))
    for dims in calls:
        ctx.call("matmul.f32_packed" if packed else "matmul.f32", [a, b, c], dims)
