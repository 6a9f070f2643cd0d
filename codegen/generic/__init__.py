"""Shape-generic kernels: loop IR whose extents and strides are read at run time from a
small `dims` array, compiled once per machine and CPU and reused by every model.

Why: a per-model kernel costs 50-140 ms of compile CPU (LLVM's passes and code generation),
so a model's cold compile cannot start in the time onnxruntime takes to open a session.
These kernels are built once (a few seconds, stored in the generic library's own cache,
codegen/generic/library.py) and then only looked up: graph/generic runs a model on them at
once while its shape-specialised kernels are built in the background (tiered compilation).
"""
