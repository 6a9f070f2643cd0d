"""The rule-generated search space on matmul_prepacked tasks: the default's vector tile is one
weight panel (a GEMM register tile, a GEMV accumulating whole panels over all of K), and the
default, random and mutated configs all compute the product (a model's group with its bias
and GELU epilogue included)."""
import random

import numpy as np
import pytest

from kiln import te
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.codegen import Target
from kiln.graph import models
from kiln.graph.compile.model import prepare_graph
from kiln.graph.reference import run_node
from kiln.graph.compile.tasks import extract_tasks
from kiln.schedule.lower import lower
from kiln.te import ops
from tests.util import run_config


def _task(a_shape, n, block):
    a = te.placeholder(a_shape, "float32", "A")
    p = te.placeholder((-(-n // block), a_shape[-1], block), "float32", "P")
    c = ops.matmul_prepacked(a, p, n, name="C")
    return Task("mmp", (c,), (a, p, c)), a, p


def _configs(space, samples=4, mutations=2):
    rng = random.Random(1)
    default = space.default_config()
    return ([default] + [space.sample(rng) for _ in range(samples)]
            + [space.neighbors(default, rng, 3) for _ in range(mutations)])


SHAPES = {"bert-linear": ((1, 48, 64), 96, 16), "gemv": ((1, 80), 200, 40),
          "tail-panel": ((13, 24), 40, 16)}


@pytest.mark.parametrize("name", list(SHAPES))
def test_sampled_configs_compute_the_product(name):
    a_shape, n, block = SHAPES[name]
    task, a_t, p_t = _task(a_shape, n, block)
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, a_shape).astype(np.float32)
    w = rng.uniform(-1, 1, (a_shape[-1], n)).astype(np.float32)
    inputs = {a_t: a, p_t: ops.pack_matmul_weight(w, block)}
    space = SearchSpace(task)
    for config in _configs(space):
        got = run_config(task, space, config, inputs)[0]
        np.testing.assert_allclose(got, a @ w, rtol=1e-4, atol=1e-4, err_msg=str(config))


def test_gemm_default_is_a_register_tile_of_one_panel():
    task, _, _ = _task((1, 128, 256), 1000, 16)        # 1000 columns: not a multiple of 16
    config = SearchSpace(task).default_config()
    assert config["s0/tile/2"][1] == 16
    target = Target.native()
    vectors = -(-16 // target.vector_lanes("float32"))  # one panel: 2 AVX2 or 1 AVX-512 vector
    budget = (32 if target.vector_bits >= 512 else 16) * 3 // 4
    assert config["s0/tile/1"][1] * vectors <= budget  # rows x panel within the budget
    assert config["s0/reduce/0"] == 256


def test_gemv_default_accumulates_whole_panels():
    task, _, _ = _task((1, 1280), 1000, 40)
    space = SearchSpace(task)
    config = space.default_config()
    assert config["s0/tile/1"] == [1, 40] and config["s0/reduce/0"] == 1280
    sch, args = space.apply(config)
    text = str(lower(sch, args, name="k"))
    # panel | k | the panel's 40 columns: one contiguous run of P per k
    assert "vectorized(40)" in text and "k.inner * 40 + " in text


def test_bert_ffn_group_with_gelu_under_sampled_configs():
    model = models.bert_like_encoder(seq=8, hidden=32, heads=2, layers=1, vocab=50)
    graph, groups = prepare_graph(model)
    tasks = extract_tasks(graph, groups)[0]
    (mt,) = [t for t in tasks if "erf" in t.dag.group.ops]
    group = mt.dag.group
    assert group.anchor.op == "matmul_prepacked"
    rng = np.random.default_rng(4)
    values = {}
    for v in group.inputs:
        values[v.name] = graph.constants[v.name] if v.name in graph.constants else \
            rng.standard_normal(v.shape).astype(np.float32)
    for node in group.nodes:                       # the numpy reference, node by node
        outs = run_node(node, [values[v.name] for v in node.inputs])
        values.update({o.name: x for o, x in zip(node.outputs, outs)})
    want = values[group.outputs[0].name]
    inputs = {t: values[v.name] for t, v in zip(mt.dag.placeholders, mt.dag.inputs)}
    space = SearchSpace(mt.task)
    for config in _configs(space, samples=3, mutations=2):
        got = run_config(mt.task, space, config, inputs)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(config))


@pytest.mark.parametrize("rows, k, n", [(50, 384, 384), (15, 256, 520)])
def test_few_rows_over_a_big_weight_take_all_rows_in_one_cache_tile(rows, k, n):
    # a weight past 512 KB read once: one rows tile covering all of them, no tail, and the
    # parallel loop reaches the column blocks; the default still computes the product
    task, a_t, p_t = _task((1, rows, k), n, 16)
    space = SearchSpace(task)
    config = space.default_config()
    mid, inner = config["s0/tile/1"]
    assert mid * inner == rows and rows % inner == 0
    assert config["s0/parallel"] == 3
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, (1, rows, k)).astype(np.float32)
    w = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    got = run_config(task, space, config, {a_t: a, p_t: ops.pack_matmul_weight(w, 16)})[0]
    np.testing.assert_allclose(got, a @ w, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("a_shape, n", [((1, 50, 64), 96), ((1, 128, 384), 1536)])
def test_small_weights_and_many_rows_keep_row_cache_tiles(a_shape, n):
    # under 512 KB, or more than 64 rows: tiles as before
    task, _, _ = _task(a_shape, n, 16)
    mid, inner = SearchSpace(task).default_config()["s0/tile/1"]
    assert mid * inner < a_shape[1]


@pytest.mark.parametrize("a_shape, n", [((1, 3, 3, 256), 520), ((1, 2, 5, 263), 500)])
def test_few_rows_over_several_axes_share_one_read_of_a_big_weight(a_shape, n):
    # NHWC pixels (H x W, here 9 and 10 rows) over a weight past 512 KB, one thread: every
    # axis before the register tile's rows is whole in the cache tile and the columns are
    # walked one panel at a time; the default still computes the product (tail panels,
    # prime K and row counts)
    task, a_t, p_t = _task(a_shape, n, 16)
    space = SearchSpace(task, threads=1)
    config = space.default_config()
    assert config["s0/tile/1"] == [a_shape[1], 1]
    mid, inner = config["s0/tile/2"]
    assert mid * inner == a_shape[2]
    assert config["s0/tile/3"] == [1, 16]
    rng = np.random.default_rng(6)
    a = rng.uniform(-1, 1, a_shape).astype(np.float32)
    w = rng.uniform(-1, 1, (a_shape[-1], n)).astype(np.float32)
    got = run_config(task, space, config, {a_t: a, p_t: ops.pack_matmul_weight(w, 16)})[0]
    np.testing.assert_allclose(got, a @ w, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("a_shape, n", [((1, 49, 384), 1536), ((1, 7, 7, 256), 1024),
                                        ((1, 2, 11, 263), 500), ((1, 3, 13, 128), 1024)])
@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "native"])
def test_few_rows_without_an_exact_tile_still_read_the_weight_once(a_shape, n, target):
    # no divisor of 49, 7, 11 or 13 in (3, 6]: on AVX2 (two vectors a panel) register tiles
    # of 4-6 rows (the fewest tiles, then the longest tail), the cache tile as many of them
    # as fit, the axes before it whole and the columns one panel at a time; the default
    # still computes the product here (a row tail, tail panels, prime K)
    task, a_t, p_t = _task(a_shape, n, 16)
    space = SearchSpace(task.retargeted(target), threads=1)
    config = space.default_config()
    rows = len(a_shape) - 2
    mid, inner = config[f"s0/tile/{rows}"]
    assert mid * inner <= a_shape[rows] < (mid + 1) * inner
    if target != "native":
        assert 4 <= inner <= 6
    for pos in range(1, rows):
        assert config[f"s0/tile/{pos}"] == [a_shape[pos], 1]
    assert config[f"s0/tile/{rows + 1}"] == [1, 16]
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, a_shape).astype(np.float32)
    w = rng.uniform(-1, 1, (a_shape[-1], n)).astype(np.float32)
    got = run_config(task, space, config, {a_t: a, p_t: ops.pack_matmul_weight(w, 16)})[0]
    np.testing.assert_allclose(got, a @ w, rtol=1e-4, atol=1e-3)


def test_rows_over_several_axes_keep_their_tiles_when_threads_need_the_columns():
    # with two threads, a fused parallel loop of at most 3 axes cannot reach the columns of
    # a 4-d activation: the image rows stay outside the cache tile, as before
    task, _, _ = _task((1, 3, 3, 256), 520, 16)
    config = SearchSpace(task, threads=2).default_config()
    assert config["s0/tile/1"] == [1, 1]
