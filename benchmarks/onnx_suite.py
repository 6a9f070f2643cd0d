"""onnx's backend node tests through Kiln's ONNX backend and through onnxruntime, in the same
run: counts by status (pass / unsupported / wrong answer / error) and Kiln's counts by reason.

    python benchmarks/onnx_suite.py [--jobs 2] [--top 30]

Cases and checks are those of tests/onnx_node (onnx's generators, onnx's comparison with each
case's rtol/atol). Kiln compiles with no tuning database (db=None), kernels in-process; the
last line is JSON.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit_json, print_table  # noqa: E402

from tests.onnx_node import runner  # noqa: E402


class _OrtRep:
    def __init__(self, model):
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3      # errors only: its warnings flood the table
        self.session = ort.InferenceSession(model.SerializeToString(), options,
                                            providers=["CPUExecutionProvider"])
        self.names = [i.name for i in self.session.get_inputs()]

    def run(self, inputs):
        return self.session.run(None, dict(zip(self.names, inputs)))


def run_ort(case) -> runner.CaseResult:
    from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented
    return runner.run_case(case, _OrtRep, (OrtNotImplemented,))


def _run_module(module: str):
    cases = runner.module_cases(module)
    return module, [(runner.run_kiln(c), run_ort(c)) for c in cases]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--top", type=int, default=30, help="reasons to list")
    args = parser.parse_args(argv)
    os.environ.setdefault("KILN_NUM_THREADS", "1")
    start = time.perf_counter()
    modules = list(runner.case_modules())
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        pairs = [p for _, ps in pool.imap_unordered(_run_module, modules) for p in ps]
    seconds = time.perf_counter() - start
    kiln = Counter(k.status for k, _ in pairs)
    ort = Counter(o.status for _, o in pairs)
    both = sum(1 for k, o in pairs if k.status == o.status == "pass")
    print(f"{len(pairs)} node cases of onnx {runner.onnx.__version__}, {seconds:.0f} s "
          f"({args.jobs} processes)\n")
    print_table(["status", "Kiln", "onnxruntime"],
                [[s, kiln[s], ort[s]] for s in runner.STATUSES] + [["total", len(pairs),
                                                                    len(pairs)]])
    print(f"\npassed by both: {both}; by Kiln only: "
          f"{sum(1 for k, o in pairs if k.status == 'pass' != o.status)}; by onnxruntime only:"
          f" {sum(1 for k, o in pairs if o.status == 'pass' != k.status)}\n")
    reasons = Counter(runner.general_reason(k) for k, _ in pairs if k.status != "pass")
    print_table(["cases", "Kiln's reason"], [[n, r] for r, n in reasons.most_common(args.top)])
    wrong = sorted(k.name for k, _ in pairs if k.status == "wrong")
    if wrong:
        print("\nKiln wrong answers:", ", ".join(wrong))
    emit_json({"benchmark": "onnx_suite", "onnx": runner.onnx.__version__,
               "cases": len(pairs), "kiln": dict(kiln), "onnxruntime": dict(ort),
               "passed_by_both": both, "kiln_wrong": wrong, "seconds": round(seconds, 1),
               "jobs": args.jobs,
               "kiln_reasons": dict(reasons.most_common(args.top))})
    return 0


if __name__ == "__main__":
    sys.exit(main())
