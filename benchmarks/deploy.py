"""Deploy without Python: the C library and the wasm32 module against Kiln in Python.

    python benchmarks/deploy.py [--models resnet18_like,mobilenetv2_like,bert_like_encoder]
                                [--repeat 30] [--no-wasm]

Per model (benchmarks' shapes, default schedules or the committed log's records): latency of
CompiledModel.run (Python) and of <prefix>_run called from the C harness
(tests/deploy/harness.c, no Python in the process) at 1 and 2 threads, each the median of
--repeat runs, in 5 interleaved rounds (the median round is reported); latency of model.wasm under wasmtime (1 thread, simd128) against native Kiln at 1
thread; Kiln's wasm and onnxruntime-web (wasm, 1 thread, SIMD) on the same model in headless
Chromium (tests/deploy/browser.py); and the bytes of the runtime part (ABI glue + thread pool), of the kernels and of the
weights, for the .so and the .wasm. Prints a table and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from common import emit_json, print_table  # noqa: E402

from kiln.codegen.deploy import part_sizes  # noqa: E402
from kiln.codegen.deploy.wasmtime_run import WasmtimeModel  # noqa: E402
from kiln.deploy import deploy_plan, export_c  # noqa: E402
from kiln.deploy_wasm import export_wasm  # noqa: E402
from kiln.graph.compile.model import compile_model  # noqa: E402
from tests.task_catalog import BENCHMARK_MODELS  # noqa: E402
from tests.deploy import browser  # noqa: E402
from tests.deploy.test_c_abi import build_harness  # noqa: E402


ROUNDS = 5


def _inputs(compiled) -> list[np.ndarray]:
    return compiled._example_inputs()


def c_latency(exe: Path, workdir: Path, threads: int, repeat: int) -> float:
    out = subprocess.run([str(exe), str(workdir), str(threads), f"bench:{repeat}"],
                         capture_output=True, text=True, check=True, env={}).stdout
    return float(out.split()[1]) / 1e6


def bench_model(name: str, repeat: int, wasm: bool, tmp: Path, in_browser: bool) -> dict:
    proto = BENCHMARK_MODELS[name]()
    fig = {}
    compiled = compile_model(proto, db="default", threads=2, cache_model=False)
    inputs = _inputs(compiled)
    d = tmp / name
    lib = export_c(compiled, d / f"lib{name}.so")
    exe = build_harness(lib, d / "harness")
    for k, arr in enumerate(inputs):
        np.ascontiguousarray(arr).tofile(d / f"in{k}.bin")
    for threads in (1, 2):
        compiled.set_num_threads(threads)
        pys, cs = [], []
        for _ in range(ROUNDS):      # interleaved: the machine is shared and noisy
            pys.append(compiled.benchmark(inputs, repeat=repeat))
            cs.append(c_latency(exe, d, threads, repeat))
        py, c = float(np.median(pys)), float(np.median(cs))
        fig[f"python_ms_{threads}t"] = py * 1e3
        fig[f"c_abi_ms_{threads}t"] = c * 1e3
        fig[f"c_over_python_{threads}t"] = c / py
    plan, kernels = deploy_plan(compiled)
    parts = part_sizes(plan, kernels, name)
    fig.update({"so_runtime_bytes": parts["runtime"], "so_kernel_bytes": parts["kernels"],
                "weights_bytes": parts["weights"], "so_bytes": lib.sizes["shared_library"]})
    if wasm:
        compiled.set_num_threads(1)
        out = export_wasm(compiled, d / f"{name}.wasm", sizes=True)
        runner = WasmtimeModel(out.wasm, out.meta)
        got = runner.run(inputs)
        want = compiled.run(inputs)
        fig["wasm_max_abs_diff"] = float(max(np.abs(g - w).max() for g, w in zip(got, want)))
        w = runner.benchmark(inputs, repeat=max(5, repeat // 3))
        fig["wasmtime_ms"] = w * 1e3
        fig["wasmtime_over_native_1t"] = w / (fig["python_ms_1t"] / 1e3)
        fig.update({"wasm_runtime_bytes": out.sizes["runtime"],
                    "wasm_kernel_bytes": out.sizes["kernels"], "wasm_bytes": out.sizes["wasm"]})
        if in_browser:
            web = d / "web"
            browser.stage(out, web, inputs, onnx_model=proto)
            r = browser.run_page(web, f"{name}.html", ort=True, repeat=max(5, repeat // 3),
                                 timeout=900)
            if "error" in r:
                raise RuntimeError(f"{name} in Chromium: {r['error']}")
            got = np.array(r["kiln"]["outputs"][0], want[0].dtype).reshape(want[0].shape)
            fig["chromium_max_abs_diff"] = float(np.abs(got - want[0]).max())
            fig["chromium_ms"] = r["kiln"]["ms"]
            fig["ort_web_ms"] = r["ort"]["ms"]
            fig["chromium_over_native_1t"] = r["kiln"]["ms"] / fig["python_ms_1t"]
            fig["kiln_over_ort_web"] = r["kiln"]["ms"] / r["ort"]["ms"]
    return fig


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18_like,mobilenetv2_like,bert_like_encoder")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--no-wasm", action="store_true")
    ap.add_argument("--no-browser", action="store_true", help="skip headless Chromium "
                    "(Kiln wasm and onnxruntime-web)")
    args = ap.parse_args()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="kiln-deploy-bench-") as tmp:
        for name in args.models.split(","):
            in_browser = not args.no_browser and browser.missing() is None
            figures[name] = bench_model(name, args.repeat, not args.no_wasm, Path(tmp),
                                        in_browser)
            print(name, figures[name], flush=True)
    rows = []
    for name, f in figures.items():
        rows.append([name, f["python_ms_1t"], f["c_abi_ms_1t"], f["python_ms_2t"],
                     f["c_abi_ms_2t"], f.get("wasmtime_ms", "-"),
                     f.get("wasmtime_over_native_1t", "-"), f["so_runtime_bytes"],
                     f["so_kernel_bytes"], f.get("wasm_runtime_bytes", "-"),
                     f.get("wasm_kernel_bytes", "-"), f["weights_bytes"],
                     f.get("chromium_ms", "-"), f.get("ort_web_ms", "-")])
    print_table(["model", "py 1t ms", "C 1t ms", "py 2t ms", "C 2t ms", "wasmtime ms",
                 "wasm/native 1t", "so runtime B", "so kernels B", "wasm runtime B",
                 "wasm kernels B", "weights B", "chromium ms", "ort-web ms"], rows)
    emit_json(figures)


if __name__ == "__main__":
    main()
