"""Hunt for kernels that LLVM takes very long to compile: random ONNX graphs of one op mix
(tests/graph/onnx_strategies.py), their kernels emitted for one or more targets, each
emitted module optimised and turned into machine code in a forked child with a timeout.

    python benchmarks/llvm_hang_hunt.py --graphs 300 --mix reductions \
        --targets native "llvm -mcpu=znver4" --timeout 30 [--wide on|off] [--only reduce]

Prints the slowest kernels and writes every module that timed out (or took longer than
--slow seconds) to --out, with the graph's ops, so it can be replayed.
"""
from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, given, seed as hypothesis_seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import InvalidArgument  # noqa: E402

from kiln.autotune.dispatch import Selection  # noqa: E402
from kiln.codegen import emit_expr  # noqa: E402
from kiln.codegen.build import DEFAULT_FASTMATH, param_specs  # noqa: E402
from kiln.codegen.emit_module import emit_module, fastmath_flags, symbol_name  # noqa: E402
from kiln.codegen.jit import optimize  # noqa: E402
from kiln.codegen.pyentry import add_python_entry  # noqa: E402
from kiln.codegen.target import Target  # noqa: E402
from kiln.graph.compile.model import _build_task, prepare_graph  # noqa: E402
from kiln.graph.compile.tasks import extract_tasks  # noqa: E402
from tests.graph.onnx_strategies import onnx_graphs  # noqa: E402
from tests.graph.test_random_onnx_graphs import MIXES  # noqa: E402


def kernel_texts(model, target: str, only: str | None, threads: int):
    """(task name, LLVM IR text) of every kernel of `model` for `target`."""
    tgt = Target.from_string(target)
    graph, groups = prepare_graph(model, target=tgt)
    tasks, _ = extract_tasks(graph, groups, tgt)
    out = []
    for mt in tasks:
        if only and only.lower() not in (mt.name + " " + mt.task.description).lower():
            continue

        def emit(func):
            module = emit_module(func, tgt, fastmath_flags(DEFAULT_FASTMATH), parallel=None)
            add_python_entry(module, symbol_name(func.name), param_specs(func))
            return str(module)
        text, _ = _build_task(mt, tgt, Selection(None), emit, threads)
        out.append((mt.name, text))
    return out


def _compile_child(text: str, target: str) -> None:
    tgt = Target.from_string(target)
    mod = optimize(text, tgt)
    tgt.create_target_machine(for_object=True).emit_object(mod)


def timed_compile(text: str, target: str, timeout: float) -> float | None:
    """Seconds to optimise and emit `text` in a forked child, None when it hit `timeout`."""
    ctx = multiprocessing.get_context("fork")
    start = time.perf_counter()
    proc = ctx.Process(target=_compile_child, args=(text, target))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return None
    if proc.exitcode != 0:
        raise RuntimeError(f"compile child exited with {proc.exitcode}")
    return time.perf_counter() - start


def collect(n_graphs: int, mix: str, targets, only, threads, seed):
    found: dict[str, tuple] = {}

    @settings(max_examples=n_graphs, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), derandomize=seed is None)
    @given(st.data())
    def gen(data):
        try:
            model, _ = data.draw(onnx_graphs(families=MIXES[mix]))
        except InvalidArgument:     # the strategy can draw from an empty list (see report)
            return
        desc = " | ".join(f"{n.op_type}{[a.name + '=' + str(a) for a in n.attribute]}"
                          .replace("\n", " ") for n in model.graph.node)
        shapes = [[d.dim_value for d in v.type.tensor_type.shape.dim]
                  for v in model.graph.input]
        for target in targets:
            for name, text in kernel_texts(model, target, only, threads):
                key = hashlib.sha256((target + text).encode()).hexdigest()[:16]
                found.setdefault(key, (target, name, text, f"inputs {shapes}: {desc}"))
    if seed is not None:
        gen = hypothesis_seed(seed)(gen)
    gen()
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", type=int, default=200)
    ap.add_argument("--mix", default="reductions", choices=sorted(MIXES))
    ap.add_argument("--targets", nargs="+", default=["native"])
    ap.add_argument("--only", default="reduce", help="substring of the task name/ops "
                    "('' for every kernel)")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--slow", type=float, default=5.0)
    ap.add_argument("--wide", choices=("on", "off"), default=None,
                    help="force 64-bit element offsets (WIDE_ADDRESSES) on or off")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=None,
                    help="hypothesis seed of the graphs drawn (default: its derandomized stream)")
    ap.add_argument("--out", default="/tmp/kiln_hang_hunt")
    args = ap.parse_args(argv)
    if args.wide is not None:
        emit_expr.WIDE_ADDRESSES = args.wide == "on"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    found = collect(args.graphs, args.mix, args.targets, args.only or None, args.threads,
                    args.seed)
    print(f"{len(found)} distinct kernels from {args.graphs} graphs in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    times = []
    for key, (target, name, text, desc) in found.items():
        seconds = timed_compile(text, target, args.timeout)
        times.append((seconds if seconds is not None else float("inf"), key, target, name))
        if seconds is None or seconds > args.slow:
            (out / f"{key}.ll").write_text(f"; target: {target}\n; {name}\n; {desc}\n" + text)
            print(f"SLOW {key} {target!r} {name}: "
                  f"{'TIMEOUT' if seconds is None else f'{seconds:.1f} s'}  {desc}", flush=True)
    times.sort(reverse=True)
    for seconds, key, target, name in times[:10]:
        print(f"{seconds:8.2f} s  {key}  {target}  {name}")
    total = sum(t for t, *_ in times if t != float("inf"))
    print(f"{len(times)} kernels, {total:.1f} s compiling, wall {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
