"""What a measuring machine is: the fingerprint a `kiln worker` advertises, and whether it
may measure for a tuner's target.

A record is only worth its number on the CPU it was timed on, at the thread count it ran
with, compiled by the LLVM that built it. The tuner therefore sends a candidate only to a
worker whose CPU name and vector ISA are the target's and whose thread count, Kiln and LLVM
versions are its own; every record keeps the fingerprint of the worker that measured it.
"""
from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass

from ...codegen.target import Target
from ..database import kiln_version


def llvm_version() -> str:
    import llvmlite.binding as llvm
    return ".".join(str(p) for p in llvm.llvm_version_info)


def cpu_model() -> str:
    """The CPU's marketing name (/proc/cpuinfo on Linux, else platform.processor())."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


@dataclass(frozen=True)
class Fingerprint:
    """A worker's measuring identity (JSON-able; stored with each record it measured)."""

    name: str
    host: str
    cpu: str                    # LLVM's CPU name, e.g. "znver4"
    cpu_model: str              # e.g. "AMD EPYC 9454P 48-Core Processor"
    isa: tuple[str, ...]        # the key vector features (Target.vector_isa), sorted
    features: str               # LLVM's -mattr string of the host
    threads: int                # threads each measured kernel runs with
    kiln_version: str
    llvm_version: str

    @staticmethod
    def local(name: str, threads: int, advertise_isa: tuple[str, ...] | None = None
              ) -> "Fingerprint":
        """This machine's fingerprint; `advertise_isa` replaces the detected vector ISA
        (a worker told to pose as another machine: tests and dry runs)."""
        host = Target.native()
        isa = tuple(sorted(advertise_isa if advertise_isa is not None else host.vector_isa()))
        return Fingerprint(name=name, host=platform.node(), cpu=host.cpu,
                           cpu_model=cpu_model(), isa=isa, features=host.features,
                           threads=int(threads), kiln_version=kiln_version(),
                           llvm_version=llvm_version())

    def to_json(self) -> dict:
        return {**asdict(self), "isa": list(self.isa)}

    @staticmethod
    def from_json(obj: dict) -> "Fingerprint":
        return Fingerprint(**{**obj, "isa": tuple(obj["isa"])})

    def mismatch(self, target: str, threads: int) -> str | None:
        """Why this worker may not measure for `target` at `threads` (None: it may)."""
        want = Target.from_string(target)
        want_isa = tuple(sorted(want.vector_isa()))
        if self.cpu != want.cpu:
            return f"CPU {self.cpu}, the target's is {want.cpu}"
        if self.isa != want_isa:
            return f"vector ISA {','.join(self.isa)}, the target's is {','.join(want_isa)}"
        if self.threads != threads:
            return f"{self.threads} thread(s), the tuner measures at {threads}"
        if self.kiln_version != kiln_version():
            return f"Kiln {self.kiln_version}, the tuner's is {kiln_version()}"
        if self.llvm_version != llvm_version():
            return f"LLVM {self.llvm_version}, the tuner's is {llvm_version()}"
        return None


def host_name() -> str:
    """A default worker name: host and process id (unique on a machine)."""
    return f"{platform.node()}-{os.getpid()}"
