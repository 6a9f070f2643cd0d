"""Schema 1 -> 2 of the tuning database: knob names from positions, not names.

Schema 1 named a knob after the model it was tuned on: the stage's op name (`matmul`, `C`,
`conv#3`), the axis name (`tile/0:i`) and a packed operand's tensor name
(`pack/conv_1_nchwc16_winograd_v`). The same workload from another exporter had other names,
so its records did not fit. Schema 2 names stages `s<k>` and inputs `in<j>` by their place in
the DAG's canonical order (see SearchSpace._stage_label), so a record fits every model with
the workload.

A schema-1 config is renamed with the task's DAG in hand: the space built from it gives each
knob's new name, and the op/axis/tensor names of that same DAG give the old one. A config
that does not rename cleanly (a knob the old space of this DAG could not have had) stays at
schema 1, where `Database.best` never returns it.
"""
from __future__ import annotations

from .space.rules import SearchSpace

FROM_VERSION = 1


def legacy_knob_names(space: SearchSpace) -> dict[str, str]:
    """Schema-1 knob name -> schema-2 knob name, for every knob of `space`."""
    names = [op.name for op in space.ops]
    old_label = {op: op.name if names.count(op.name) == 1 else f"{op.name}#{k}"
                 for k, op in enumerate(space.ops)}
    pack_names = {}
    for anchor in space.anchors:
        seen: list[str] = []
        for pack in anchor.packs:
            name = pack.tensor.name
            if any(s.endswith("/" + name) for s in seen):
                name = f"{name}#{len(seen)}"
            seen.append(f"{old_label[anchor.op]}/pack/{name}")
            pack_names[pack.knob] = seen[-1]
    out = {}
    for knob in space.knobs:
        if knob.name in pack_names:
            out[pack_names[knob.name]] = knob.name
            continue
        label, kind, *rest = knob.name.split("/")
        op = space.ops[int(label[1:])]
        old = f"{old_label[op]}/{kind}"
        if kind in ("tile", "reduce"):
            pos = int(rest[0])
            axis = (op.axis if kind == "tile" else op.reduce_axis)[pos]
            old += f"/{pos}:{axis.name}"
        out[old] = knob.name
    return out


def rename_config(space: SearchSpace, config: dict, names: dict | None = None) -> dict | None:
    """`config` (schema 1) with schema-2 knob names, or None when a knob has no new name."""
    names = legacy_knob_names(space) if names is None else names
    if any(k not in names for k in config):
        return None
    return {names[k]: v for k, v in config.items()}
