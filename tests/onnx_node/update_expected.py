"""Regenerate tests/onnx_node/expected_failures.txt: run every onnx node test case through
Kiln's backend and list those that do not pass, with their reason.

    python -m tests.onnx_node.update_expected            # all cases, 2 worker processes
    python -m tests.onnx_node.update_expected --jobs 1 --check   # compare, write nothing

Run it after adding operators (the list only shrinks) and review the diff: a case that moves
to "wrong" is a bug to fix, not a line to commit.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections import Counter

from . import runner


def _run_modules(modules: list[str]) -> dict[str, list[runner.CaseResult]]:
    return {m: [runner.run_kiln(c) for c in runner.module_cases(m)] for m in modules}


def run_modules(modules: list[str], jobs: int) -> dict[str, list[runner.CaseResult]]:
    """Results by module, in `jobs` fresh processes (each generates its modules' cases)."""
    if jobs <= 1:
        return _run_modules(modules)
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        results = {}
        for part in pool.imap_unordered(_run_modules, [[m] for m in modules]):
            results.update(part)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--check", action="store_true",
                        help="only compare with the committed list; exit 1 if it differs")
    parser.add_argument("--modules", nargs="+", metavar="MODULE",
                        help="re-run only these case modules (e.g. dropout flatten) and keep "
                             "the list's entries for the others")
    parser.add_argument("--output", default=str(runner.EXPECTED_PATH))
    args = parser.parse_args(argv)
    os.environ.setdefault("KILN_NUM_THREADS", "2")  # as tests/conftest.py
    start = time.perf_counter()
    results = run_modules(args.modules or list(runner.case_modules()), args.jobs)
    flat = [r for rs in results.values() for r in rs]
    total = None
    if args.modules and not args.check:   # keep the other modules' entries as they are
        old = runner.read_expected()
        results = {**{m: list(rs.values()) for m, rs in old.by_module.items()}, **results}
        total = old.total
    counts = Counter(r.status for r in flat)
    print(f"{len(flat)} cases in {time.perf_counter() - start:.0f} s: " +
          ", ".join(f"{counts[s]} {s}" for s in runner.STATUSES))
    wrong = [r for r in flat if r.status == "wrong"]
    for r in wrong:
        print(f"WRONG ANSWER: {r.name}: {r.reason}")
    if args.check:
        expected = runner.read_expected()
        problems = [p for m, rs in results.items()
                    for p in runner.compare(rs, expected.module(m))]
        print("\n".join(problems) or "the list matches")
        return 1 if problems else 0
    with open(args.output, "w") as f:
        f.write(runner.format_expected(results, total))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
