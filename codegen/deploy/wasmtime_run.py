"""Run a Kiln .wasm model from Python under wasmtime (the `wasmtime` package): what the
JavaScript loader does, for tests and benchmarks. numpy arrays in, numpy arrays out."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ...te.errors import CodegenError, KernelArgumentError


class WasmtimeModel:
    def __init__(self, wasm: str | Path, meta: dict):
        try:
            import wasmtime
        except ImportError as exc:
            raise CodegenError("running a .wasm model from Python needs the wasmtime "
                               "package: pip install wasmtime") from exc
        self.meta = meta
        engine = wasmtime.Engine()
        self.store = wasmtime.Store(engine)
        module = wasmtime.Module.from_file(engine, str(wasm))
        if module.imports:
            names = [f"{i.module}.{i.name}" for i in module.imports]
            raise CodegenError(f"{wasm} imports {names}; Kiln's wasm modules import nothing")
        instance = wasmtime.Instance(self.store, module, [])
        ex = instance.exports(self.store)
        self._ex = ex
        self.memory = ex["memory"]
        if "_initialize" in ex:
            ex["_initialize"](self.store)
        prefix = meta["prefix"]
        self._run = ex[f"{prefix}_run"]
        self._message = ex[f"{prefix}_error_message"]
        malloc = ex["malloc"]

        def alloc(n):
            p = malloc(self.store, max(int(n), 1))
            if not p:
                raise CodegenError(f"{wasm}: out of memory for {n} bytes")
            return p
        self.inputs = [alloc(t["bytes"]) for t in meta["inputs"]]
        self.outputs = [alloc(t["bytes"]) for t in meta["outputs"]]
        self.in_table = alloc(4 * max(len(self.inputs), 1))
        self.out_table = alloc(4 * max(len(self.outputs), 1))
        self.workspace = alloc(meta["workspace_bytes"]) if meta["workspace_bytes"] else 0
        self._write(self.in_table, np.array(self.inputs, np.uint32).tobytes())
        self._write(self.out_table, np.array(self.outputs, np.uint32).tobytes())

    def _write(self, address: int, data: bytes) -> None:
        self.memory.write(self.store, data, address)

    def _read(self, address: int, n: int) -> bytes:
        return self.memory.read(self.store, address, address + n)

    def set_inputs(self, arrays) -> None:
        for k, (arr, t) in enumerate(zip(arrays, self.meta["inputs"])):
            arr = np.ascontiguousarray(arr)
            if str(arr.dtype) != t["dtype"] or list(arr.shape) != t["shape"]:
                raise KernelArgumentError(f"input '{t['name']}': expected {t['dtype']}"
                                          f"{t['shape']}, got {arr.dtype}{list(arr.shape)}")
            self._write(self.inputs[k], arr.tobytes())

    def call(self) -> None:
        rc = self._run(self.store, self.in_table, self.out_table, self.workspace)
        if rc:
            p = self._message(self.store, rc)
            text = self._read(p, 512).split(b"\0")[0].decode()
            raise CodegenError(f"{self.meta['prefix']}_run failed ({rc}): {text}")

    def run(self, arrays) -> list[np.ndarray]:
        if len(arrays) != len(self.meta["inputs"]):
            raise KernelArgumentError(f"model takes {len(self.meta['inputs'])} inputs, got "
                                      f"{len(arrays)}")
        self.set_inputs(arrays)
        self.call()
        return [np.frombuffer(self._read(p, t["bytes"]), dtype=t["dtype"]).reshape(t["shape"])
                for p, t in zip(self.outputs, self.meta["outputs"])]

    def benchmark(self, arrays, repeat: int = 20) -> float:
        """Median seconds of one call (inputs set once)."""
        self.set_inputs(arrays)
        self.call()
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            self.call()
            times.append(time.perf_counter() - start)
        return float(np.median(times))
