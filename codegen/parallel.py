"""PARALLEL loops: outline the body into `<kernel>__par<k>(closure*, begin, end)` and run it on
a thread pool.

The closure struct holds every buffer pointer and free variable the body uses plus the loop's
min; the body runs iterations [begin, end) of the loop. The pool is Kiln's own
(codegen/runtime.py, reached through the kernel's `<kernel>__parallel_for` pointer, which the
loader fills in; a null pointer runs the loop serially) or, with KILN_PARALLEL_RUNTIME=gomp,
libgomp, where each thread takes one contiguous chunk (static schedule). Without either the
loop runs serially.

Noalias: `par` unpacks the closure and calls `<kernel>__body<k>(b0, b1, ..., vars, begin,
end)`, internal and alwaysinline, whose buffer arguments are `noalias`; LLVM's inliner turns
them into alias.scope/noalias metadata, so the loop keeps what the kernel's own parameters
say (pointers loaded from the closure say nothing: each store to the output would reload
every input read before it, and sizes read from a `dims` buffer would stay in the loop).
Sound because a captured buffer is either a kernel parameter (noalias itself; emit_module
rejects one passed twice) or an Allocate's own alloca / aligned_alloc block; Kiln has no
buffer views or offsets into another buffer. Every route to the body (Kiln's pool, the
serial call when no pool is set, libgomp's wrapper) calls the same `par`. Other threads
touch other iterations' elements only (PARALLEL iterations are independent), which noalias
allows: it constrains memory this call both accesses and modifies.
"""
from __future__ import annotations

import logging

import llvmlite.ir as ir

from ..schedule.ir import BufferLoad, For, ForKind, Stmt, Store
from ..schedule.visitor import StmtVisitor
from ..te.errors import CodegenError
from ..te.visit import walk
from ..te import expr as E
from . import llvm_types as T
from .attributes import kernel_function_attributes
from .runtime import BODY_TYPE, ENTRY_TYPE, call_indirect

log = logging.getLogger(__name__)


class _Uses(StmtVisitor):
    """Every Var and Buffer a statement mentions, and whether it holds a PARALLEL loop."""

    def __init__(self):
        self.vars: dict = {}
        self.buffers: dict = {}
        self.nested_parallel: For | None = None

    def visit_expr(self, expr):
        for node in walk(expr):
            if isinstance(node, E.Var):
                self.vars.setdefault(node, None)
            elif isinstance(node, BufferLoad):
                self.buffers.setdefault(node.buffer, None)

    def visit_Store(self, node: Store):
        self.buffers.setdefault(node.buffer, None)
        self.generic_visit(node)

    def visit_For(self, node: For):
        if node.kind is ForKind.PARALLEL and self.nested_parallel is None:
            self.nested_parallel = node
        self.generic_visit(node)


def _uses(stmt: Stmt) -> _Uses:
    uses = _Uses()
    uses(stmt)
    return uses


def emit_parallel(fe, loop: For) -> None:
    """Emit PARALLEL `loop` from FunctionEmitter `fe`."""
    uses = _uses(loop.body)
    if fe.in_parallel or uses.nested_parallel is not None:
        inner = uses.nested_parallel.loop_var.name if uses.nested_parallel else loop.loop_var.name
        raise CodegenError(f"nested PARALLEL loop '{inner}' in kernel '{fe.mod.name}': a "
                           "parallel loop may not run inside another parallel loop; make the "
                           "inner loop serial (or fuse the two loops and parallelize the "
                           "fused one)")
    if fe.mod.parallel not in ("kiln", "gomp"):
        fe.serial(loop)
        return
    bld = fe.builder
    captured_vars = [v for v in uses.vars if v in fe.vars]
    captured_bufs = [b for b in uses.buffers if b in fe.buffers]
    fields = [T.PTR] * len(captured_bufs) + [fe.vars[v].type for v in captured_vars]
    closure_ty = ir.LiteralStructType(fields + [T.I32, T.I32])
    start = fe.expr(loop.min, index=True)
    extent = fe.expr(loop.extent, index=True)
    values = [fe.buffers[b] for b in captured_bufs] + [fe.vars[v] for v in captured_vars]
    closure = fe.alloca(closure_ty, align=8)
    for k, value in enumerate(values + [start, extent]):
        bld.store(value, _field(bld, closure, closure_ty, k))

    outlined = _outline(fe, loop, closure_ty, captured_bufs, captured_vars)
    wanted = bld.load(fe.mod.threads_global, typ=T.I32)
    if fe.mod.parallel == "kiln":
        _call_pool(fe, outlined, closure, extent, wanted)
    else:
        _call_gomp(fe, outlined, closure_ty, closure, extent, wanted)


def _call_pool(fe, outlined, closure, extent, wanted) -> None:
    """pool(body, closure, extent, threads), or body(closure, 0, extent) when no pool is set."""
    bld = fe.builder
    pool = bld.load(fe.mod.pool_global, typ=T.PTR)
    with bld.if_else(bld.icmp_unsigned("==", pool, ir.Constant(T.PTR, None))) as (serial, pooled):
        with serial:
            bld.call(outlined, [closure, ir.Constant(T.I32, 0), extent])
        with pooled:
            call_indirect(bld, pool, ENTRY_TYPE, [outlined, closure, extent, wanted])


