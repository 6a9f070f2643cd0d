"""Kernel calls on guarded copies of their arrays: each array sits between two zones of a
known byte, so a write before or past it (an out-of-bounds vector store, a wide store of a
narrow lane) shows as a changed guard byte instead of a corrupted heap later."""
from __future__ import annotations

import numpy as np

GUARD = 256          # bytes each side: several vectors of the widest ISA
FILL = 0xA5


def _guarded_copy(a: np.ndarray) -> tuple[np.ndarray, int, np.ndarray]:
    """(backing bytes, offset of the array in them, the 64-byte aligned array view)."""
    raw = np.full(a.nbytes + 2 * GUARD + 64, FILL, np.uint8)
    start = (-raw.ctypes.data) % 64 + GUARD
    body = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    body[...] = a
    return raw, start, body


def guarded_call(kernel, *arrays: np.ndarray) -> list[str]:
    """Run `kernel` on guarded copies of `arrays`, copy written arrays back and return one
    message per array whose guard bytes changed (empty when nothing was written out of
    bounds)."""
    copies = [_guarded_copy(a) for a in arrays]
    kernel(*[body for _, _, body in copies])
    problems = []
    for (raw, start, body), a, p in zip(copies, arrays, kernel.params):
        end = start + a.nbytes
        before = np.flatnonzero(raw[start - GUARD:start] != FILL) - GUARD
        after = np.flatnonzero(raw[end:end + GUARD] != FILL)
        if before.size or after.size:
            problems.append(f"kernel '{kernel.name}' wrote outside '{p.name}' "
                            f"({p.dtype}{list(p.shape)}): bytes {before.tolist()} before it, "
                            f"{after.tolist()} past its end")
        if p.written:
            a[...] = body
    return problems
