"""The C library export (kiln compile --c-api): a C program (harness.c) that includes the
generated header runs each model in a process with no Python mapped, at 1 and 2 threads, and
matches onnxruntime and the Python CompiledModel; misuse of the API returns error codes."""
from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kiln.autotune.space import thread_plan
from kiln.codegen.deploy import ERRORS
from kiln.codegen.deploy.toolchain import c_compiler
from kiln.deploy import export_c
from kiln.graph.compile.model import compile_model

from .c_models import CASES, model_case, ort_run

HARNESS = Path(__file__).resolve().parent / "harness.c"
CONCURRENT = Path(__file__).resolve().parent / "concurrent.c"
CODE = {macro: k for k, (_, macro, _) in enumerate(ERRORS)}


def build_harness(lib, out: Path, static: bool = False, source: Path = HARNESS) -> Path:
    """Compile harness.c (or `source`) against `lib` (a deploy.CLibrary): shared, or the
    static archive."""
    d = lib.header.parent
    cmd = [*c_compiler(), "-O2", "-Wall", "-Werror", f"-DKILN_PREFIX={lib.prefix}",
           f"-DKILN_PREFIX_UPPER={lib.prefix.upper()}", f'-DKILN_HEADER="{lib.header.name}"',
           f"-I{d}", str(source), "-o", str(out), "-lpthread"]
    if static:
        cmd += [str(lib.static), "-lm", "-lpthread"]
    else:
        cmd += [f"-L{d}", f"-l{lib.prefix}", f"-Wl,-rpath,{d}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def run_harness(exe: Path, workdir: Path, threads: int, mode: str = "run",
                weights: Path | None = None) -> str:
    cmd = [str(exe), str(workdir), str(threads), mode] + ([str(weights)] if weights else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin"})      # no PYTHON* variables
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (CLibrary, CompiledModel, harness path), built on first use."""
    built = {}

    def get(name: str, weights: str = "embed"):
        key = (name, weights)
        if key not in built:
            model, shapes, feeds = model_case(name)
            pinned = {"shape": feeds["shape"]} if name == "pinned" else None
            # every parallel loop kept: these models are so small that the thread decision
            # (autotune/space/thread_plan.py) runs all their kernels on one thread, and the
            # harness checks that 2 threads start a worker and that shutdown stops it (not
            # cached: the model cache's key does not know the switch)
            with thread_plan.disabled():
                compiled = compile_model(model, db=None, input_shapes=shapes, jobs=1,
                                         threads=2, constants=pinned, cache_model=False)
            # ... and no kernel set to one thread by the measured choice either (the C
            # library honours it: test_the_thread_choice_reaches_the_c_library)
            meta = {k: v for k, v in compiled.plan.meta.items() if k != "thread_choice"}
            compiled.plan = dataclasses.replace(compiled.plan, meta=meta)
            compiled.set_num_threads(2)
            d = tmp_path_factory.mktemp(f"{name}_{weights}")
            lib = export_c(compiled, d / f"lib{name}.so", weights=weights)
            built[key] = (lib, compiled, build_harness(lib, d / "harness"))
        return built[key]
    return get


def _write_inputs(d: Path, feeds: dict, names) -> None:
    for k, name in enumerate(names):
        np.ascontiguousarray(feeds[name]).tofile(d / f"in{k}.bin")


def _read_outputs(d: Path, compiled) -> list[np.ndarray]:
    specs = {b.name: b for b in compiled.plan.buffers}
    return [np.fromfile(d / f"out{k}.bin", dtype=specs[n].dtype).reshape(specs[n].shape)
            for k, n in enumerate(compiled.plan.outputs)]


def _check_no_python(d: Path, lib) -> None:
    maps = (d / "maps.txt").read_text()
    assert lib.shared.name in maps or lib.static is not None, maps   # the check can see libs
    assert "python" not in maps.lower(), [ln for ln in maps.splitlines() if "python" in ln]


@pytest.mark.parametrize("name", CASES)
def test_c_harness_matches_onnxruntime_without_python(name, exported, tmp_path):
    model, _, feeds = model_case(name)
    lib, compiled, exe = exported(name)
    _write_inputs(tmp_path, feeds, compiled.plan.inputs)
    want = ort_run(model, feeds)
    kiln_out = compiled.run(feeds)
    for threads in (1, 2):
        out = run_harness(exe, tmp_path, threads)
        _check_no_python(tmp_path, lib)
        lines = dict(line.split(" ", 1) for line in out.split("\n") if " " in line)
        assert int(lines["threads"]) >= (2 if threads == 2 else 1)
        assert lines["threads_after_shutdown"] == "1", out
        got = _read_outputs(tmp_path, compiled)
        for g, k, w in zip(got, kiln_out, want):
            np.testing.assert_array_equal(g, k)        # the same kernels as in Python
            if name == "int8":
                # one requantisation step of the int8 output at most (onnxruntime rounds
                # its float32 requantize the same way; dequantised outputs differ by a step)
                assert np.abs(g - w).max() <= 0.06 * max(1.0, float(np.abs(w).max()))
            else:
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)


def test_errors_are_codes_not_crashes(exported, tmp_path):
    model, _, feeds = model_case("cnn")
    lib, compiled, exe = exported("cnn")
    _write_inputs(tmp_path, feeds, compiled.plan.inputs)
    out = run_harness(exe, tmp_path, 2, "errors")
    codes = {}
    for line in out.strip().split("\n"):
        case, code, message = line.split(" ", 2)
        codes[case] = int(code)
        assert message and message != "unknown error code" or case == "unknown_code"
    assert codes == {
        "null_inputs": CODE["NULL_ARGUMENT"], "null_outputs": CODE["NULL_ARGUMENT"],
        "null_entry": CODE["NULL_ARGUMENT"], "null_workspace": CODE["NULL_ARGUMENT"],
        "input_size": CODE["INPUT_SIZE"], "output_size": CODE["OUTPUT_SIZE"],
        "workspace_size": CODE["WORKSPACE_SIZE"], "null_sizes": CODE["NULL_ARGUMENT"],
        "overlap": CODE["OVERLAP"], "threads_zero": CODE["THREAD_COUNT"], "good_run": 0,
        "shutdown": 0, "run_after_shutdown": CODE["SHUT_DOWN"],
        "checked_after_shutdown": CODE["SHUT_DOWN"],
        "threads_after_shutdown": CODE["SHUT_DOWN"], "unknown_code": 12345}


def test_two_threads_run_at_once_with_their_own_workspaces(exported, tmp_path):
    """Runs from two application threads at once (the pool takes one job at a time; the
    other caller's parallel loops run serially) give the same bytes as a lone run."""
    _, _, feeds = model_case("transformer")
    lib, compiled, _ = exported("transformer")
    exe = build_harness(lib, tmp_path / "concurrent", source=CONCURRENT)
    _write_inputs(tmp_path, feeds, compiled.plan.inputs)
    proc = subprocess.run([str(exe), str(tmp_path), "2", "40"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_pinned_input_value_is_checked_and_view_outputs_are_copied(exported, tmp_path):
    """A model compiled for the value of a shape-deciding input takes that input and checks
    it; an output that is a view of an input (Reshape) is copied into the caller's buffer."""
    model, _, feeds = model_case("pinned")
    lib, compiled, exe = exported("pinned")
    _write_inputs(tmp_path, feeds, compiled.plan.inputs)
    run_harness(exe, tmp_path, 1)
    y, z = _read_outputs(tmp_path, compiled)
    want_y, want_z = ort_run(model, feeds)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(z, want_z)
    _write_inputs(tmp_path, {**feeds, "shape": np.array([8, 3], np.int64)},
                  compiled.plan.inputs)
    proc = subprocess.run([str(exe), str(tmp_path), "1", "run"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"run {CODE['PINNED_VALUE']} an input that decides a shape")


def test_static_archive_and_weights_side_file(exported, tmp_path):
    """The .a links into a program on its own (no .so at run time), and weights in a side
    file run the same once given to <prefix>_set_weights."""
    model, _, feeds = model_case("cnn")
    lib, compiled, _ = exported("cnn", weights="file")
    assert lib.weights_file is not None and lib.weights_file.stat().st_size > 0
    assert "int32_t cnn_set_weights(const void* blob, size_t bytes);" in lib.header.read_text()
    exe = build_harness(lib, tmp_path / "harness_static", static=True)
    _write_inputs(tmp_path, feeds, compiled.plan.inputs)
    run_harness(exe, tmp_path, 2, weights=lib.weights_file)
    assert "libcnn.so" not in (tmp_path / "maps.txt").read_text()
    got = _read_outputs(tmp_path, compiled)
    np.testing.assert_array_equal(got[0], compiled.run(feeds)[0])
    proc = subprocess.run([str(exe), str(tmp_path), "1", "run"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0 and "side file" in proc.stderr


def test_header_tables(exported):
    lib, compiled, _ = exported("dynamic")
    text = lib.header.read_text()
    assert "#define DYNAMIC_ABI_VERSION 1" in text
    assert "#define DYNAMIC_NUM_INPUTS 2" in text
    assert 'static const char* const dynamic_input_names[2] = {"ids", "mask"};' in text
    assert "#define DYNAMIC_INPUT0_BYTES 56u" in text            # int64 [1, 7]
    assert "static const int64_t dynamic_input_dims[4] = {1, 7, 1, 7};" in text
    # the arena, then the index checks' (~min, max) pairs, + 63 to align the caller's pointer
    arena = compiled.plan.arena_bytes
    for check in compiled.plan.meta.get("index_checks", ()):
        arena = -(-arena // 64) * 64 + 16 * len(check["bounds"])
    assert f"#define DYNAMIC_WORKSPACE_BYTES {arena + 63}u" in text


def test_bad_prefix_and_weights_mode_are_named(exported, tmp_path):
    from kiln.te.errors import CodegenError
    _, compiled, _ = exported("cnn")
    with pytest.raises(CodegenError, match="not a C identifier"):
        export_c(compiled, tmp_path / "libx.so", prefix="2bad")
    with pytest.raises(CodegenError, match="weights='mmap'"):
        export_c(compiled, tmp_path / "libx.so", weights="mmap")


def test_only_the_api_is_exported(exported):
    lib, _, _ = exported("transformer")
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib.shared)], capture_output=True,
                         text=True, check=True).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    api = {n for n in names if n.startswith("transformer_")}
    assert api == {f"transformer_{n}" for n in ("abi_version", "workspace_bytes", "run",
                                               "run_checked", "error_message",
                                               "set_num_threads", "get_num_threads",
                                               "shutdown")}
    assert not {n for n in names - api if not n.startswith("_")}, names - api
    needed = subprocess.run(["readelf", "-d", str(lib.shared)], capture_output=True,
                            text=True).stdout
    libs = {part.split("[")[1].split("]")[0] for part in needed.splitlines() if "NEEDED" in part}
    assert libs <= {"libc.so.6", "libm.so.6", "libpthread.so.0"}, libs


def test_cli_compile_c_api(tmp_path):
    from kiln.cli import main
    from kiln.graph.models import default_model_path
    out = tmp_path / "libcli.so"
    assert main(["compile", str(default_model_path()), "-o", str(out), "--c-api",
                 "--threads", "1", "--weights", "file"]) == 0
    for name in ("libcli.so", "libcli.a", "cli.h", "cli.weights"):
        assert (tmp_path / name).stat().st_size > 0, name


def test_cli_input_shape_is_checked():
    from kiln.deploy_cli import parse_input_shapes
    from kiln.te.errors import KilnError
    assert parse_input_shapes(["ids=1,7", "mask=1,7"]) == {"ids": (1, 7), "mask": (1, 7)}
    with pytest.raises(KilnError, match="NAME=D,D"):
        parse_input_shapes(["ids:1,7"])


def test_an_index_out_of_range_is_an_error_code(exported, tmp_path):
    """A token id past the vocabulary: the run returns INDEX_OUT_OF_RANGE with its message,
    as CompiledModel.run raises IndexOutOfRangeError (nothing is read out of bounds)."""
    _, _, feeds = model_case("transformer")
    lib, compiled, exe = exported("transformer")
    ids = feeds["input_ids"].copy()
    ids[0, 3] = 50                      # the vocabulary has 50 rows: 0..49 (or -50..-1)
    _write_inputs(tmp_path, {"input_ids": ids}, compiled.plan.inputs)
    proc = subprocess.run([str(exe), str(tmp_path), "1", "run"], capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"run {CODE['INDEX_OUT_OF_RANGE']} "), proc.stdout
    assert "out of data bounds" in proc.stdout
    ids[0, 3] = -50                     # negative ids count from the end, as in ONNX
    _write_inputs(tmp_path, {"input_ids": ids}, compiled.plan.inputs)
    run_harness(exe, tmp_path, 1)
    got = _read_outputs(tmp_path, compiled)
    for g, k in zip(got, compiled.run({"input_ids": ids})):
        np.testing.assert_array_equal(g, k)


def test_the_thread_choice_reaches_the_c_library(exported):
    """A kernel the thread choice (graph/runtime/thread_choice.py) keeps on one thread gets
    one thread in the library's setup too, whatever the count the caller sets; the others
    get the caller's count."""
    import re

    from kiln.codegen.deploy.glue import glue_module
    from kiln.codegen.emit_module import threads_symbol
    from kiln.deploy import deploy_plan

    _, compiled, _ = exported("transformer")
    symbol = {k: compiled.kernels[k].symbol for k in compiled.kernels}
    assert deploy_plan(compiled)[0].serial == frozenset()     # (the fixture cleared it)
    name = sorted(compiled.kernels)[0]          # a choice of one serial kernel, injected
    saved = compiled.plan
    compiled.plan = dataclasses.replace(saved, meta={**saved.meta, "thread_choice": {
        "threads": 2, "serial": [name], "prewake": []}})
    try:
        plan, _ = deploy_plan(compiled)
    finally:
        compiled.plan = saved
    assert plan.serial == {symbol[name]}
    text = str(glue_module(plan, "m", "x86_64-unknown-linux-gnu"))
    stores = {g: v for v, g in
              re.findall(r'store i32 (\S+), (?:ptr|i32\*) @"?([\w.]+)"?', text)}
    assert stores[threads_symbol(symbol[name])] == "1"
    assert all(stores[threads_symbol(s)] != "1" for k, s in symbol.items() if k != name)
