"""Deploy without Python: a compiled model as a C library with a header (native.py), or as
WebAssembly with a JavaScript loader (wasm.py). Works from a DeployPlan (plan.py), the plain
data the graph layer makes of a CompiledModel (kiln/deploy.py)."""
from .native import CLibrary, export_c_library, part_sizes
from .plan import ABI_VERSION, ERRORS, Call, Copy, DeployPlan, Ref, Tensor

__all__ = ["ABI_VERSION", "ERRORS", "CLibrary", "Call", "Copy", "DeployPlan", "Ref", "Tensor",
           "export_c_library", "part_sizes"]
