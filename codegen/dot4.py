"""The integer dot-product intrinsics of te.expr (dot4_u8s8, dot4_u8s7, dot4_u8s8sym, dot4_u8s16,
dot2_s16)
as LLVM IR.

Each int32 lane holds 4 packed bytes; the result lane is sum_t uint8(a_t) * int8(b_t). The
lowering is chosen from the Target's features, never assumed:

- AVX512-VNNI (`avx512vnni`; 256-bit lanes need `avx512vl` too) or AVX-VNNI (`avxvnni`,
  256-bit): one `vpdpbusd` per native vector, exact for both intrinsics.
- AVX2 (256-bit), SSSE3 (128-bit), AVX512-BW (512-bit without VNNI): `vpmaddubsw` multiplies
  u8 x s8 and adds adjacent pairs into int16 with signed saturation, then `vpmaddwd` against
  ones adds the pairs into int32. A pair sum reaches 2 * 255 * 128 = 65280, past int16, so
  dot4_u8s8 splits the activation bytes a = (a & 0x7f) + (a & 0x80): the low part's pair
  sums stay within +-32512 and the high part's (0 or 128 times a weight) within [-32768,
  32512], both int16, and the two int32 results are added: exact, at 2 vpmaddubsw + 2
  vpmaddwd (a broadcast activation's masks are shared by every vector it meets).
  dot4_u8s7 promises weight bytes in [-64, 63] (pair sums within +-32640), so it takes 1
  vpmaddubsw + 1 vpmaddwd.
  dot4_u8s8sym promises weight bytes in [-127, 127]. With a' = a - 128 (a signed byte, an
  xor) the product is a * b = |a'| * (sign(a') * b) + 128 * b: |a'| <= 128 is unsigned,
  sign(a') * b (vpsignb) stays within [-127, 127] since b != -128, so the pair sums stay
  within +-32512, and 128 * (b_0 + b_1) within +-32512 too: exact, at 2 vpmaddubsw + 2
  vpmaddwd like the split, but the second pair reads only the weight word, so a register
  tile computes it once per weight vector instead of once per (row, weight vector) (and
  the |a'| of a broadcast activation once per row).
- dot4_u8s16 takes its weights widened to int16 pairs (b_even = (b_0, b_2), b_odd = (b_1,
  b_3), packed at compile time: te/ops/int8/core.py widen_weight_words). Viewed as int16
  lanes, the activation word splits into its even bytes (and 0x00ff) and odd bytes (a 16-bit
  logical shift right by 8), both zero-extended int16, and two `vpmaddwd` (SSE2, AVX2,
  AVX-512BW) multiply them with the pairs and add adjacent products into int32 exactly
  (|a b| <= 255 * 32768, a pair sum fits): 2 multiplies + 1 add per 8 lanes, no saturation
  to work around, and the split of a word is shared by every weight vector it meets (LLVM's
  GVN merges the identical and/shift of a broadcast row or of a vector column). Chosen by
  the graph where the target lacks VNNI (graph/passes/int8/widen.py).
- dot2_s16 takes both operands as int16 pairs (the activations widened ahead of the GEMM,
  graph/passes/int8/pairs.py): one `vpmaddwd` per native vector, nothing else, so a GEMM's
  inner loop is a broadcast, the weight loads, and a vpmaddwd + add per accumulator.
- dot2_s16s8 takes its weight pairs as int16 words of two int8 (half the weight bytes):
  one `vpmovsxbw` widens a weight vector (shared by every row of the register tile), then
  one `vpmaddwd` per native vector as in dot2_s16.
- dot4_u8s8perm picks its 4 activation bytes out of a group of 4 words by a selector word
  (te/expr.py). When the 4 words are lane-invariant (a GEMM row's broadcast group: the
  emitter passes them unsplatted, MIXED_LANE_INTRINSICS) the group is one 16-byte vector
  repeated per 128-bit lane and one `vpshufb` by the selector bytes picks
  every lane's bytes; a lane-invariant selector (one per column panel) makes one vpshufb serve
  every weight vector. Then `vpdpbusd` (VNNI), or `vpmaddubsw` + `vpmaddwd` against ones
  (AVX2): exact, because the intrinsic promises pair-safe weight pairs (graph/passes/
  int8_perm.py chooses the selectors so that they are). Lane-varying words, or no vpshufb of
  the width: the bytes are picked with shifts and selects in plain IR (exact, slow).
- Anything else (other lane counts, other CPUs): widen the bytes to int32 and add the four
  products in plain LLVM IR (exact; LLVM vectorizes it as it can).
A vector wider than the native width is split into native chunks and joined again; an odd
one (7 lanes: a 49-pixel axis) computes as the next whole native count.
"""
from __future__ import annotations

