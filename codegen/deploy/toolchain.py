"""The C toolchain a deploy export links with: the system `cc` (or $CC), else the `ziglang`
package's `zig cc`; `ar` likewise; `wasm-ld` from ziglang for wasm32."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

from ...te.errors import CodegenError


def _zig(tool: str) -> list[str] | None:
    if importlib.util.find_spec("ziglang") is None:
        return None
    return [sys.executable, "-m", "ziglang", tool]


def c_compiler() -> list[str]:
    """The command that compiles and links C: $CC, cc, gcc, clang, else `zig cc`."""
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return [shutil.which(name)]
    zig = _zig("cc")
    if zig:
        return zig
    raise CodegenError("no C compiler to link with: install one (apt-get install gcc), set "
                       "CC, or pip install ziglang")


def archiver() -> list[str]:
    found = shutil.which("ar")
    if found:
        return [found]
    zig = _zig("ar")
    if zig:
        return zig
    raise CodegenError("no archiver for the static library: install binutils (ar) or pip "
                       "install ziglang")


def zig_cc() -> list[str]:
    """`zig cc` from the ziglang package (it links wasm32 with its wasi-libc)."""
    zig = _zig("cc")
    if zig is None:
        raise CodegenError("the wasm32 export links with `zig cc`: pip install ziglang")
    return zig


def wasm_linker() -> list[str]:
    zig = _zig("wasm-ld")
    if zig:
        return zig
    found = shutil.which("wasm-ld")
    if found:
        return [found]
    raise CodegenError("linking wasm32 needs wasm-ld: pip install ziglang (or install lld)")


def run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CodegenError(f"{what} failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
