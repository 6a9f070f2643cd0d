"""LLVM time of the same random tuning candidates, so that two checkouts compare like for like.

    python benchmarks/candidate_compile_time.py [--configs 12] [--seed 7]

tune_throughput.py's model-guided search proposes different candidates in every run, so its
compile seconds per trial move with what it happened to draw. Here the candidates are fixed:
`--configs` random configs (seeded) of the search spaces of GEMM 512^3 and conv2d 32x28x28 3x3
(the tasks tune_throughput.py tunes), each lowered, emitted and compiled in this process as
a measurement worker does (LLVM passes, then object code), in CPU seconds. Configs that do
not apply are skipped the same way in every checkout. Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json  # noqa: E402

from kiln.autotune.space.rules import SearchSpace  # noqa: E402
from kiln.autotune.task import Task  # noqa: E402
from kiln.codegen.build import DEFAULT_FASTMATH  # noqa: E402
from kiln.codegen.emit_module import emit_module, fastmath_flags  # noqa: E402
from kiln.codegen.jit import optimize  # noqa: E402
from kiln.codegen.target import Target  # noqa: E402
from kiln.schedule import lower  # noqa: E402
from kiln.te.errors import KilnError  # noqa: E402

TASKS = {"gemm_512": ("matmul", (512, 512, 512)),
         "conv_32x28x28": ("conv2d", (1, 32, 28, 28, 32, 3, 3, 1, 1))}


def measure(op: str, shape: tuple, configs: int, seed: int, tgt: Target) -> dict:
    space = SearchSpace(Task.from_op(op, shape).retargeted(str(tgt)), 2)
    rng, passes, code, worst, done = random.Random(seed), 0.0, 0.0, 0.0, 0
    while done < configs:
        try:
            sch, args = space.apply(space.sample(rng))
            func = lower(sch, args, name="candidate")
        except KilnError:
            continue
        done += 1
        text = str(emit_module(func, tgt, fastmath_flags(DEFAULT_FASTMATH), parallel="kiln"))
        c0 = time.process_time()
        mod = optimize(text, tgt)
        c1 = time.process_time()
        tgt.create_target_machine(for_object=True).emit_object(mod)
        c2 = time.process_time()
        passes, code, worst = passes + c1 - c0, code + c2 - c1, max(worst, c2 - c0)
    return {"passes_s": round(passes, 3), "machine_code_s": round(code, 3),
            "worst_s": round(worst, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    tgt = Target.native()
    out = {}
    for name, (op, shape) in TASKS.items():
        out[name] = measure(op, shape, args.configs, args.seed, tgt)
        r = out[name]
        print(f"{name}: {args.configs} configs, LLVM passes {r['passes_s']:.2f} s, machine "
              f"code {r['machine_code_s']:.2f} s, slowest {r['worst_s']:.2f} s", flush=True)
    emit_json({"bench": "candidate_compile_time", "configs": args.configs, "seed": args.seed,
               **out})


if __name__ == "__main__":
    main()