import llvmlite.ir as ir

from . import llvm_types as T

I8, I16 = ir.IntType(8), ir.IntType(16)
# intrinsics whose lowering takes lane-invariant arguments as scalars (not splatted)
MIXED_LANE_INTRINSICS = frozenset({"dot4_u8s8perm"})
# intrinsics whose VNNI lowering takes an accumulator: `acc + dot` emits as one vpdpbusd
# (codegen/emit_expr.py _emit_Add)
ACCUMULATING_INTRINSICS = frozenset({"dot4_u8s8", "dot4_u8s7", "dot4_u8s8sym",
                                     "dot4_u8s8perm"})


# CPUs whose defaults include the VNNI extensions (target strings such as
# "llvm -mcpu=znver4" spell no features; "-mattr=-avx512vnni" still turns it off).
_AVX512_VNNI_CPUS = frozenset({"cascadelake", "cooperlake", "icelake-client", "icelake-server",
                               "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids",
                               "graniterapids", "znver4", "znver5"})
_AVX_VNNI_CPUS = frozenset({"alderlake", "raptorlake", "meteorlake", "arrowlake", "lunarlake",
                            "sapphirerapids", "emeraldrapids", "graniterapids", "znver5"})


def target_features(target) -> set[str]:
    """The target's features in effect, with the VNNI extensions its CPU implies."""
    if target is None:
        return set()
    feats = set(target.feature_set())
    explicit = {f[1:]: f[0] == "+" for f in target.features.split(",") if f}
    for name, cpus in (("avx512vnni", _AVX512_VNNI_CPUS), ("avxvnni", _AVX_VNNI_CPUS)):
        if target.cpu in cpus and explicit.get(name, True):
            feats.add(name)
    return feats


def dot4_strategies(feats: set[str]) -> list[tuple[int, str]]:
    """(int32 lanes per instruction, "vnni" | "madd") in order of preference."""
    out = []
    if "avx512vnni" in feats and "avx512f" in feats:
        out.append((16, "vnni"))
    if "avxvnni" in feats or ("avx512vnni" in feats and "avx512vl" in feats):
        out.append((8, "vnni"))
    if "avx512bw" in feats:
        out.append((16, "madd"))
    if "avx2" in feats:
        out.append((8, "madd"))
    if "ssse3" in feats or "avx" in feats:
        out.append((4, "madd"))
    return out


