"""A slow, obviously-correct Python interpreter of loop IR, for debugging lowering.

It runs a PrimFunc on numpy arrays element by element (VECTORIZED/UNROLLED/PARALLEL loops
run serially), so a lowering bug can be told apart from a codegen bug on small shapes.
"""
from __future__ import annotations

import math

import numpy as np

from ..te import expr as E
from ..te.errors import LoweringError
from ..te.reference import (dot2_s16_reference, dot2_s16s8_reference, dot4_u8s8_reference,
                            dot4_u8s8perm_reference, dot4_u8s16_reference)
from .ir import Allocate, BufferLoad, Evaluate, For, IfThenElse, PrimFunc, SeqStmt, Store

_CALLS = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "rsqrt": lambda x: 1 / math.sqrt(x),
          "lookup8": lambda x, *table: table[int(x) & 255],
          "tanh": math.tanh, "erf": math.erf, "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
          "pow": math.pow, "abs": abs, "floor": math.floor, "ceil": math.ceil, "round": round,
          "sin": math.sin, "cos": math.cos, "log1p": math.log1p, "expm1": math.expm1,
          "dot4_u8s8": lambda a, b: int(dot4_u8s8_reference(a, b)),
          "dot4_u8s7": lambda a, b: int(dot4_u8s8_reference(a, b)),
          "dot4_u8s8sym": lambda a, b: int(dot4_u8s8_reference(a, b)),
          "dot4_u8s16": lambda a, b, c: int(dot4_u8s16_reference(a, b, c)),
          "dot2_s16": lambda a, b: int(dot2_s16_reference(a, b)),
          "dot2_s16s8": lambda a, b: int(dot2_s16s8_reference(a, b)),
          "dot4_u8s8perm": lambda *w: int(dot4_u8s8perm_reference(*w)),
          "tan": math.tan, "asin": math.asin, "acos": math.acos, "atan": math.atan,
          "sinh": math.sinh, "cosh": math.cosh, "asinh": math.asinh, "acosh": math.acosh,
          "atanh": math.atanh, "fmod": math.fmod, "bit_and": lambda a, b: a & b,
          "bit_or": lambda a, b: a | b, "bit_xor": lambda a, b: a ^ b,
          "bit_not": lambda a: ~a}


def interpret(func: PrimFunc, *arrays: np.ndarray) -> None:
    """Run `func` on `arrays` (in parameter order); outputs are written in place."""
    if len(arrays) != len(func.params):
        raise LoweringError(f"{func.name} takes {len(func.params)} arrays, got {len(arrays)}")
    mem = {b: a.reshape(-1) for b, a in zip(func.params, arrays)}
    _Interp(mem).run(func.body)


class _Interp:
    def __init__(self, mem):
        self.mem = mem
        self.env: dict = {}

    def run(self, s) -> None:
        t = type(s)
        if t is SeqStmt:
            for c in s.stmts:
                self.run(c)
        elif t is For:
            lo, ext = self.ev(s.min), self.ev(s.extent)
            for i in range(lo, lo + ext):
                self.env[s.loop_var] = i
                self.run(s.body)
        elif t is Store:
            self.mem[s.buffer][self.ev(s.index)] = self.ev(s.value)
        elif t is Allocate:
            self.mem[s.buffer] = np.full(s.buffer.size, np.nan if s.buffer.dtype.startswith(
                "float") else 0, dtype=s.buffer.dtype)
            self.run(s.body)
        elif t is IfThenElse:
            if self.ev(s.cond):
                self.run(s.then_case)
            elif s.else_case is not None:
                self.run(s.else_case)
        elif t is Evaluate:
            self.ev(s.value)
        else:
            raise LoweringError(f"interpreter: unknown statement {t.__name__}")

    def ev(self, e):
        t = type(e)
        if t in (E.IntImm, E.FloatImm):
            return e.value
        if t is E.Var:
            return self.env[e]
        if t is BufferLoad:
            return self.mem[e.buffer][self.ev(e.index)]
        if t is E.Add:
            return self.ev(e.a) + self.ev(e.b)
        if t is E.Sub:
            return self.ev(e.a) - self.ev(e.b)
        if t is E.Mul:
            return self.ev(e.a) * self.ev(e.b)
        if t is E.Div:
            return self.ev(e.a) / self.ev(e.b)
        if t is E.FloorDiv:
            return self.ev(e.a) // self.ev(e.b)
        if t is E.FloorMod:
            return self.ev(e.a) % self.ev(e.b)
        if t is E.Min:
            return min(self.ev(e.a), self.ev(e.b))
        if t is E.Max:
            return max(self.ev(e.a), self.ev(e.b))
        if t is E.LT:
            return self.ev(e.a) < self.ev(e.b)
        if t is E.LE:
            return self.ev(e.a) <= self.ev(e.b)
        if t is E.EQ:
            return self.ev(e.a) == self.ev(e.b)
        if t is E.NE:
            return self.ev(e.a) != self.ev(e.b)
        if t is E.And:
            return bool(self.ev(e.a)) and bool(self.ev(e.b))
        if t is E.Or:
            return bool(self.ev(e.a)) or bool(self.ev(e.b))
        if t is E.Not:
            return not self.ev(e.a)
        if t is E.Select:
            c, a, b = self.ev(e.cond), self.ev(e.t), self.ev(e.f)
            return a if c else b
        if t is E.Cast:
            return np.array(self.ev(e.value)).astype(e.dtype).item()
        if t is E.Call:
            if e.name == "reinterpret":
                return np.array(self.ev(e.args[0]), e.args[0].dtype).view(e.dtype).item()
            return _CALLS[e.name](*[self.ev(a) for a in e.args])
        raise LoweringError(f"interpreter: unknown expression {t.__name__}")
