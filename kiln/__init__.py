"""Kiln: a tensor-expression compiler with a learned-cost-model autotuner for the CPU.

    from kiln import te
    s = kiln.create_schedule(C); f = kiln.build(s, [A, B, C]); f(a, b, c)
"""
from . import te
from .build import build
from .codegen import Target
from .compile import compile, load_compiled, tune  # noqa: A004 - kiln.compile is the API
from .deploy import export_c
from .deploy_wasm import export_wasm
from .jit import JitFunction, jit
from . import numpy  # noqa: E402 - kiln.numpy (knp): binds numpy's functions for traced values
from .schedule import create_schedule, lower
from .te.errors import (CodegenError, KernelArgumentError, KilnError, LoweringError,
                        ModelFormatError, ScheduleError, TargetError, TuningDatabaseError,
                        UnsupportedOperatorError)

__version__ = "0.1.0"

__all__ = ["te", "build", "compile", "tune", "load_compiled", "jit", "JitFunction", "numpy",
           "export_c", "export_wasm", "Target", "create_schedule", "lower", "KilnError",
           "ScheduleError",
           "LoweringError", "CodegenError", "KernelArgumentError", "TargetError",
           "UnsupportedOperatorError", "ModelFormatError", "TuningDatabaseError", "__version__"]
