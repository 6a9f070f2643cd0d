"""The compilation target: CPU name, feature string, triple and vector width.

`Target.from_string("native" | "llvm" | "llvm -mcpu=znver4 -mattr=+avx2")`; `str(target)`
round-trips and is the key the tuning database stores targets under.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cache

import llvmlite.binding as llvm

from ..te import dtype as dt
from ..te.errors import TargetError

# x86-64 CPU names LLVM knows, with the widest vector ISA each one implies by default.
_AVX512_CPUS = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client",
                "icelake-server", "tigerlake", "sapphirerapids", "graniterapids", "rocketlake",
                "emeraldrapids", "knl", "knm", "znver4", "znver5")
_AVX2_CPUS = ("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
              "arrowlake", "lunarlake", "gracemont", "znver1", "znver2", "znver3",
              "x86-64-v3", "bdver4")
_AVX_CPUS = ("sandybridge", "ivybridge", "btver2", "bdver1", "bdver2", "bdver3")
_SSE_CPUS = ("x86-64", "x86-64-v2", "nehalem", "westmere", "core2", "penryn", "goldmont",
             "tremont", "silvermont", "btver1")
KNOWN_CPUS: tuple[str, ...] = tuple(sorted(
    _AVX512_CPUS + _AVX2_CPUS + _AVX_CPUS + _SSE_CPUS + ("x86-64-v4",)))

# Vector features that are always spelled out (also when disabled) so that a CPU whose
# defaults include them cannot re-enable what the host lacks.
_KEY_FEATURES = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl")

_FORMS = ('"native", "llvm", "llvm -mcpu=<cpu>", "llvm -mcpu=<cpu> -mattr=+f1,-f2", '
          'optionally with -mtriple=<triple>')


# LLVM code-generation options, set once per process. Machine code generation is a third of
# a cold model compile; on a ResNet-50 conv, Loop Strength Reduction took 37% of it and the
# post-RA list scheduler 15% (the machine scheduler before register allocation stays). The
# post-RA scheduler is off: codegen 0.28 -> 0.22 s on that conv, kernels bit-identical and
# as fast (benchmarks/kernel_ab.py). LSR stays on: without it codegen halved, but the 1024^3
# GEMMs ran 2% and a conv 4% slower in the same A/B runs.
CODEGEN_OPTIONS = ("-post-RA-scheduler=false",)


@cache
def init_llvm() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    for option in CODEGEN_OPTIONS:
        llvm.set_option("kiln", option)


@cache
def _host() -> tuple[str, str]:
    """The host CPU's LLVM name and canonical feature string. Asked by every kernel compile
    (codegen/jit.py checks the target runs here): LLVM's detection costs 0.5 ms a time
    (benchmarks/RESULTS.md, per-kernel compile CPU), and the CPU does not change under a
    running process (a forked worker inherits the answer)."""
    init_llvm()
    cpu = llvm.get_host_cpu_name()
    feats = _parse_features(llvm.get_host_cpu_features().flatten())
    return cpu, _canonical_features(feats)


def _cpu_default_isa(cpu: str) -> set[str]:
    if cpu in _AVX512_CPUS or cpu == "x86-64-v4":
        return {"avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"}
    if cpu in _AVX2_CPUS:
        return {"avx", "avx2", "fma"}
    if cpu in _AVX_CPUS:
        return {"avx"}
    return set()


def _parse_features(text: str) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        if item[0] not in "+-" or len(item) < 2:
            raise TargetError(f"bad feature {item!r} in -mattr={text!r}: write +name or -name, "
                              "e.g. -mattr=+avx2,-avx512f")
        out[item[1:]] = item[0] == "+"
    return out


@cache
def _feature_set(cpu: str, features: str) -> frozenset[str]:
    """Target.feature_set's value (asked hundreds of times per kernel emitted, from one or
    two distinct targets: parsed once each)."""
    enabled = _cpu_default_isa(cpu)
    for name, on in _parse_features(features).items():
        if on:
            enabled.add(name)
        else:
            enabled.discard(name)
    return frozenset(enabled)


def _canonical_features(enabled: dict[str, bool]) -> str:
    """Sorted, with enabled features and disabled key vector features only."""
    items = [f"+{k}" for k, on in enabled.items() if on]
    items += [f"-{k}" for k, on in enabled.items() if not on and k in _KEY_FEATURES]
    return ",".join(sorted(items, key=lambda s: (s[1:], s[0])))


@dataclass(frozen=True)
class Target:
    """What codegen compiles for. `features` is an LLVM feature string (may be empty: the
    CPU's defaults). `num_cores` is informational and not part of equality or str()."""

    cpu: str
    features: str = ""
    triple: str = ""
    num_cores: int = field(default_factory=lambda: os.cpu_count() or 1, compare=False)

    def __post_init__(self):
        if not self.triple:
            init_llvm()
            object.__setattr__(self, "triple", _process_triple())

    # ------------------------------------------------------------------ construction
    @staticmethod
    def native() -> Target:
        """The host CPU, detected through LLVM (once per process: see _host)."""
        return _native_target()

    @staticmethod
    def from_string(text: str | Target) -> Target:
        """Parse a target string; raises TargetError listing the accepted forms."""
        if isinstance(text, Target):
            return text
        if not isinstance(text, str):
            raise TargetError(f"target must be a string or Target, got {type(text).__name__}; "
                              f"accepted forms: {_FORMS}")
        words = text.split()
        if words == ["native"]:
            return Target.native()
        if not words or words[0] != "llvm":
            raise TargetError(f"unknown target {text!r}; accepted forms: {_FORMS}")
        cpu, features, triple = "x86-64", "", ""
        for word in words[1:]:
            key, _, value = word.partition("=")
            if key == "-mcpu" and value:
                cpu = "native" if value == "native" else value
            elif key == "-mattr":
                features = _canonical_features(_parse_features(value))
            elif key == "-mtriple" and value:
                triple = value
            else:
                raise TargetError(f"unknown option {word!r} in target {text!r}; "
                                  f"accepted forms: {_FORMS}")
        if cpu == "native":
            host = Target.native()
            return Target(host.cpu, features or host.features, triple)
        if cpu not in KNOWN_CPUS:
            raise TargetError(f"unknown target {text!r}: CPU {cpu!r} is not known; known CPUs: "
                              f"{', '.join(KNOWN_CPUS)}")
        return Target(cpu=cpu, features=features, triple=triple)

    # ------------------------------------------------------------------ properties
    def feature_set(self) -> set[str]:
        """Features in effect: the CPU's default vector ISA plus/minus explicit features."""
        return set(_feature_set(self.cpu, self.features))

    def has_feature(self, name: str) -> bool:
        return name in self.feature_set()

    @property
    def vector_bits(self) -> int:
        feats = self.feature_set()
        if "avx512f" in feats:
            return 512
        if "avx2" in feats:
            return 256
        return 128

    def vector_lanes(self, dtype: str) -> int:
        """How many elements of `dtype` fill one native vector register."""
        width = 8 if dtype == "bool" else dt.bits(dt.canonical(dtype))
        return max(1, self.vector_bits // width)

    def vector_isa(self) -> frozenset[str]:
        """The key vector features in effect (AVX, AVX2, FMA, AVX-512 F/BW/DQ/VL): two
        targets with the same set get the same vector widths, register budget and search
        space, so a schedule tuned on one is a legal, sensible schedule on the other."""
        return frozenset(self.feature_set() & set(_KEY_FEATURES))

    def can_run_on_host(self) -> bool:
        """True when code for this target runs on this machine (its vector ISA is a subset)."""
        host = Target.native().feature_set()
        return all(f in host for f in self.feature_set() if f in _KEY_FEATURES)

    def create_target_machine(self, *, for_object: bool = False, opt: int = 3):
        """An LLVM TargetMachine (code generation at `opt`, default 3; 0 selects FastISel and
        the fast register allocator); PIC relocation when emitting a shared object."""
        init_llvm()
        try:
            llvm_target = llvm.Target.from_triple(self.triple)
        except RuntimeError as exc:
            raise TargetError(f"LLVM cannot target triple {self.triple!r} of {self}: {exc}. "
                              "Use the host triple (omit -mtriple).") from exc
        reloc = "pic" if for_object else "default"
        return llvm_target.create_target_machine(cpu=self.cpu, features=self.features, opt=opt,
                                                 reloc=reloc, codemodel="jitdefault"
                                                 if not for_object else "default", jit=False)

    def __str__(self) -> str:
        parts = ["llvm", f"-mcpu={self.cpu}"]
        if self.features:
            parts.append(f"-mattr={self.features}")
        init_llvm()
        if self.triple != _process_triple():
            parts.append(f"-mtriple={self.triple}")
        return " ".join(parts)


@cache
def _process_triple() -> str:
    """This process's triple (asked on every str(target): a cache key names the target)."""
    init_llvm()
    return llvm.get_process_triple()


@cache
def _native_target() -> Target:
    cpu, features = _host()
    return Target(cpu=cpu, features=features)
