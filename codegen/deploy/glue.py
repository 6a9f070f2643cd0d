"""The ABI functions of a deployed model, as an LLVM module: `<prefix>_run` calls the kernels
in order on the caller's buffers, the weights and the (aligned) workspace, after checking its
arguments; the rest report sizes and errors and control the thread pool.

Every error is a return code (plan.ERRORS); nothing in here can crash on a null pointer or a
run after shutdown. The module has no state but a few flags: runs in progress, shut down,
the thread count, and (side-file weights) the caller's weights pointer.
"""
from __future__ import annotations

import llvmlite.ir as ir

from .. import llvm_types as T
from ..emit_module import pool_symbol, threads_symbol
from ..runtime import ENTRY, SHUTDOWN
from .plan import CODE, ERRORS, WEIGHT_ALIGNMENT, WORKSPACE_ALIGNMENT, DeployPlan, Ref

I1, I8, I32 = ir.IntType(1), ir.IntType(8), ir.IntType(32)
SEQ = "seq_cst"


class Glue:
    """Builds the module; `size` is the C size_t (i64, or i32 on wasm32)."""

    def __init__(self, plan: DeployPlan, prefix: str, triple: str, *, size_bits: int = 64,
                 pooled: frozenset = frozenset(), pool: bool = True,
                 weights_symbol: str | None = None):
        self.plan, self.prefix = plan, prefix
        self.size = ir.IntType(size_bits)
        self.module = ir.Module(name=f"{prefix}_abi")
        self.module.triple = triple
        self.pool = pool
        self.pooled = pooled
        self.external_weights = weights_symbol is None and bool(plan.weights)
        self.weights_symbol = weights_symbol

    # ------------------------------------------------------------------ helpers
    def _global(self, name, ty, init, linkage="internal", const=False):
        gv = ir.GlobalVariable(self.module, ty, name)
        gv.initializer = ir.Constant(ty, init) if not isinstance(init, ir.Constant) else init
        gv.linkage = linkage
        gv.global_constant = const
        return gv

    def _declare(self, name, ret, args):
        found = self.module.globals.get(name)
        return found if found is not None else ir.Function(
            self.module, ir.FunctionType(ret, args), name)

    def _extern_global(self, name, ty):
        found = self.module.globals.get(name)
        if found is None:
            found = ir.GlobalVariable(self.module, ty, name)
        return found

    def _function(self, name, ret, args):
        fn = ir.Function(self.module, ir.FunctionType(ret, args), f"{self.prefix}_{name}")
        fn.attributes.add("nounwind")
        return fn

    @staticmethod
    def _code(name):
        return ir.Constant(I32, CODE[name])

    def _string(self, text: str, name: str):
        data = bytearray(text.encode() + b"\0")
        ty = ir.ArrayType(I8, len(data))
        return self._global(name, ty, ir.Constant(ty, data), const=True)

    # ------------------------------------------------------------------ the module
    def build(self) -> ir.Module:
        self.running = self._global(f"{self.prefix}__running", I32, 0)
        self.down = self._global(f"{self.prefix}__down", I32, 0)
        self.ready = self._global(f"{self.prefix}__ready", I32, 0)
        self.threads = self._global(f"{self.prefix}__threads", I32, max(1, self.plan.threads))
        if self.external_weights:
            self.weights = self._global(f"{self.prefix}__weights_ptr", T.PTR, None)
        elif self.plan.weights:
            size = len(self.plan.weights)
            self.weights = self._extern_global(self.weights_symbol, ir.ArrayType(I8, size))
        else:
            self.weights = None
        self.setup = self._emit_setup()
        self._emit_simple()
        self.run = self._emit_run()
        self._emit_run_checked()
        self._emit_threads()
        self._emit_shutdown()
        self._emit_error_message()
        if self.external_weights:
            self._emit_set_weights()
        return self.module

    def _emit_simple(self):
        fn = self._function("abi_version", I32, [])
        from .plan import ABI_VERSION
        ir.IRBuilder(fn.append_basic_block()).ret(ir.Constant(I32, ABI_VERSION))
        fn = self._function("workspace_bytes", self.size, [])
        ir.IRBuilder(fn.append_basic_block()).ret(
            ir.Constant(self.size, self.plan.workspace_bytes()))

    def _emit_setup(self) -> ir.Function:
        """setup(): every kernel's thread count (one for the plan's serial kernels), and its
        pool pointer (the pool's entry)."""
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), []),
                         f"{self.prefix}__setup")
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block())
        n = b.load(self.threads, typ=I32)
        entry = self._declare(ENTRY, ir.VoidType(), [T.PTR, T.PTR, I32, I32]) if (
            self.pool and self.pooled) else None
        one = ir.Constant(I32, 1)
        for sym in sorted({c.symbol for c in self.plan.calls}):
            b.store(one if sym in self.plan.serial else n,
                    self._extern_global(threads_symbol(sym), I32))
            if sym in self.pooled:
                value = entry if entry is not None else ir.Constant(T.PTR, None)
                b.store(value, self._extern_global(pool_symbol(sym), T.PTR))
        b.store_atomic(ir.Constant(I32, 1), self.ready, SEQ, 4)
        b.ret_void()
        return fn

    def _load_ptr(self, b, array, k):
        return b.load(b.gep(array, [ir.Constant(I32, k)], source_etype=T.PTR), typ=T.PTR)

    def _fail(self, b, fn, cond, code_name, cleanup=None):
        """if cond: (cleanup) return code."""
        bad, good = fn.append_basic_block(f"fail_{code_name}"), fn.append_basic_block()
        b.cbranch(cond, bad, good)
        b.position_at_end(bad)
        if cleanup:
            cleanup(b)
        b.ret(self._code(code_name))
        b.position_at_end(good)

    def _emit_run(self) -> ir.Function:
        plan = self.plan
        fn = self._function("run", I32, [T.PTR, T.PTR, T.PTR])
        inputs, outputs, workspace = fn.args
        for a, n in zip(fn.args, ("inputs", "outputs", "workspace")):
            a.name = n
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        null = ir.Constant(T.PTR, None)
        b.atomic_rmw("add", self.running, ir.Constant(I32, 1), SEQ)

        def leave(bb):
            bb.atomic_rmw("sub", self.running, ir.Constant(I32, 1), SEQ)

        down = b.load_atomic(self.down, SEQ, 4, typ=I32)
        self._fail(b, fn, b.icmp_unsigned("!=", down, ir.Constant(I32, 0)), "shut_down", leave)
        any_null = b.or_(b.icmp_unsigned("==", inputs, null) if plan.inputs else
                         ir.Constant(I1, 0),
                         b.icmp_unsigned("==", outputs, null) if plan.outputs else
                         ir.Constant(I1, 0))
        self._fail(b, fn, any_null, "null", leave)
        ins = [self._load_ptr(b, inputs, k) for k in range(len(plan.inputs))]
        outs = [self._load_ptr(b, outputs, k) for k in range(len(plan.outputs))]
        bad = ir.Constant(I1, 0)
        for p, t in zip(ins + outs, plan.inputs + plan.outputs):
            if t.nbytes:
                bad = b.or_(bad, b.icmp_unsigned("==", p, null))
        if plan.arena_bytes:
            bad = b.or_(bad, b.icmp_unsigned("==", workspace, null))
        self._fail(b, fn, bad, "null", leave)
        if self.external_weights:
            wp = b.load(self.weights, typ=T.PTR)
            self._fail(b, fn, b.icmp_unsigned("==", wp, null), "no_weights", leave)
            weights = wp
        else:
            weights = self.weights
        self._overlap_checks(b, fn, ins, outs, leave)
        self._pinned_checks(b, fn, ins, leave)
        ready = b.load_atomic(self.ready, SEQ, 4, typ=I32)
        do_setup, go = fn.append_basic_block("setup"), fn.append_basic_block("go")
        b.cbranch(b.icmp_unsigned("==", ready, ir.Constant(I32, 0)), do_setup, go)
        b.position_at_end(do_setup)
        b.call(self.setup, [])
        b.branch(go)
        b.position_at_end(go)
        arena = workspace
        if plan.arena_bytes:     # round the workspace up to WORKSPACE_ALIGNMENT
            addr = b.ptrtoint(workspace, self.size)
            pad = b.and_(b.sub(ir.Constant(self.size, 0), addr),
                         ir.Constant(self.size, WORKSPACE_ALIGNMENT - 1))
            arena = b.gep(workspace, [pad], source_etype=I8)

        def where(ref: Ref):
            if ref.kind == "input":
                base = ins[ref.index]
            elif ref.kind == "output":
                base = outs[ref.index]
            elif ref.kind == "weight":
                base = weights
            else:
                base = arena
            if ref.offset == 0:
                return base
            return b.gep(base, [ir.Constant(self.size, ref.offset)], source_etype=I8)

        for call in plan.calls:
            args = [where(r) for r in call.args]
            kernel = self._declare(call.symbol, ir.VoidType(), [T.PTR] * len(args))
            b.call(kernel, args)
        self._index_checks(b, fn, where, leave)
        if plan.copies:
            memcpy = self._declare("memcpy", T.PTR, [T.PTR, T.PTR, self.size])
            for c in plan.copies:
                if c.nbytes:
                    b.call(memcpy, [outs[c.output], where(c.source),
                                    ir.Constant(self.size, c.nbytes)])
        leave(b)
        b.ret(self._code("ok"))
        return fn

    def _overlap_checks(self, b, fn, ins, outs, leave):
        """An output may share no byte with an input or another output (kernels take their
        arguments as noalias)."""
        plan = self.plan
        spans = [(b.ptrtoint(p, self.size), t.nbytes) for p, t in zip(ins, plan.inputs)]
        bad = ir.Constant(I1, 0)
        for j, (p, t) in enumerate(zip(outs, plan.outputs)):
            if not t.nbytes:
                continue
            start = b.ptrtoint(p, self.size)
            end = b.add(start, ir.Constant(self.size, t.nbytes))
            for other, n in spans:
                if n:
                    other_end = b.add(other, ir.Constant(self.size, n))
                    bad = b.or_(bad, b.and_(b.icmp_unsigned("<", start, other_end),
                                            b.icmp_unsigned("<", other, end)))
            spans.append((start, t.nbytes))
        self._fail(b, fn, bad, "overlap", leave)

    def _index_checks(self, b, fn, where, leave):
        """Run-time indices out of their data's bounds (as CompiledModel.run checks them): the
        kernels clamp, so nothing was read or written out of bounds, but the run fails."""
        i64 = ir.IntType(64)
        bad = ir.Constant(I1, 0)
        for check in self.plan.index_checks:
            for column, (low, high) in enumerate(check.bounds):
                at = Ref("arena", offset=check.offset + 16 * column)
                lowest = b.not_(b.load(where(at), typ=i64))
                highest = b.load(b.gep(where(at), [ir.Constant(self.size, 8)], source_etype=I8),
                                 typ=i64)
                bad = b.or_(bad, b.or_(b.icmp_signed("<", lowest, ir.Constant(i64, low)),
                                       b.icmp_signed(">", highest, ir.Constant(i64, high))))
        if self.plan.index_checks:
            self._fail(b, fn, bad, "index", leave)

    def _pinned_checks(self, b, fn, ins, leave):
        if not self.plan.pinned:
            return
        memcmp = self._declare("memcmp", I32, [T.PTR, T.PTR, self.size])
        for k, value in sorted(self.plan.pinned.items()):
            if not value:
                continue
            ref = self._string_bytes(value, f"{self.prefix}__pinned{k}")
            diff = b.call(memcmp, [ins[k], ref, ir.Constant(self.size, len(value))])
            self._fail(b, fn, b.icmp_signed("!=", diff, ir.Constant(I32, 0)), "pinned", leave)

    def _string_bytes(self, data: bytes, name: str):
        ty = ir.ArrayType(I8, len(data))
        return self._global(name, ty, ir.Constant(ty, bytearray(data)), const=True)

    def _emit_run_checked(self):
        """run_checked(inputs, input_bytes, outputs, output_bytes, workspace, workspace_bytes):
        run, after comparing the caller's byte sizes with the model's."""
        plan = self.plan
        fn = self._function("run_checked", I32, [T.PTR, T.PTR, T.PTR, T.PTR, T.PTR, self.size])
        inputs, in_bytes, outputs, out_bytes, workspace, ws_bytes = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        null = ir.Constant(T.PTR, None)
        down = b.load_atomic(self.down, SEQ, 4, typ=I32)
        self._fail(b, fn, b.icmp_unsigned("!=", down, ir.Constant(I32, 0)), "shut_down")
        bad = ir.Constant(I1, 0)
        if plan.inputs:
            bad = b.or_(bad, b.icmp_unsigned("==", in_bytes, null))
        if plan.outputs:
            bad = b.or_(bad, b.icmp_unsigned("==", out_bytes, null))
        self._fail(b, fn, bad, "null")
        for name, sizes, tensors in (("input_size", in_bytes, plan.inputs),
                                     ("output_size", out_bytes, plan.outputs)):
            bad = ir.Constant(I1, 0)
            for k, t in enumerate(tensors):
                got = b.load(b.gep(sizes, [ir.Constant(I32, k)], source_etype=self.size),
                             typ=self.size)
                bad = b.or_(bad, b.icmp_unsigned("!=", got, ir.Constant(self.size, t.nbytes)))
            self._fail(b, fn, bad, name)
        small = b.icmp_unsigned("<", ws_bytes, ir.Constant(self.size, plan.workspace_bytes()))
        self._fail(b, fn, small, "workspace_size")
        b.ret(b.call(self.run, [inputs, outputs, workspace]))

    def _emit_threads(self):
        fn = self._function("set_num_threads", I32, [I32])
        b = ir.IRBuilder(fn.append_basic_block())
        n = fn.args[0]
        down = b.load_atomic(self.down, SEQ, 4, typ=I32)
        self._fail(b, fn, b.icmp_unsigned("!=", down, ir.Constant(I32, 0)), "shut_down")
        self._fail(b, fn, b.icmp_signed("<", n, ir.Constant(I32, 1)), "threads")
        b.store(n, self.threads)
        b.call(self.setup, [])
        b.ret(self._code("ok"))
        fn = self._function("get_num_threads", I32, [])
        b = ir.IRBuilder(fn.append_basic_block())
        b.ret(b.load(self.threads, typ=I32))

    def _emit_shutdown(self):
        """shutdown(): no run may start after it; the pool's workers exit. BUSY (and nothing
        changes) while a run is in progress."""
        fn = self._function("shutdown", I32, [])
        b = ir.IRBuilder(fn.append_basic_block())
        one, zero = ir.Constant(I32, 1), ir.Constant(I32, 0)
        b.store_atomic(one, self.down, SEQ, 4)
        running = b.load_atomic(self.running, SEQ, 4, typ=I32)

        def undo(bb):
            bb.store_atomic(zero, self.down, SEQ, 4)

        self._fail(b, fn, b.icmp_signed(">", running, zero), "busy", undo)
        if self.pool and self.pooled:
            stop = self._declare(SHUTDOWN, I32, [])
            self._fail(b, fn, b.icmp_signed("!=", b.call(stop, []), zero), "busy", undo)
        b.ret(self._code("ok"))

    def _emit_error_message(self):
        fn = self._function("error_message", T.PTR, [I32])
        entry = fn.append_basic_block("entry")
        unknown = fn.append_basic_block("unknown")
        b = ir.IRBuilder(entry)
        sw = b.switch(fn.args[0], unknown)
        for k, (name, _, text) in enumerate(ERRORS):
            bb = fn.append_basic_block(name)
            sw.add_case(ir.Constant(I32, k), bb)
            msg = text.replace("<PREFIX>", self.prefix.upper()).replace(
                "shutdown()", f"{self.prefix}_shutdown()").replace(
                "workspace_bytes()", f"{self.prefix}_workspace_bytes()").replace(
                "set_weights()", f"{self.prefix}_set_weights()")
            ir.IRBuilder(bb).ret(self._string(msg, f"{self.prefix}__msg{k}"))
        ir.IRBuilder(unknown).ret(self._string("unknown error code", f"{self.prefix}__msgx"))

    def _emit_set_weights(self):
        fn = self._function("set_weights", I32, [T.PTR, self.size])
        blob, size = fn.args
        b = ir.IRBuilder(fn.append_basic_block())
        self._fail(b, fn, b.icmp_unsigned("==", blob, ir.Constant(T.PTR, None)), "null")
        misaligned = b.icmp_unsigned("!=", b.and_(b.ptrtoint(blob, self.size),
                                                  ir.Constant(self.size, WEIGHT_ALIGNMENT - 1)),
                                     ir.Constant(self.size, 0))
        wrong = b.icmp_unsigned("!=", size, ir.Constant(self.size, len(self.plan.weights)))
        self._fail(b, fn, b.or_(misaligned, wrong), "weights")
        b.store(blob, self.weights)
        b.ret(self._code("ok"))


def glue_module(plan: DeployPlan, prefix: str, triple: str, **options) -> ir.Module:
    return Glue(plan, prefix, triple, **options).build()
