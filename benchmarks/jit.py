"""kiln.jit against numpy, numexpr and (if installed) JAX on CPU: fused elementwise chains (SELU,
numexpr's `a*b-4.1*a > 2.5*b`, a Black-Scholes pricer), a softmax and a layer norm, at 1 and 2
threads, on arrays inside the caches and beyond them; and the first call (trace + compile) of
a function of a dozen operations, with a cold and a warm kernel cache.

    python benchmarks/jit.py [--threads 1,2] [--quick] [--no-huge]

Every thread count runs in its own interpreter pinned to that many cores
(os.sched_setaffinity), with KILN_NUM_THREADS / NUMEXPR_NUM_THREADS / XLA's intra-op threads
set to it, so every library sees the same cores. Sizes (float32): "L2" 2**16 elements (256 KB
per array), "L3" 2**24 (64 MB per array: past the per-core caches, inside a large shared L3)
and "DRAM" 2**27 (512 MB per array, past the reported last-level cache; SELU and the numexpr
expression only, as numpy's Black-Scholes would take minutes there). Times are medians;
ratios are numpy's time over each library's, measured in the same run. Prints a table and, as
the last line, one JSON object.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SIZES = {"L2": 1 << 16, "L3": 1 << 24, "DRAM": 1 << 27}
SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805


# -- the workloads, written once against a numpy-like namespace ----------------------------

def selu(xp, x):
    return SELU_SCALE * xp.where(x > 0, x, SELU_ALPHA * (xp.exp(x) - 1))


def expression(xp, a, b):
    return a * b - 4.1 * a > 2.5 * b


def _cdf(xp, x):
    k = 1.0 / (1.0 + 0.2316419 * xp.abs(x))
    poly = k * (0.319381530 + k * (-0.356563782 + k * (1.781477937 + k * (
        -1.821255978 + k * 1.330274429))))
    c = 1.0 - xp.exp(-0.5 * x * x) / math.sqrt(2 * math.pi) * poly
    return xp.where(x >= 0, c, 1.0 - c)


def black_scholes(xp, s, k, t, r, sigma):
    sqrt_t = xp.sqrt(t)
    d1 = (xp.log(s / k) + (r + 0.5 * sigma * sigma) * t) / (sigma * sqrt_t)
    d2 = d1 - sigma * sqrt_t
    discount = k * xp.exp(-r * t)
    return (s * _cdf(xp, d1) - discount * _cdf(xp, d2),
            discount * _cdf(xp, -d2) - s * _cdf(xp, -d1))


def softmax(xp, x):
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def layer_norm(xp, x, gamma, beta):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / xp.sqrt(var + 1e-5) * gamma + beta


def dozen_ops(xp, x, y):
    """The first-call function: 12 operations (tanh, mul, mul, neg, exp, add, abs, add, sqrt,
    sub, greater, where) and a keepdims sum."""
    z = xp.tanh(x) * 0.5 + xp.exp(-(x * y)) - xp.sqrt(xp.abs(y) + 1.0)
    z = xp.where(z > 0, z, 0.1 * z)
    return z * z.sum(axis=-1, keepdims=True)


# numexpr forms (where numexpr can express the function)
_NE_CDF = ("where(X >= 0, 1 - exp(-0.5*X*X) * {c} * K, exp(-0.5*X*X) * {c} * K)"
           .format(c=1 / math.sqrt(2 * math.pi)))
_NE_POLY = ("(1.0/(1.0+0.2316419*abs(X)))*(0.319381530+(1.0/(1.0+0.2316419*abs(X)))*"
            "(-0.356563782+(1.0/(1.0+0.2316419*abs(X)))*(1.781477937+(1.0/(1.0+0.2316419*"
            "abs(X)))*(-1.821255978+(1.0/(1.0+0.2316419*abs(X)))*1.330274429))))")


def _ne_cdf(ne, x):
    return ne.evaluate(_NE_CDF.replace("K", f"({_NE_POLY})").replace("X", "x"),
                       local_dict={"x": x})


def ne_black_scholes(ne, s, k, t, r, sigma):
    env = {"s": s, "k": k, "t": t, "r": r, "sigma": sigma}
    d1 = ne.evaluate("(log(s/k) + (r + 0.5*sigma*sigma)*t) / (sigma*sqrt(t))", local_dict=env)
    d2 = ne.evaluate("d1 - sigma*sqrt(t)", local_dict={**env, "d1": d1})
    n1, n2 = _ne_cdf(ne, d1), _ne_cdf(ne, d2)
    env.update(n1=n1, n2=n2)
    call = ne.evaluate("s*n1 - k*exp(-r*t)*n2", local_dict=env)
    put = ne.evaluate("k*exp(-r*t)*(1 - n2) - s*(1 - n1)", local_dict=env)
    return call, put


def _args(name: str, n: int, np):
    rng = np.random.default_rng(0)
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    if name == "selu":
        return (f32(n),)
    if name == "expression":
        return f32(n), f32(n)
    if name == "black_scholes":
        u = lambda lo, hi: rng.uniform(lo, hi, n).astype(np.float32)
        return u(10, 100), u(10, 100), u(0.1, 2), 0.02, 0.3
    if name == "softmax":
        return (f32(n // 256, 256),)
    if name == "layer_norm":
        return f32(n // 256, 256), f32(256), f32(256)
    raise KeyError(name)


WORKLOADS = {"selu": selu, "expression": expression, "black_scholes": black_scholes,
             "softmax": softmax, "layer_norm": layer_norm}
NUMEXPR = {"selu": lambda ne, x: ne.evaluate(
               f"{SELU_SCALE}*where(x > 0, x, {SELU_ALPHA}*(exp(x) - 1))"),
           "expression": lambda ne, a, b: ne.evaluate("a*b-4.1*a > 2.5*b"),
           "black_scholes": ne_black_scholes}
ELEMENTWISE = ("selu", "expression", "black_scholes")


# -- one thread count, in its own interpreter ----------------------------------------------

def _worker(threads: int, sizes: list[str], quick: bool) -> dict:
    import numpy as np
    sys.path.insert(0, str(HERE))
    from common import median_seconds

    import kiln
    import kiln.numpy as knp
    try:
        import numexpr as ne
        ne.set_num_threads(threads)
    except ImportError:
        ne = None
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        jax = None
    rows = []
    for size in sizes:
        n = SIZES[size]
        for name, fn in WORKLOADS.items():
            if size == "DRAM" and name not in ("selu", "expression"):
                continue
            args = _args(name, n, np)
            repeat, number = (5, 20) if n <= SIZES["L2"] else (3 if size == "DRAM" else 5, 1)
            if quick:
                repeat = 3
            kfn = kiln.jit(functools.partial(fn, knp), threads=threads)
            want = fn(np, *args)
            got = kfn(*args)
            for g, w in zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,)))):
                if w.dtype == bool:
                    assert (g != w).mean() < 1e-6, name
                else:
                    np.testing.assert_allclose(g, w, rtol=2e-3, atol=2e-3)
            row = {"workload": name, "size": size, "elements": n, "threads": threads,
                   "kernels": len(kfn.compile(*args).plan.steps)}
            row["numpy_ms"] = median_seconds(lambda: fn(np, *args), repeat, number) * 1e3
            row["kiln_ms"] = median_seconds(lambda: kfn(*args), repeat, number) * 1e3
            if ne is not None and name in NUMEXPR:
                row["numexpr_ms"] = median_seconds(lambda: NUMEXPR[name](ne, *args), repeat,
                                                   number) * 1e3
            if jax is not None:
                jfn = jax.jit(functools.partial(fn, jnp))
                jargs = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
                jax.block_until_ready(jfn(*jargs))
                row["jax_ms"] = median_seconds(
                    lambda: jax.block_until_ready(jfn(*jargs)), repeat, number) * 1e3
            del args, want, got
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return {"rows": rows}


def _first_call(cache: str) -> dict:
    """Seconds of `import kiln` and of the first and second call of dozen_ops (64 x 1000)."""
    start = time.perf_counter()
    import numpy as np

    import kiln
    import kiln.numpy as knp
    imported = time.perf_counter()
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((64, 1000)).astype(np.float32) for _ in range(2))
    f = kiln.jit(lambda x, y: dozen_ops(knp, x, y))
    t0 = time.perf_counter()
    out = f(x, y)
    t1 = time.perf_counter()
    f(x, y)
    t2 = time.perf_counter()
    np.testing.assert_allclose(out, dozen_ops(np, x, y), rtol=1e-3, atol=1e-3)
    doc = {"import_s": imported - start, "first_call_s": t1 - t0, "second_call_s": t2 - t1,
           "trace_s": f.stats.trace_seconds, "compile_s": f.stats.compile_seconds,
           "kernels": len(f.compile(x, y).plan.steps), "cache": cache}
    try:
        import jax
        import jax.numpy as jnp
        g = jax.jit(lambda x, y: dozen_ops(jnp, x, y))
        t0 = time.perf_counter()
        jax.block_until_ready(g(x, y))
        doc["jax_first_call_s"] = time.perf_counter() - t0
    except ImportError:
        pass
    return doc


def _run_child(args: list[str], threads: int, env_extra: dict | None = None) -> dict:
    env = {**os.environ, "KILN_NUM_THREADS": str(threads), "NUMEXPR_NUM_THREADS": str(threads),
           "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT),
           "XLA_FLAGS": f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} "
                        f"intra_op_parallelism_threads={threads}", **(env_extra or {})}
    done = subprocess.run([sys.executable, __file__, "--child", str(threads), *args], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"worker failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--quick", action="store_true", help="fewer repeats, no DRAM size")
    parser.add_argument("--no-huge", action="store_true", help="skip the DRAM size")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--first-call", default=None, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        cpus = sorted(os.sched_getaffinity(0))[:opts.child]
        os.sched_setaffinity(0, cpus)
        doc = (_first_call(opts.first_call) if opts.first_call else
               _worker(opts.child, opts.sizes.split(","), opts.quick))
        print(json.dumps(doc))
        return
    sizes = ["L2", "L3"] + ([] if opts.quick or opts.no_huge else ["DRAM"])
    rows = []
    for threads in (int(t) for t in opts.threads.split(",")):
        rows += _run_child(["--sizes", ",".join(sizes)] + (["--quick"] if opts.quick else []),
                           threads)["rows"]
    with tempfile.TemporaryDirectory(prefix="kiln-jit-bench-") as cache:
        env = {"KILN_CACHE_DIR": cache}
        cold = _run_child(["--first-call", "cold"], 1, env)
        warm = _run_child(["--first-call", "warm"], 1, env)
    table = []
    for r in rows:
        ratio = lambda key: r["numpy_ms"] / r[key] if key in r else None
        table.append([r["workload"], r["size"], r["threads"], r["kernels"], r["numpy_ms"],
                      r["kiln_ms"], ratio("kiln_ms"), r.get("numexpr_ms", "-"),
                      ratio("numexpr_ms") or "-", r.get("jax_ms", "-"), ratio("jax_ms") or "-"])
        r["kiln_x"], r["numexpr_x"], r["jax_x"] = (ratio("kiln_ms"), ratio("numexpr_ms"),
                                                   ratio("jax_ms"))
    sys.path.insert(0, str(HERE))
    from common import emit_json, print_table
    print_table(["workload", "size", "thr", "kernels", "numpy ms", "kiln ms", "kiln x",
                 "numexpr ms", "numexpr x", "jax ms", "jax x"], table)
    print()
    print_table(["first call", "import s", "first call s", "trace s", "compile s",
                 "second call s", "jax first call s"],
                [[d["cache"], d["import_s"], d["first_call_s"], d["trace_s"], d["compile_s"],
                  d["second_call_s"], d.get("jax_first_call_s", "-")] for d in (cold, warm)])
    elementwise_dram_1t = [r["kiln_x"] for r in rows if r["workload"] in ELEMENTWISE and
                           r["threads"] == 1 and r["size"] == "DRAM"]
    emit_json({"benchmark": "jit", "rows": rows, "first_call": {"cold": cold, "warm": warm},
               "min_kiln_x_elementwise_dram_1thread": min(elementwise_dram_1t, default=None)})


if __name__ == "__main__":
    main()
