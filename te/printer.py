"""Readable text for expressions: `A[i, k] * B[k, j]`, `floordiv(i, 8)`."""
from __future__ import annotations

from . import expr as E

_INFIX = {E.Add: "+", E.Sub: "-", E.Mul: "*", E.Div: "/", E.LT: "<", E.LE: "<=",
          E.EQ: "==", E.NE: "!=", E.And: "&&", E.Or: "||"}
_PREC = {E.Or: 1, E.And: 2, E.LT: 3, E.LE: 3, E.EQ: 3, E.NE: 3, E.Add: 4, E.Sub: 4,
         E.Mul: 5, E.Div: 5}


def expr_str(e, names=None) -> str:
    """Print `e`; `names` maps Var -> display name (the loop printer de-duplicates names)."""
    return _Printer(names or {}).show(e, 0)


class _Printer:
    def __init__(self, names):
        self.names = names

    def show(self, e, parent_prec: int) -> str:
        t = type(e)
        if t in _INFIX:
            prec = _PREC[t]
            right_prec = prec + 1 if t in (E.Sub, E.Div) else prec
            text = f"{self.show(e.a, prec)} {_INFIX[t]} {self.show(e.b, right_prec)}"
            return f"({text})" if prec < parent_prec else text
        if t is E.IntImm:
            return ("true" if e.value else "false") if e.dtype == "bool" else str(e.value)
        if t is E.FloatImm:
            return f"{e.value!r}f" if e.dtype == "float32" else repr(e.value)
        if t is E.Var:
            return self.names.get(e, e.name)
        if t in (E.FloorDiv, E.FloorMod, E.Min, E.Max):
            fn = {E.FloorDiv: "floordiv", E.FloorMod: "floormod", E.Min: "min", E.Max: "max"}[t]
            return f"{fn}({self.show(e.a, 0)}, {self.show(e.b, 0)})"
        if t is E.Not:
            return f"!{self.show(e.a, 9)}"
        if t is E.Select:
            return f"select({self.show(e.cond, 0)}, {self.show(e.t, 0)}, {self.show(e.f, 0)})"
        if t is E.Cast:
            return f"{e.dtype}({self.show(e.value, 0)})"
        if t is E.Call:
            return f"{e.name}({', '.join(self.show(a, 0) for a in e.args)})"
        if t is E.Reduce:
            axes = ", ".join(a.var.name for a in e.axis)
            where = "" if e.condition is None else f", where={self.show(e.condition, 0)}"
            return f"{e.combiner.name}({self.show(e.source, 0)}, axis=[{axes}]{where})"
        if hasattr(e, "tensor"):
            return f"{e.tensor.name}[{', '.join(self.show(i, 0) for i in e.indices)}]"
        if hasattr(e, "buffer"):
            return f"{e.buffer.name}[{self.show(e.index, 0)}]"
        return repr(e)
