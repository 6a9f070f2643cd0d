"""Where a cold model compile's CPU time goes, per distinct kernel and per phase.

    python benchmarks/model_compile_phases.py [--model resnet50_like] [--image 224] [--top 12]
                                              [--onnx PATH]

One process, no kernel cache, no tuning database (default schedules), kernels compiled one
after another as a compile worker does: schedule (search space default + apply), lower (loop
IR), emit (loop IR -> llvmlite module -> text, with Python's garbage collector paused as
build() pauses it), LLVM (parse + verify + O3 passes), machine code (object file emission). Parent phases: ONNX frontend + graph passes + fusion, and task
extraction (TE lowering of the groups, workload keys). All figures are CPU seconds of this
process (time.process_time): the machine is shared and wall time mostly measures waiting.
Prints a table of the slowest kernels, the phase totals and per-kernel percentiles, and, as
the last line, one JSON object.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, print_table  # noqa: E402

import onnx  # noqa: E402

from kiln.autotune.dispatch import Selection, apply_selection, canonical_target  # noqa: E402
from kiln.autotune.space.rules import SearchSpace  # noqa: E402
from kiln.codegen import Target, jit  # noqa: E402
from kiln.codegen.build import DEFAULT_FASTMATH, gc_paused, param_specs  # noqa: E402
from kiln.codegen.emit_module import emit_module, fastmath_flags, symbol_name  # noqa: E402
from kiln.codegen.pyentry import add_python_entry  # noqa: E402
from kiln.codegen.runtime_config import num_threads_from_env  # noqa: E402
from kiln.graph import models  # noqa: E402
from kiln.graph.compile.model import prepare_graph  # noqa: E402
from kiln.graph.compile.tasks import extract_tasks  # noqa: E402
from kiln.schedule import lower  # noqa: E402

PHASES = ("schedule", "lower", "emit", "llvm", "mc")


def _percentiles(values) -> dict:
    v = sorted(values)
    return {"median": statistics.median(v), "p90": v[min(len(v) - 1, int(0.9 * len(v)))],
            "max": v[-1], "sum": sum(v)}


def measure(model, threads: int) -> dict:
    clock = time.process_time
    target = canonical_target("native")
    tgt = Target.from_string(target)
    t0 = clock()
    graph, groups = prepare_graph(model)
    t1 = clock()
    tasks, _ = extract_tasks(graph, groups, target)
    t2 = clock()
    kernels = []
    for mt in tasks:
        c0 = clock()
        space = SearchSpace(mt.task.retargeted(target), threads)
        sch, args, _ = apply_selection(space, Selection(None))
        c1 = clock()
        func = lower(sch, args, name=mt.name)
        c2 = clock()
        with gc_paused():   # as build() emits
            module = emit_module(func, tgt, fastmath_flags(DEFAULT_FASTMATH), parallel=None)
            add_python_entry(module, symbol_name(func.name), param_specs(func))
            text = str(module)
        c3 = clock()
        mod = jit.optimize(text, tgt)
        c4 = clock()
        tgt.create_target_machine(for_object=True).emit_object(mod)
        c5 = clock()
        kernels.append({"kernel": mt.name, "schedule": c1 - c0, "lower": c2 - c1,
                        "emit": c3 - c2, "llvm": c4 - c3, "mc": c5 - c4, "total": c5 - c0,
                        "ir_lines": text.count("\n")})
    return {"parent": {"frontend+passes": t1 - t0, "extract_tasks": t2 - t1},
            "kernels": kernels}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50_like")
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--onnx", help="an ONNX file to compile instead of --model")
    args = parser.parse_args(argv)
    if args.onnx:
        proto, args.model = onnx.load(args.onnx), Path(args.onnx).stem
    else:
        proto = getattr(models, args.model)(image_size=args.image)
    if not isinstance(proto, onnx.ModelProto):
        raise SystemExit(f"{args.model} did not build an ONNX model")
    res = measure(proto, num_threads_from_env())
    ks = sorted(res["kernels"], key=lambda k: -k["total"])
    rows = [[k["kernel"][:48], *(k[p] * 1e3 for p in PHASES), k["total"] * 1e3, k["ir_lines"]]
            for k in ks[:args.top]]
    print_table(["kernel", *(p + " ms" for p in PHASES), "total ms", "IR lines"], rows)
    totals = {p: sum(k[p] for k in ks) for p in PHASES}
    pct = _percentiles([k["total"] for k in ks])
    print(f"\n{len(ks)} kernels; CPU s per phase: "
          + ", ".join(f"{p} {v:.2f}" for p, v in totals.items())
          + f"; kernels total {pct['sum']:.2f}")
    print(f"per kernel CPU s: median {pct['median']:.3f}, p90 {pct['p90']:.3f}, "
          f"max {pct['max']:.3f}")
    print("parent CPU s: " + ", ".join(f"{k} {v:.2f}" for k, v in res["parent"].items()))
    emit_json({"bench": "model_compile_phases", "model": args.model, "image": args.image,
               "parent_cpu_s": res["parent"], "phase_cpu_s": totals, "per_kernel": pct,
               "kernels": res["kernels"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
