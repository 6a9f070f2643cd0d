"""Headless Chromium on a page served from 127.0.0.1: the page POSTs its result (JSON) back
to the server, so the latency it reports is measured in real time (not --dump-dom's virtual
time). Used by test_browser.py and benchmarks/deploy.py."""
from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

WEB = Path(__file__).resolve().parent / "web"
ORT_DIST = WEB / "node_modules" / "onnxruntime-web" / "dist"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--mute-audio"]


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def missing() -> str | None:
    """What the browser tests lack here, or None."""
    if chromium() is None:
        return "no chromium (apt-get install chromium; .ci/run installs it)"
    if not (ORT_DIST / "ort.wasm.min.mjs").exists():
        return f"no onnxruntime-web in {WEB} (npm ci --prefix {WEB}; .ci/run does it)"
    return None


class _Handler(SimpleHTTPRequestHandler):
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm",
                      ".mjs": "text/javascript", ".js": "text/javascript"}

    def __init__(self, *args, results: queue.Queue, **kwargs):
        self.results = results
        super().__init__(*args, **kwargs)

    def do_POST(self):   # noqa: N802 - the http.server name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.results.put(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@contextmanager
def serve(directory: Path):
    """An HTTP server of `directory` on 127.0.0.1 (a free port) that also takes the page's
    POSTed result; yields (base URL, result queue)."""
    results: queue.Queue = queue.Queue()
    handler = partial(_Handler, directory=str(directory), results=results)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", results
    finally:
        server.shutdown()
        server.server_close()


def stage(out, directory: Path, inputs: list, onnx_model=None) -> None:
    """Copy the wasm export `out` (WasmModule), the inputs' bytes and (for the comparison)
    the ONNX model and onnxruntime-web's files into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    for p in (out.wasm, out.loader, out.page):
        if p.parent != directory:
            shutil.copy(p, directory / p.name)
    (directory / "inputs.bin").write_bytes(b"".join(a.tobytes() for a in inputs))
    if onnx_model is not None:
        (directory / "model.onnx").write_bytes(onnx_model.SerializeToString())
        ort = directory / "ort"
        ort.mkdir(exist_ok=True)
        for name in ("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs",
                     "ort-wasm-simd-threaded.wasm"):
            shutil.copy(ORT_DIST / name, ort / name)


def run_page(directory: Path, page: str, *, ort: bool, repeat: int = 10,
             timeout: float = 120.0) -> dict:
    """Open `page` of `directory` in headless Chromium; the result the page reports."""
    with serve(directory) as (base, results), tempfile.TemporaryDirectory() as profile:
        query = f"inputs=inputs.bin&repeat={repeat}&report={quote(base + '/result')}"
        if ort:
            query += "&ort=model.onnx"
        cmd = [chromium(), *FLAGS, f"--user-data-dir={profile}", f"{base}/{page}?{query}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, "HOME": profile})
        try:
            return results.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"the page reported nothing in {timeout} s; chromium said: "
                               f"{_stderr(proc)}") from None
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _stderr(proc) -> str:
    proc.terminate()
    try:
        return proc.communicate(timeout=10)[1].decode(errors="replace")[-2000:]
    except subprocess.TimeoutExpired:
        return "(no output)"
