"""The weights blob as an LLVM module: one 64-byte-aligned constant byte array.

The IR text is made with numpy (three characters per byte, `\\XX`), so a 45 MB blob takes
about a second to write and for LLVM to parse, not the minutes a per-byte Python loop would.
"""
from __future__ import annotations

import numpy as np

from .plan import WEIGHT_ALIGNMENT

_ESCAPES = np.array([f"\\{b:02X}".encode() for b in range(256)], dtype="S3")


def weights_ir(data: bytes, symbol: str, triple: str, data_layout: str = "") -> str:
    """A module defining `symbol` = `data` (a constant in the read-only section)."""
    text = _ESCAPES[np.frombuffer(data, dtype=np.uint8)].tobytes().decode("ascii")
    layout = f'target datalayout = "{data_layout}"\n' if data_layout else ""
    return (f'; ModuleID = "{symbol}"\n{layout}target triple = "{triple}"\n'
            f'@{symbol} = constant [{len(data)} x i8] c"{text}", align {WEIGHT_ALIGNMENT}\n')


def pack_constants(arrays) -> tuple[bytes, dict[str, int]]:
    """(blob, offset by name): each array's bytes at a WEIGHT_ALIGNMENT-aligned offset."""
    parts, offsets, size = [], {}, 0
    for name, arr in arrays:
        pad = -size % WEIGHT_ALIGNMENT
        if pad:
            parts.append(b"\0" * pad)
            size += pad
        offsets[name] = size
        raw = np.ascontiguousarray(arr).tobytes()
        parts.append(raw)
        size += len(raw)
    pad = -size % WEIGHT_ALIGNMENT
    parts.append(b"\0" * pad)
    return b"".join(parts), offsets
