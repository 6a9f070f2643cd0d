"""model.h: the C declarations of a deployed model (tables, sizes, functions, error codes).

Tables are `static const` in the header, so they cost the library nothing and a C program
can size its buffers at compile time (the `_BYTES` macros).
"""
from __future__ import annotations

from .plan import ABI_VERSION, DTYPE_CODE, DTYPES, ERRORS, DeployPlan, c_identifier


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _tensor_tables(out: list, p: str, kind: str, tensors) -> None:
    P = p.upper()
    out.append(f"#define {P}_NUM_{kind.upper()}S {len(tensors)}")
    for k, t in enumerate(tensors):
        out.append(f"#define {P}_{kind.upper()}{k}_BYTES {t.nbytes}u  /* {t.name}: {t.dtype}"
                   f"{list(t.shape)} */")
        out.append(f"#define {P}_{kind.upper()}_{c_identifier(t.name).upper()}_BYTES "
                   f"{t.nbytes}u")
    n = max(len(tensors), 1)     # C has no empty arrays
    names = ", ".join(_c_string(t.name) for t in tensors) or "0"
    dtypes = ", ".join(f"KILN_DTYPE_{t.dtype.upper()}" for t in tensors) or "0"
    ndims = ", ".join(str(len(t.shape)) for t in tensors) or "0"
    sizes = ", ".join(f"{t.nbytes}u" for t in tensors) or "0"
    flat, starts = [], []
    for t in tensors:
        starts.append(str(len(flat)))
        flat.extend(str(d) for d in t.shape)
    out.append(f"static const char* const {p}_{kind}_names[{n}] = {{{names}}};")
    out.append(f"static const int32_t {p}_{kind}_dtypes[{n}] = {{{dtypes}}};")
    out.append(f"static const int32_t {p}_{kind}_ndims[{n}] = {{{ndims}}};")
    out.append(f"static const size_t {p}_{kind}_bytes[{n}] = {{{sizes}}};")
    out.append(f"/* the shape of {kind} k: {p}_{kind}_dims + {p}_{kind}_dim_starts[k] */")
    out.append(f"static const int64_t {p}_{kind}_dims[{max(len(flat), 1)}] = "
               f"{{{', '.join(flat) or '0'}}};")
    out.append(f"static const int32_t {p}_{kind}_dim_starts[{n}] = "
               f"{{{', '.join(starts) or '0'}}};")


def header_text(plan: DeployPlan, prefix: str, *, weights_file: str | None = None,
                library: str = "") -> str:
    p, P = prefix, prefix.upper()
    out = [f"/* {p}.h: model '{plan.name}' compiled by Kiln{' into ' + library if library else ''}."
           " Generated; do not edit.",
           "",
           f"   {p}_run(inputs, outputs, workspace) runs the model once. inputs[k] and",
           "   outputs[k] point at C-contiguous tensors of the dtypes and shapes below (the",
           f"   {P}_INPUTk_BYTES / {P}_OUTPUTk_BYTES sizes); no output may overlap an input or",
           f"   another output. workspace points at {p}_workspace_bytes() bytes the caller owns",
           "   (any alignment; NULL when that is 0); one workspace per concurrent run.",
           f"   {p}_run_checked also takes the byte sizes and checks them. Both return",
           f"   KILN_OK (0) or an error code; {p}_error_message(code) says what it means.",
           f"   The thread pool starts on the first run that uses it; {p}_set_num_threads sets",
           f"   the threads a run may use (default {max(1, plan.threads)}); {p}_shutdown stops",
           "   the pool, and every later call returns KILN_ERROR_SHUT_DOWN.",
           "   Runs need only libc, libm and pthreads. */",
           f"#ifndef KILN_{P}_H", f"#define KILN_{P}_H", "",
           "#include <stddef.h>", "#include <stdint.h>", "",
           "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
           f"#define {P}_ABI_VERSION {ABI_VERSION}",
           f"#define {P}_WORKSPACE_BYTES {plan.workspace_bytes()}u",
           f"#define {P}_WEIGHTS_BYTES {len(plan.weights)}u",
           f"#define {P}_WEIGHTS_EMBEDDED {0 if weights_file else 1}", "",
           "#ifndef KILN_ABI_COMMON", "#define KILN_ABI_COMMON"]
    for k, (_, macro, text) in enumerate(ERRORS):
        out.append(f"#define KILN_{'OK' if k == 0 else 'ERROR_' + macro} {k}  /* {text.replace('<PREFIX>', 'PREFIX')} */")
    for name in DTYPES:
        out.append(f"#define KILN_DTYPE_{name.upper()} {DTYPE_CODE[name]}")
    out += ["#endif", ""]
    _tensor_tables(out, p, "input", plan.inputs)
    out.append("")
    _tensor_tables(out, p, "output", plan.outputs)
    out += ["",
            f"uint32_t {p}_abi_version(void);  /* {P}_ABI_VERSION of the library */",
            f"size_t {p}_workspace_bytes(void);",
            f"int32_t {p}_run(const void* const* inputs, void* const* outputs, void* workspace);",
            f"int32_t {p}_run_checked(const void* const* inputs, const size_t* input_bytes,",
            "                         void* const* outputs, const size_t* output_bytes,",
            "                         void* workspace, size_t workspace_bytes);",
            f"const char* {p}_error_message(int32_t code);",
            f"int32_t {p}_set_num_threads(int32_t threads);",
            f"int32_t {p}_get_num_threads(void);",
            f"int32_t {p}_shutdown(void);"]
    if weights_file:
        out += [f"/* The weights are in the side file {weights_file} ({len(plan.weights)} bytes):",
                f"   read them into a 64-byte-aligned buffer that outlives every run and pass it",
                "   here before the first run. */",
                f"int32_t {p}_set_weights(const void* blob, size_t bytes);"]
    out += ["", "#ifdef __cplusplus", "}", "#endif", f"#endif  /* KILN_{P}_H */", ""]
    return "\n".join(out)
