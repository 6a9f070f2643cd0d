"""Loop IR as indented pseudo-code: `for i.outer in parallel(0, 32):`. Tests compare against it."""
from __future__ import annotations

from ..te.expr import Var
from ..te.printer import expr_str
from ..te.visit import walk
from .ir import Allocate, Evaluate, For, ForKind, IfThenElse, PrimFunc, SeqStmt, Stmt, Store


class _Names:
    """Display names: the same hint used by two different Vars gets a numeric suffix."""

    def __init__(self):
        self.names: dict[Var, str] = {}
        self.taken: set[str] = set()

    def add(self, v: Var) -> str:
        if v not in self.names:
            name, n = v.name, 1
            while name in self.taken:
                name, n = f"{v.name}_{n}", n + 1
            self.taken.add(name)
            self.names[v] = name
        return self.names[v]

    def expr(self, e) -> str:
        for node in walk(e):
            if isinstance(node, Var):
                self.add(node)
        return expr_str(e, self.names)


def stmt_str(stmt: Stmt, names: _Names | None = None, indent: int = 0) -> str:
    names = names or _Names()
    lines: list[str] = []
    _emit(stmt, names, indent, lines)
    return "\n".join(lines)


def func_str(func: PrimFunc) -> str:
    names = _Names()
    params = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in func.params)
    return f"def {func.name}({params}):\n" + stmt_str(func.body, names, 1)


def _emit(s: Stmt, names: _Names, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    if isinstance(s, SeqStmt):
        for child in s.stmts:
            _emit(child, names, depth, out)
    elif isinstance(s, For):
        var = names.add(s.loop_var)
        lo, ext = names.expr(s.min), names.expr(s.extent)
        rng = f"{ext}" if lo == "0" else f"{lo}, {lo} + {ext}"
        kind = "range" if s.kind is ForKind.SERIAL else s.kind.value
        out.append(f"{pad}for {var} in {kind}({rng}):")
        _emit(s.body, names, depth + 1, out)
    elif isinstance(s, Store):
        out.append(f"{pad}{s.buffer.name}[{names.expr(s.index)}] = {names.expr(s.value)}")
    elif isinstance(s, Allocate):
        b = s.buffer
        out.append(f"{pad}allocate {b.name}: {b.dtype}{list(b.shape)} ({b.scope.value})")
        _emit(s.body, names, depth, out)
    elif isinstance(s, IfThenElse):
        out.append(f"{pad}if {names.expr(s.cond)}:")
        _emit(s.then_case, names, depth + 1, out)
        if s.else_case is not None:
            out.append(f"{pad}else:")
            _emit(s.else_case, names, depth + 1, out)
    elif isinstance(s, Evaluate):
        out.append(f"{pad}{names.expr(s.value)}")
    else:
        out.append(f"{pad}{s!r}")
