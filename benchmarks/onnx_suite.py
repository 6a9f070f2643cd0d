"""onnx's backend node tests through Kiln's ONNX backend and through onnxruntime, in the same
run: counts by status (pass / unsupported / wrong answer / error) and Kiln's counts by reason.

    python benchmarks/onnx_suite.py [--jobs 2] [--top 30] [--generic]

--generic runs Kiln's side on the generic tier (graph/generic) as a tiered compile's first
tier plans it: generic kernels, and the fast tier's kernels for the fused groups they do not
cover; a case the generic tier does not take (no node on generic kernels, too many groups
without) counts as unsupported. It also counts the cases that ran on generic kernels alone.

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


class _GenericLimitation(Exception):
    """The generic tier does not take this case (its first tier would be the fast one)."""


_ALONE: list[str] = []     # cases of this process that ran on generic kernels alone


def _generic_prepare(model):
    from kiln.backend import KilnBackendRep
    from kiln.codegen.target import Target
    from kiln.graph.compile.model import fast_group_kernels
    from kiln.graph.generic.compile import compile_generic
    from kiln.graph.generic.lowering import Unsupported
    target = Target.native()
    threads = int(os.environ.get("KILN_NUM_THREADS", "1"))
    plain = all(v.type.HasField("tensor_type") for v in (*model.graph.input,
                                                         *model.graph.output))
    if not plain:      # sequence and optional values take the backend's wrapper (untiered)
        raise _GenericLimitation("sequence or optional inputs or outputs")
    try:
        gm = compile_generic(model, target, threads, fast_group_kernels(target, threads))
    except Unsupported as exc:
        raise _GenericLimitation(str(exc)) from exc
    if not gm.uncovered:
        _ALONE.append(model.graph.name)
    return KilnBackendRep(gm, [o.name for o in model.graph.output])


def run_generic(case) -> tuple[runner.CaseResult, bool]:
    """The case on the generic tier, and whether it ran on generic kernels alone."""
    from kiln import ModelFormatError, UnsupportedOperatorError
    before = len(_ALONE)
    result = runner.run_case(case, _generic_prepare, (UnsupportedOperatorError,
                                                      ModelFormatError, _GenericLimitation))
    return result, len(_ALONE) > before


def _run_module(module: str):
    cases = runner.module_cases(module)
    if os.environ.get("KILN_SUITE_TIER") == "generic":
        return module, [(*run_generic(c), run_ort(c)) for c in cases]
    return module, [(runner.run_kiln(c), False, run_ort(c)) for c in cases]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument("--top", type=int, default=30, help="reasons to list")
    parser.add_argument("--generic", action="store_true", help="Kiln's side on the generic "
                        "tier (a tiered compile's first tier)")
    args = parser.parse_args(argv)
    os.environ.setdefault("KILN_NUM_THREADS", "1")
    if args.generic:
        os.environ["KILN_SUITE_TIER"] = "generic"
        os.environ.setdefault("KILN_GENERIC_BUILD", "now")
    start = time.perf_counter()
    modules = list(runner.case_modules())
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        triples = [t for _, ts in pool.imap_unordered(_run_module, modules) for t in ts]
    pairs = [(k, o) for k, _, o in triples]
    seconds = time.perf_counter() - start
    kiln = Counter(k.status for k, _ in pairs)
    ort = Counter(o.status for _, o in pairs)
    both = sum(1 for k, o in pairs if k.status == o.status == "pass")
    tier = "generic tier" if args.generic else "untiered"
    print(f"{len(pairs)} node cases of onnx {runner.onnx.__version__}, Kiln {tier}, "
          f"{seconds:.0f} s ({args.jobs} processes)\n")
    alone = sum(1 for k, only, _ in triples if only and k.status == "pass")
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
    if args.generic:
        print(f"\npassed on generic kernels alone (no kernel compiled for the case): {alone}")
    emit_json({"benchmark": "onnx_suite", "onnx": runner.onnx.__version__,
               "cases": len(pairs), "kiln": dict(kiln), "onnxruntime": dict(ort),
               "passed_by_both": both, "kiln_wrong": wrong, "seconds": round(seconds, 1),
               "jobs": args.jobs, "tier": tier,
               **({"generic_alone_pass": alone} if args.generic else {}),
               "kiln_reasons": dict(reasons.most_common(args.top))})
    return 0


if __name__ == "__main__":
    sys.exit(main())
