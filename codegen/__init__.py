"""Code generation: loop IR -> LLVM IR -> machine code; Target, Kernel, export."""
from .build import build
from .export import LibraryError, export_library
from .library import load_library
from .kernel import Kernel
from .target import Target

__all__ = ["build", "Kernel", "Target", "export_library", "load_library", "LibraryError"]
