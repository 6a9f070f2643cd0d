"""Schedules over TE stages, bound inference and lowering to the loop IR."""
from .interpret import interpret
from .ir import (Allocate, Buffer, BufferLoad, Evaluate, For, ForKind, IfThenElse, PrimFunc,
                 Scope, SeqStmt, Stmt, Store, seq)
from .lower import lower
from .schedule import AttachKind, Schedule, Stage, Step, create_schedule
from .simplify import simplify

__all__ = [name for name in dir() if not name.startswith("_")]
