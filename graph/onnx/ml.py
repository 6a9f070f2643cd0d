"""Small ops of the ai.onnx.ml domain (Binarizer, ArrayFeatureExtractor, TreeEnsemble) as
graph ops (the optional-value ops are in onnx_ops_sequence.py)."""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from .core import unsupported_error, converter


@converter("ai.onnx.ml.Binarizer")
def _binarizer(ctx, x, threshold=0.0):
    above = ctx.emit("greater", [x, ctx.const(np.array(threshold, dtype=x.dtype))])
    return ctx.emit("cast", [above], {"to": x.dtype}, final=True)


@converter("ai.onnx.ml.ArrayFeatureExtractor")
def _array_feature_extractor(ctx, x, indices):
    """x[..., indices] (the indices along the last axis; run-time values)."""
    if len(x.shape) == 0:
        raise ModelFormatError(f"node '{ctx.node_name}' (ArrayFeatureExtractor): a scalar "
                               "input has no axis to select from")
    flat = indices if len(indices.shape) == 1 else ctx.emit(
        "reshape", [indices], {"shape": (indices.size,)})
    if len(x.shape) == 1:   # a 1-D input gives one row
        x = ctx.emit("reshape", [x], {"shape": (1, x.shape[0])})
    return ctx.emit("gather", [x, flat], {"axis": len(x.shape) - 1}, final=True)


_COMPARE = {0: "less_equal", 1: "less", 2: "greater_equal", 3: "greater", 4: "equal"}


@converter("ai.onnx.ml.TreeEnsemble")
def _tree_ensemble(ctx, x, *, leaf_targetids, leaf_weights, nodes_falseleafs,
                   nodes_falsenodeids, nodes_featureids, nodes_modes, nodes_splits,
                   nodes_trueleafs, nodes_truenodeids, tree_roots, aggregate_function=1,
                   membership_values=None, n_targets=None, nodes_hitrates=None,
                   nodes_missing_value_tracks_true=None, post_transform=0):
    """Every leaf's path condition as elementwise comparisons of x's columns with the
    splits (each node compared once), and the output column of each target the aggregate
    of its leaves' weights where their path holds."""
    if post_transform != 0:
        raise unsupported_error(ctx, f"TreeEnsemble with post_transform={post_transform}")
    if aggregate_function not in (0, 1, 2, 3) or len(x.shape) != 2:
        raise ModelFormatError(f"node '{ctx.node_name}' (TreeEnsemble): aggregate_function "
                               f"{aggregate_function} (expected 0-3), input {list(x.shape)} "
                               "(expected [N, features])")
    emit, rows = ctx.emit, x.shape[0]
    members = iter([] if membership_values is None else list(membership_values.reshape(-1)))
    tracks = list(nodes_missing_value_tracks_true or [0] * len(nodes_modes))
    conds: dict[int, object] = {}

    def const(v):
        return ctx.const(np.array(v, dtype=x.dtype))

    def column(f):
        return emit("slice", [x], {"starts": (0, int(f)), "ends": (rows, int(f) + 1),
                                   "steps": (1, 1)})

    def condition(k):    # node k's test on every row, [N, 1] bool (built once per node)
        if k in conds:
            return conds[k]
        col, mode = column(nodes_featureids[k]), int(nodes_modes[k])
        if mode == 6:   # set membership: the members up to the next NaN
            c = ctx.const(np.zeros((rows, 1), bool))
            for v in members:   # the shared iterator: each MEMBER node takes its own run
                if np.isnan(v):
                    break
                c = emit("logical_or", [c, emit("equal", [col, const(v)])])
        elif mode == 5:
            c = emit("logical_not", [emit("equal", [col, const(nodes_splits[k])])])
        else:
            c = emit(_COMPARE[mode], [col, const(nodes_splits[k])])
        if tracks[k]:
            c = emit("logical_or", [c, emit("is_nan", [col])])
        conds[k] = c
        return c

    leaves = []    # (tree, leaf index, path condition or None)

    def walk(tree, k, is_leaf, path):
        if is_leaf:
            leaves.append((tree, k, path))
            return
        c = condition(k)
        walk(tree, nodes_truenodeids[k], nodes_trueleafs[k],
             c if path is None else emit("logical_and", [path, c]))
        not_c = emit("logical_not", [c])
        walk(tree, nodes_falsenodeids[k], nodes_falseleafs[k],
             not_c if path is None else emit("logical_and", [path, not_c]))

    for t, root in enumerate(tree_roots):
        degenerate = nodes_trueleafs[root] and nodes_falseleafs[root] and \
            nodes_truenodeids[root] == nodes_falsenodeids[root]
        walk(t, root, bool(degenerate), None)
    weights = np.asarray(leaf_weights).reshape(-1)
    targets = int(n_targets) if n_targets else int(max(leaf_targetids)) + 1
    big = np.finfo(np.dtype(x.dtype)).max
    columns = []
    for target in range(targets):
        acc, hit, always = None, None, False   # hit: some tree reaches a leaf of target
        for _, leaf, path in (p for p in leaves if leaf_targetids[p[1]] == target):
            if path is None:
                always = True
            elif aggregate_function in (2, 3):
                hit = path if hit is None else emit("logical_or", [hit, path])
            w = float(weights[leaf]) / (len(tree_roots) if aggregate_function == 0 else 1)
            if aggregate_function in (0, 1):
                term = const(w) if path is None else emit(
                    "mul", [emit("cast", [path], {"to": x.dtype}), const(w)])
                acc = term if acc is None else emit("add", [acc, term])
            else:
                fill = big if aggregate_function == 2 else -big
                term = const(w) if path is None else emit("where", [path, const(w),
                                                                    const(fill)])
                op = "min" if aggregate_function == 2 else "max"
                acc = term if acc is None else emit(op, [acc, term])
        if acc is None:   # no leaf for this target
            acc = const(0.0)
        elif hit is not None and not always:   # MIN/MAX over no leaf: 0 (onnxruntime)
            acc = emit("where", [hit, acc, const(0.0)])
        columns.append(emit("broadcast_to", [acc], {"shape": (rows, 1)}))
    out = columns[0] if len(columns) == 1 else emit("concat", columns, {"axis": 1})
    return emit("identity", [out], final=True)