def _call_gomp(fe, outlined, closure_ty, closure, extent, wanted) -> None:
    """GOMP_parallel over a wrapper that gives each thread one contiguous chunk."""
    bld = fe.builder
    mod = fe.mod
    threads = bld.select(bld.icmp_signed("<", extent, wanted), extent, wanted)
    threads = bld.select(bld.icmp_signed("<", threads, ir.Constant(T.I32, 1)),
                         ir.Constant(T.I32, 1), threads)
    wrapper = ir.Function(mod.module, ir.FunctionType(T.VOID, [T.PTR]), mod.fresh_name("gomp"))
    wrapper.linkage = "internal"
    wb = ir.IRBuilder(wrapper.append_basic_block("entry"))
    arg = wrapper.args[0]      # the closure's last field is the loop's extent
    count = wb.load(_field(wb, arg, closure_ty, len(closure_ty.elements) - 1), typ=T.I32)
    tid = wb.call(mod.declare("omp_get_thread_num", T.I32, []), [])
    nthreads = wb.call(mod.declare("omp_get_num_threads", T.I32, []), [])
    one = ir.Constant(T.I32, 1)
    chunk = wb.sdiv(wb.sub(wb.add(count, nthreads), one), nthreads)
    begin = wb.mul(tid, chunk, flags=("nsw",))
    end = wb.add(begin, chunk, flags=("nsw",))
    end = wb.select(wb.icmp_signed("<", count, end), count, end)
    begin = wb.select(wb.icmp_signed("<", count, begin), count, begin)
    wb.call(outlined, [arg, begin, end])
    wb.ret_void()
    gomp = mod.declare("GOMP_parallel", T.VOID, [T.PTR, T.PTR, T.I32, T.I32])
    bld.call(gomp, [wrapper, closure, threads, ir.Constant(T.I32, 0)])


def _field(bld: ir.IRBuilder, ptr: ir.Value, ty: ir.Type, k: int) -> ir.Value:
    return bld.gep(ptr, [ir.Constant(T.I32, 0), ir.Constant(T.I32, k)], source_etype=ty)


def _outline(fe, loop: For, closure_ty, bufs, vars_) -> ir.Function:
    """The loop body as `par(closure*, begin, end)`: iterations [begin, end) of the loop;
    `par` unpacks the closure and calls the loop function (see the module docstring)."""
    mod = fe.mod
    fn = ir.Function(mod.module, BODY_TYPE, mod.fresh_name("par"))
    fn.linkage = "internal"
    kernel_function_attributes(fn)
    bld, arg = ir.IRBuilder(fn.append_basic_block("entry")), fn.args[0]
    pointers = [bld.load(_field(bld, arg, closure_ty, k), typ=T.PTR) for k in range(len(bufs))]
    values = [bld.load(_field(bld, arg, closure_ty, k), typ=fe.vars[v].type)
              for k, v in enumerate(vars_, start=len(bufs))]
    start = bld.load(_field(bld, arg, closure_ty, len(bufs) + len(vars_)), typ=T.I32)
    begin = bld.add(fn.args[1], start, flags=("nsw",))
    end = bld.add(fn.args[2], start, flags=("nsw",))
    body = _loop_function(fe, loop, bufs, vars_, _distinct(fe, bufs))
    bld.call(body, [*pointers, *values, begin, end])
    bld.ret_void()
    return fn


def _distinct(fe, bufs) -> list[bool]:
    """Which captured buffers may be `noalias` in the loop: a kernel parameter (noalias
    itself; emit_module rejects a buffer passed twice) or an Allocate's own stack slot or
    aligned_alloc block, each a fresh object, so distinct Buffers are distinct memory.
    Checked rather than assumed: a pointer that is none of those, or that two captured
    Buffers share, stays without."""
    def own(ptr) -> bool:
        if isinstance(ptr, ir.Argument):
            return ptr in fe.fn.args and "noalias" in ptr.attributes
        if isinstance(ptr, ir.CallInstr):
            return getattr(ptr.callee, "name", None) == "aligned_alloc"
        return isinstance(ptr, ir.AllocaInstr)
    ptrs = [fe.buffers[b] for b in bufs]
    return [own(p) and sum(q is p for q in ptrs) == 1 for p in ptrs]


def _loop_function(fe, loop: For, bufs, vars_, noalias) -> ir.Function:
    """`body(b0, b1, ..., vars..., begin, end)`: the loop over [begin, end), internal and
    alwaysinline (inlined into `par`, then dropped)."""
    mod = fe.mod
    ty = ir.FunctionType(T.VOID, [T.PTR] * len(bufs) + [fe.vars[v].type for v in vars_]
                         + [T.I32, T.I32])
    fn = ir.Function(mod.module, ty, mod.fresh_name("body"))
    fn.linkage = "internal"
    kernel_function_attributes(fn)
    fn.attributes.add("alwaysinline")
    args = list(fn.args)
    for a, distinct in zip(args, noalias):
        if distinct:
            a.add_attribute("noalias")
    sub = type(fe)(mod, fn, dict(zip(bufs, args)), nonneg=fe.nonneg, in_parallel=True)
    for a, v in zip(args[len(bufs):], vars_):
        sub.vars[v] = a
    begin, end = args[-2:]
    sub.loop(begin, end, lambda i: sub._bind(loop.loop_var, i, loop.body, loop.min))
    sub.finish()
    return fn
