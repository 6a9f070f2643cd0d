"""Every loop IR -> loop IR pass, in the order they run: PIPELINE.

Two stages. LOWER ends `lower()`: the loop IR that tuning's features, the interpreter and
the printer see, the same for every CPU. CODEGEN runs when a kernel is emitted for a CPU
(codegen/emit_module.py calls it, then only translates): it needs the size of the target's
vector register file. KILN_DUMP_IR=1 (or a file path) prints the function after every pass
of both stages.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Callable

from ..ir import PrimFunc, Stmt
from .cleanup import DropTrivialGuards, simplify_stmt
from .promote import promote_register_tiles
from .tails import split_tails
from .uniform_select import GuardedLoad, branch_uniform_selects  # GuardedLoad: an IR node codegen emits
from .unit_loops import remove_unit_loops

log = logging.getLogger(__name__)

LOWER = "lower"
CODEGEN = "codegen"


@dataclass(frozen=True)
class PassOptions:
    """What the CODEGEN passes know of the CPU and of codegen: its vector register file's
    bytes (the largest accumulator tile promoted to registers), and whether a partial vector
    runs masked (else lane by lane: tails split off as narrower vectors, passes/tails.py)."""
    register_file_bytes: int | None = None
    masked_vector_tails: bool = False


@dataclass(frozen=True)
class Pass:
    name: str
    stage: str
    run: Callable[[Stmt, PassOptions], Stmt]


_DROP_TRIVIAL_GUARDS = DropTrivialGuards()

PIPELINE: tuple[Pass, ...] = (
    Pass("simplify", LOWER, lambda body, opts: simplify_stmt(body)),
    Pass("drop trivial guards", LOWER, lambda body, opts: _DROP_TRIVIAL_GUARDS(body)),
    # accumulator tiles in registers, sized to the register file
    Pass("promote register tiles", CODEGEN,
         lambda body, opts: promote_register_tiles(body, opts.register_file_bytes)),
    Pass("split tails", CODEGEN, lambda body, opts: split_tails(body, opts.masked_vector_tails)),
    Pass("remove unit loops", CODEGEN, lambda body, opts: remove_unit_loops(body)),
    Pass("branch uniform selects", CODEGEN, lambda body, opts: branch_uniform_selects(body)),
)


def run_passes(func: PrimFunc, stage: str, options: PassOptions = PassOptions(),
               dump: str | None = None, first: str | None = None) -> PrimFunc:
    """`func` after the passes of `stage` (LOWER or CODEGEN), in PIPELINE's order. With
    `dump` (default: KILN_DUMP_IR), print it after each: "1" or "-" to the log, else
    appended to that file; `first` names what made `func`, printed before the passes."""
    if stage not in (LOWER, CODEGEN):
        raise ValueError(f"run_passes: stage {stage!r} is not {LOWER!r} or {CODEGEN!r}")
    if stage == CODEGEN and options.register_file_bytes is None:
        raise ValueError("run_passes: the codegen passes need options.register_file_bytes")
    dump_path = dump or os.environ.get("KILN_DUMP_IR")
    texts = [f"--- after {first} ---\n{func}"] if dump_path and first else []
    body = func.body
    for p in PIPELINE:
        if p.stage != stage:
            continue
        body = p.run(body, options)
        if dump_path:
            texts.append(f"--- after {p.name} ---\n{PrimFunc(func.name, func.params, body)}")
    if dump_path:
        if dump_path in ("1", "-"):
            log.warning("\n".join(texts))
        else:
            with open(dump_path, "a") as fh:
                fh.write("\n".join(texts) + "\n")
    return PrimFunc(func.name, func.params, body)
