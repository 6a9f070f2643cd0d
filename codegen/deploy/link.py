"""One object of a deployed model: the kernels, the ABI glue, the thread pool and the weights
linked into one LLVM module, every symbol but the public API made internal (so two models
link into one program without clashes, and unused code such as the kernels' Python entries is
dropped), then emitted for the target."""
from __future__ import annotations

from typing import Iterable

import llvmlite.binding as llvm

from ...te.errors import CodegenError, InternalError
from ..target import Target, init_llvm


def parse(text: str, what: str, target: Target, data_layout: str) -> llvm.ModuleRef:
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as exc:
        raise InternalError(f"deploy: invalid LLVM IR for {what}: {exc}; this is a bug in "
                            "Kiln") from exc
    mod.triple, mod.data_layout = target.triple, data_layout
    return mod


def combine(parts: Iterable[tuple[str, str]], target: Target, public: set[str]
            ) -> llvm.ModuleRef:
    """Link (what, IR text) modules into one; only `public` symbols stay external."""
    init_llvm()
    layout = str(target.create_target_machine(for_object=True).target_data)
    main = None
    for what, text in parts:
        mod = parse(text, what, target, layout)
        if main is None:
            main = mod
            continue
        try:
            main.link_in(mod)
        except RuntimeError as exc:
            raise CodegenError(f"deploy: linking {what} into the model failed: {exc}") from exc
    if main is None:
        raise InternalError("deploy: nothing to link")
    for value in list(main.functions) + list(main.global_variables):
        if not value.is_declaration and value.name not in public:
            value.linkage = "internal"
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.add_strip_dead_prototype_pass()
    pb = llvm.create_pass_builder(target.create_target_machine(),
                                  llvm.create_pipeline_tuning_options(speed_level=2))
    pm.run(main, pb)
    main.verify()
    return main


def emit_object(mod: llvm.ModuleRef, target: Target) -> bytes:
    return target.create_target_machine(for_object=True).emit_object(mod)


def code_bytes(obj: bytes) -> int:
    """Bytes of code and data in an object file (its allocated sections)."""
    total = 0
    for section in llvm.ObjectFileRef.from_data(obj).sections():
        name = section.name() or b""
        name = name.decode(errors="replace") if isinstance(name, bytes) else name
        if section.is_text() or name.startswith((".rodata", ".data", "DATA", "CODE")):
            total += section.size()
    return total
