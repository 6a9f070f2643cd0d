"""kiln.jit: numpy-style Python traced into Kiln's graph IR and compiled into fused kernels.

    import kiln, kiln.numpy as knp

    @kiln.jit
    def selu(x, alpha=1.67, scale=1.05):
        return scale * knp.where(x > 0, x, alpha * (knp.exp(x) - 1))
"""
from .errors import (JitError, JitShapeError, TracerBoolError, TracerConversionError,
                     UnsupportedNumpyError)
from .function import JitFunction, JitRetraceWarning, Lowered, jit

__all__ = ["jit", "JitFunction", "JitRetraceWarning", "Lowered", "JitError", "JitShapeError",
           "TracerBoolError", "TracerConversionError", "UnsupportedNumpyError"]