def _declare(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


def _vnni(bld: ir.IRBuilder, a: ir.Value, b: ir.Value, acc: ir.Value | None = None
          ) -> ir.Value:
    """vpdpbusd of `a`, `b` added to `acc` (zero without one). The instruction's own add
    wraps like the int32 add it replaces; LLVM does not fold add(vpdpbusd(0, a, b), acc)
    into vpdpbusd(acc, a, b), and the separate zeroing + vpaddd per step took the 1024^3
    GEMM's inner loop from 1 to 3 vector ops per 64 multiply-adds."""
    lanes = a.type.count
    ty = ir.VectorType(T.I32, lanes)
    fn = _declare(bld.module, f"llvm.x86.avx512.vpdpbusd.{lanes * 32}", ty, [ty, ty, ty])
    return bld.call(fn, [ir.Constant(ty, [0] * lanes) if acc is None else acc, a, b])


_MADD = {  # int32 lanes -> (pmaddubsw, pmaddwd) intrinsic names
    4: ("llvm.x86.ssse3.pmadd.ub.sw.128", "llvm.x86.sse2.pmadd.wd"),
    8: ("llvm.x86.avx2.pmadd.ub.sw", "llvm.x86.avx2.pmadd.wd"),
    16: ("llvm.x86.avx512.pmaddubs.w.512", "llvm.x86.avx512.pmaddw.d.512"),
}


def _madd_intrinsics(bld: ir.IRBuilder, lanes: int):
    """(byte vector type, vpmaddubsw, vpmaddwd, a word vector of ones) for `lanes` int32
    lanes: the pieces both byte-word lowerings are made of."""
    bytes_ty, words_ty = ir.VectorType(I8, 4 * lanes), ir.VectorType(I16, 2 * lanes)
    ubsw_name, wd_name = _MADD[lanes]
    ubsw = _declare(bld.module, ubsw_name, words_ty, [bytes_ty, bytes_ty])
    wd = _declare(bld.module, wd_name, ir.VectorType(T.I32, lanes), [words_ty, words_ty])
    return bytes_ty, ubsw, wd, ir.Constant(words_ty, [1] * (2 * lanes))


def _maddubs(bld: ir.IRBuilder, a: ir.Value, b: ir.Value, seven_bit: bool) -> ir.Value:
    lanes = a.type.count
    bytes_ty, ubsw, wd, ones = _madd_intrinsics(bld, lanes)
    a8, b8 = bld.bitcast(a, bytes_ty), bld.bitcast(b, bytes_ty)
    if seven_bit:
        return bld.call(wd, [bld.call(ubsw, [a8, b8]), ones])
    low = bld.and_(a8, ir.Constant(bytes_ty, [0x7F] * (4 * lanes)))
    high = bld.and_(a8, ir.Constant(bytes_ty, [0x80] * (4 * lanes)))   # 0 or 128
    sum_low = bld.call(wd, [bld.call(ubsw, [low, b8]), ones])
    sum_high = bld.call(wd, [bld.call(ubsw, [high, b8]), ones])
    return bld.add(sum_low, sum_high)


_PSIGN = {4: "llvm.x86.ssse3.psign.b.128", 8: "llvm.x86.avx2.psign.b"}


def _maddubs_sym(bld: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """The sign-trick lowering of dot4_u8s8sym (module docstring)."""
    lanes = a.type.count
    bytes_ty, ubsw, wd, ones = _madd_intrinsics(bld, lanes)
    a8, b8 = bld.bitcast(a, bytes_ty), bld.bitcast(b, bytes_ty)
    centred = bld.xor(a8, ir.Constant(bytes_ty, [0x80] * (4 * lanes)))     # a - 128, signed
    magnitude = bld.call(_declare(bld.module, f"llvm.abs.v{4 * lanes}i8", bytes_ty,
                                  [bytes_ty, ir.IntType(1)]),
                         [centred, ir.Constant(ir.IntType(1), 0)])        # -128 -> 0x80 = 128
    if lanes in _PSIGN:
        signed = bld.call(_declare(bld.module, _PSIGN[lanes], bytes_ty, [bytes_ty, bytes_ty]),
                          [b8, centred])
    else:   # (a' = 0 meets |a'| = 0, so b need not be zeroed there)
        negative = bld.icmp_signed("<", centred, ir.Constant(bytes_ty, [0] * (4 * lanes)))
        signed = bld.select(negative, bld.neg(b8), b8)
    main = bld.call(wd, [bld.call(ubsw, [magnitude, signed]), ones])
    weight_sums = bld.call(wd, [bld.call(ubsw, [ir.Constant(bytes_ty, [0x80] * (4 * lanes)),
                                                b8]), ones])          # 128 * sum_t b_t
    return bld.add(main, weight_sums)


_PMADDWD = {4: "llvm.x86.sse2.pmadd.wd", 8: "llvm.x86.avx2.pmadd.wd",
            16: "llvm.x86.avx512.pmaddw.d.512"}


def pmaddwd_lanes(feats: set[str]) -> list[int]:
    """int32 lanes of the target's vpmaddwd forms, widest first."""
    out = []
    if "avx512bw" in feats:
        out.append(16)
    if "avx2" in feats:
        out.append(8)
    if "sse2" in feats or "avx" in feats:
        out.append(4)
    return out


def _madd_pairs(bld: ir.IRBuilder, a: ir.Value, b_even: ir.Value, b_odd: ir.Value) -> ir.Value:
    """dot4_u8s16 on one native vector: two vpmaddwd (module docstring)."""
    lanes = a.type.count
    words_ty, dwords_ty = ir.VectorType(I16, 2 * lanes), ir.VectorType(T.I32, lanes)
    wd = _declare(bld.module, _PMADDWD[lanes], dwords_ty, [words_ty, words_ty])
    a16 = bld.bitcast(a, words_ty)
    even = bld.and_(a16, ir.Constant(words_ty, [0xFF] * (2 * lanes)))
    odd = bld.lshr(a16, ir.Constant(words_ty, [8] * (2 * lanes)))
    return bld.add(bld.call(wd, [even, bld.bitcast(b_even, words_ty)]),
                   bld.call(wd, [odd, bld.bitcast(b_odd, words_ty)]))


def _generic_pairs(bld: ir.IRBuilder, a: ir.Value, b_even: ir.Value, b_odd: ir.Value
                   ) -> ir.Value:
    lanes = a.type.count
    bytes_ty, halves_ty = ir.VectorType(I8, 4 * lanes), ir.VectorType(I16, 2 * lanes)
    wide_ty = ir.VectorType(T.I32, 2 * lanes)
    a_wide = bld.zext(bld.bitcast(a, bytes_ty), ir.VectorType(T.I32, 4 * lanes))
    total = None
    for parity, b in ((0, b_even), (1, b_odd)):
        b_wide = bld.sext(bld.bitcast(b, halves_ty), wide_ty)
        a_part = bld.shuffle_vector(a_wide, ir.Constant(a_wide.type, None), ir.Constant(
            ir.VectorType(T.I32, 2 * lanes), [2 * h + parity for h in range(2 * lanes)]))
        prods = bld.mul(a_part, b_wide)
        for h in range(2):
            part = bld.shuffle_vector(prods, ir.Constant(wide_ty, None), ir.Constant(
                ir.VectorType(T.I32, lanes), [2 * lane + h for lane in range(lanes)]))
            total = part if total is None else bld.add(total, part)
    return total


def _madd(bld: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """dot2_s16 on one native vector: one vpmaddwd."""
    lanes = a.type.count
    words_ty, dwords_ty = ir.VectorType(I16, 2 * lanes), ir.VectorType(T.I32, lanes)
    wd = _declare(bld.module, _PMADDWD[lanes], dwords_ty, [words_ty, words_ty])
    return bld.call(wd, [bld.bitcast(a, words_ty), bld.bitcast(b, words_ty)])


def _widen_bytes(bld: ir.IRBuilder, b: ir.Value) -> ir.Value:
    """int16 lanes of two int8 -> int32 lanes of the two sign-extended to int16 (vpmovsxbw)."""
    lanes = b.type.count
    return bld.bitcast(bld.sext(bld.bitcast(b, ir.VectorType(I8, 2 * lanes)),
                                ir.VectorType(I16, 2 * lanes)), ir.VectorType(T.I32, lanes))


def _generic_dot2(bld: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    lanes = a.type.count
    halves_ty, wide_ty = ir.VectorType(I16, 2 * lanes), ir.VectorType(T.I32, 2 * lanes)
    prods = bld.mul(bld.sext(bld.bitcast(a, halves_ty), wide_ty),
                    bld.sext(bld.bitcast(b, halves_ty), wide_ty))
    parts = [bld.shuffle_vector(prods, ir.Constant(wide_ty, None), ir.Constant(
        ir.VectorType(T.I32, lanes), [2 * lane + h for lane in range(lanes)]))
        for h in range(2)]
    return bld.add(parts[0], parts[1])


def _generic(bld: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    lanes = a.type.count
    bytes_ty = ir.VectorType(I8, 4 * lanes)
    wide_ty = ir.VectorType(T.I32, 4 * lanes)
    prods = bld.mul(bld.zext(bld.bitcast(a, bytes_ty), wide_ty),
                    bld.sext(bld.bitcast(b, bytes_ty), wide_ty))
    total = None
    for t in range(4):
        part = bld.shuffle_vector(prods, ir.Constant(wide_ty, None),
                                  ir.Constant(ir.VectorType(T.I32, lanes),
                                              [4 * lane + t for lane in range(lanes)]))
        total = part if total is None else bld.add(total, part)
    return total


def _chunks(bld: ir.IRBuilder, v: ir.Value, size: int) -> list[ir.Value]:
    lanes = v.type.count
    if lanes == size:
        return [v]
    undef = ir.Constant(v.type, None)
    return [bld.shuffle_vector(v, undef, ir.Constant(ir.VectorType(T.I32, size),
                                                     list(range(k, k + size))))
            for k in range(0, lanes, size)]


def _join(bld: ir.IRBuilder, parts: list[ir.Value]) -> ir.Value:
    """Concatenate equal-width chunks (an odd count is padded with an undef chunk, whose
    lanes are dropped at the end)."""
    lanes = sum(p.type.count for p in parts)
    while len(parts) > 1:
        if len(parts) % 2:
            parts = parts + [ir.Constant(parts[-1].type, None)]
        joined = []
        for x, y in zip(parts[::2], parts[1::2]):
            n = x.type.count + y.type.count
            joined.append(bld.shuffle_vector(x, y, ir.Constant(ir.VectorType(T.I32, n),
                                                               list(range(n)))))
        parts = joined
    out = parts[0]
    if out.type.count != lanes:
        out = bld.shuffle_vector(out, ir.Constant(out.type, None), ir.Constant(
            ir.VectorType(T.I32, lanes), list(range(lanes))))
    return out


def _native_sizes(em, name: str) -> list[int]:
    """int32 lanes of the native vectors `name` lowers to on the module's target."""
    feats = target_features(getattr(em.mod, "target", None))
    if name in ("dot4_u8s16", "dot2_s16", "dot2_s16s8"):
        return pmaddwd_lanes(feats)
    return [size for size, _ in dot4_strategies(feats)]


def emit_dot4(em, name: str, a: ir.Value, b: ir.Value, *more: ir.Value,
              acc: ir.Value | None = None) -> ir.Value:
    """dot4_u8s8 / dot4_u8s7 / dot4_u8s8sym / dot2_s16 of int32 scalars or vectors `a`, `b`
    (same type); dot4_u8s16 of `a` and the int16 pairs `b` (even bytes' weights), `more[0]`
    (odd). With `acc` (of a's type): acc + the dot, which a VNNI lowering folds into its
    vpdpbusd (ACCUMULATING_INTRINSICS)."""
    bld = em.builder
    if name == "dot4_u8s8perm":
        return emit_dot4_perm(em, a, b, *more, acc=acc)
    scalar = not T.is_vector(a)
    if scalar:
        a, b, *more = [bld.insert_element(ir.Constant(ir.VectorType(v.type, 1), None), v,
                                          ir.Constant(T.I32, 0)) for v in (a, b, *more)]
        if acc is not None:
            acc = bld.insert_element(ir.Constant(ir.VectorType(acc.type, 1), None), acc,
                                     ir.Constant(T.I32, 0))
    if name == "dot2_s16s8":        # the int8 weight pairs widened, then as dot2_s16
        b, name = _widen_bytes(bld, b), "dot2_s16"
    lanes = a.type.count
    native = _native_sizes(em, name)
    if native and lanes > native[-1] and all(lanes % size for size in native):
        # an odd vector (7 or 14 lanes: a pixel axis of 49 or 196) computes as the next
        # whole count of the narrowest native vector, the extra lanes undefined and dropped
        wide = -(-lanes // native[-1]) * native[-1]
        grow = ir.Constant(ir.VectorType(T.I32, wide),
                           list(range(lanes)) + [0] * (wide - lanes))
        args = [bld.shuffle_vector(v, ir.Constant(v.type, None), grow) for v in (a, b, *more)]
        out = emit_dot4(em, name, *args, acc=None if acc is None else bld.shuffle_vector(
            acc, ir.Constant(acc.type, None), grow))
        out = bld.shuffle_vector(out, ir.Constant(out.type, None), ir.Constant(
            ir.VectorType(T.I32, lanes), list(range(lanes))))
        return bld.extract_element(out, ir.Constant(T.I32, 0)) if scalar else out
    if name in ("dot4_u8s16", "dot2_s16"):
        sizes = [size for size in pmaddwd_lanes(target_features(
            getattr(em.mod, "target", None))) if lanes % size == 0]
        if name == "dot2_s16":
            out = _generic_dot2(bld, a, b) if not sizes else _join(bld, [
                _madd(bld, x, y) for x, y in zip(_chunks(bld, a, sizes[0]),
                                                 _chunks(bld, b, sizes[0]))])
        elif not sizes:
            out = _generic_pairs(bld, a, b, more[0])
        else:
            out = _join(bld, [_madd_pairs(bld, x, y, z) for x, y, z in zip(
                _chunks(bld, a, sizes[0]), _chunks(bld, b, sizes[0]),
                _chunks(bld, more[0], sizes[0]))])
        out = out if acc is None else bld.add(acc, out)
        return bld.extract_element(out, ir.Constant(T.I32, 0)) if scalar else out
    fits = [(size, how) for size, how in dot4_strategies(target_features(
        getattr(em.mod, "target", None))) if lanes % size == 0]
    if not fits:
        out = _generic(bld, a, b)
    else:
        size, strategy = fits[0]
        parts = []
        accs = (_chunks(bld, acc, size) if acc is not None and strategy == "vnni"
                else None)
        for c, (x, y) in enumerate(zip(_chunks(bld, a, size), _chunks(bld, b, size))):
            if strategy == "vnni":
                parts.append(_vnni(bld, x, y, None if accs is None else accs[c]))
            elif name == "dot4_u8s8sym":
                parts.append(_maddubs_sym(bld, x, y))
            else:
                parts.append(_maddubs(bld, x, y, name == "dot4_u8s7"))
        out = _join(bld, parts)
        if accs is not None:
            acc = None
    out = out if acc is None else bld.add(acc, out)
    return bld.extract_element(out, ir.Constant(T.I32, 0)) if scalar else out


_PSHUFB = {4: "llvm.x86.ssse3.pshuf.b.128", 8: "llvm.x86.avx2.pshuf.b",
           16: "llvm.x86.avx512.pshuf.b.512"}
_PSHUFB_FEATURE = {4: ("ssse3", "avx"), 8: ("avx2",), 16: ("avx512bw",)}


def _lanes(v: ir.Value) -> int:
    return v.type.count if T.is_vector(v) else 0


def _splat_to(bld: ir.IRBuilder, v: ir.Value, lanes: int) -> ir.Value:
    return v if not lanes or T.is_vector(v) else T.splat(bld, v, lanes)


def _perm_generic(bld: ir.IRBuilder, words: list[ir.Value], sel: ir.Value, b: ir.Value
                  ) -> ir.Value:
    """dot4_u8s8perm in plain integer IR (scalars or vectors of one type): per t, the byte
    (sel_t & 15) of the group by selects and shifts, times the sign-extended b_t."""
    ty = sel.type

    def c(v):
        return T.const_like(ty, v)

    total = c(0)
    for t in range(4):
        sel_t = bld.and_(bld.lshr(sel, c(8 * t)), c(0xFF))
        idx = bld.and_(sel_t, c(15))
        which = bld.lshr(idx, c(2))
        word = words[3]
        for k in (2, 1, 0):
            word = bld.select(bld.icmp_unsigned("==", which, c(k)), words[k], word)
        byte = bld.and_(bld.lshr(word, bld.mul(bld.and_(idx, c(3)), c(8))), c(0xFF))
        byte = bld.select(bld.icmp_unsigned(">=", sel_t, c(128)), c(0), byte)
        weight = bld.ashr(bld.shl(b, c(24 - 8 * t)), c(24))
        total = bld.add(total, bld.mul(byte, weight))
    return total


def emit_dot4_perm(em, a0: ir.Value, a1: ir.Value, a2: ir.Value, a3: ir.Value,
                   sel: ir.Value, b: ir.Value, acc: ir.Value | None = None) -> ir.Value:
    """dot4_u8s8perm on arguments that may mix scalars (lane-invariant) and vectors (module
    docstring), plus `acc` when given (folded into vpdpbusd on VNNI)."""
    bld = em.builder
    words = [a0, a1, a2, a3]
    lanes = max(_lanes(v) for v in (*words, sel, b, *([] if acc is None else [acc])))
    feats = target_features(getattr(em.mod, "target", None))
    fits = [(size, how) for size, how in dot4_strategies(feats)
            if lanes and lanes % size == 0 and size in _PSHUFB
            and any(f in feats for f in _PSHUFB_FEATURE[size])]
    if not fits or any(T.is_vector(w) for w in words):
        out = _perm_generic(bld, [_splat_to(bld, v, lanes) for v in words],
                            _splat_to(bld, sel, lanes), _splat_to(bld, b, lanes))
        return out if acc is None else bld.add(_splat_to(bld, acc, lanes), out)
    size, how = fits[0]
    bytes_ty = ir.VectorType(I8, 4 * size)
    group = ir.Constant(ir.VectorType(T.I32, 4), None)
    for k, w in enumerate(words):
        group = bld.insert_element(group, w, ir.Constant(T.I32, k))
    group = bld.bitcast(group, ir.VectorType(I8, 16))
    if size > 4:           # the 16 bytes in every 128-bit lane (vpshufb picks within one)
        group = bld.shuffle_vector(group, ir.Constant(group.type, None), ir.Constant(
            ir.VectorType(T.I32, 4 * size), [k % 16 for k in range(4 * size)]))
    pshufb = _declare(bld.module, _PSHUFB[size], bytes_ty, [bytes_ty, bytes_ty])

    def picked(sel_chunk):       # bits 4-6 of a selector byte are ignored, bit 7 gives 0
        return bld.call(pshufb, [group, bld.bitcast(sel_chunk, bytes_ty)])

    shared = None if T.is_vector(sel) else picked(T.splat(bld, sel, size))
    sel_chunks = _chunks(bld, sel, size) if T.is_vector(sel) else None
    parts = []
    accs = (_chunks(bld, _splat_to(bld, acc, lanes), size)
            if acc is not None and how == "vnni" else None)
    for k, b_chunk in enumerate(_chunks(bld, _splat_to(bld, b, lanes), size)):
        a_bytes = shared if shared is not None else picked(sel_chunks[k])
        if how == "vnni":
            parts.append(_vnni(bld, bld.bitcast(a_bytes, ir.VectorType(T.I32, size)), b_chunk,
                               None if accs is None else accs[k]))
        else:
            _, ubsw, wd, ones = _madd_intrinsics(bld, size)
            parts.append(bld.call(wd, [bld.call(ubsw, [a_bytes, bld.bitcast(b_chunk, bytes_ty)]),
                                       ones]))
    out = _join(bld, parts)
    return out if acc is None or accs is not None else bld.add(_splat_to(bld, acc, lanes), out)
