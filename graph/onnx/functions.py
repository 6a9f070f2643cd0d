"""ONNX operators that Kiln has no converter for but that onnx defines as a function of other
operators (LinearAttention, CausalConvWithState, SwiGLU, ...): each such node is replaced by
its function body, in the model's opset, before conversion; the body's nodes are then
converted and lowered to TE like any others (so they fuse and tune as usual).

Attribute references take the node's attributes or the schema's defaults; the values a body's
subgraphs (a Scan's, an If's) read from the body are renamed with it. A node whose body
cannot be built (a context-dependent body whose input types are unknown) stays as it is and
the frontend reports the operator as unsupported, as before.
"""
from __future__ import annotations

import itertools

import onnx
from onnx import AttributeProto, FunctionProto, NodeProto, defs

_DEFAULT_DOMAINS = ("", "ai.onnx")
MAX_DEPTH = 8   # a body may use other function ops; bounded against a cyclic definition


def _opset_of(model: onnx.ModelProto, domain: str) -> int | None:
    for imp in model.opset_import:
        if imp.domain == domain or (imp.domain in _DEFAULT_DOMAINS
                                    and domain in _DEFAULT_DOMAINS):
            return imp.version
    return None


def function_body(schema, node: NodeProto, opset: int, types: dict[str, onnx.TypeProto]
                  ) -> FunctionProto | None:
    """The schema's function for `opset` (the newest defined at or below it); None when
    there is none, or it depends on input types `types` does not give."""
    plain = [v for v in schema.function_opset_versions if v <= opset]
    context = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    body = FunctionProto()
    if plain and (not context or max(plain) >= max(context)):
        body.ParseFromString(schema.get_function_with_opset_version(max(plain)))
        return body
    if not context:
        return None
    if any(name and name not in types for name in node.input):
        return None    # a context-dependent body needs its inputs' types
    empty = onnx.TypeProto()
    input_types = [types[name] if name else empty for name in node.input]
    data = schema.get_context_dependent_function_with_opset_version(
        max(context), node.SerializeToString(), [t.SerializeToString() for t in input_types])
    body.ParseFromString(data)
    return body


def attribute_values(schema, node: NodeProto, body: FunctionProto
                     ) -> dict[str, AttributeProto]:
    """The node's attributes, then the schema's defaults, then those the function body
    declares itself: what the body's attribute references resolve to."""
    attrs = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if name not in attrs and spec.default_value.name:
            attrs[name] = spec.default_value
    for a in body.attribute_proto:
        attrs.setdefault(a.name, a)
    return attrs


def resolve_reference(a: AttributeProto, attrs: dict[str, AttributeProto]
                      ) -> AttributeProto | None:
    """`a` itself, or, for a reference to a function attribute, the referenced value under
    `a`'s name; None for a reference to an optional attribute nobody set."""
    if not a.ref_attr_name:
        return a
    if a.ref_attr_name not in attrs:
        return None
    ref = AttributeProto()
    ref.CopyFrom(attrs[a.ref_attr_name])
    ref.name = a.name
    return ref


def _inline(node: NodeProto, body: FunctionProto, attrs: dict[str, AttributeProto],
            prefix: str) -> list[NodeProto] | None:
    """The body's nodes with its formal inputs/outputs renamed to the node's, its internal
    values prefixed, and attribute references resolved; None if that cannot be done."""
    rename = {}
    for formal, actual in itertools.zip_longest(body.input, node.input, fillvalue=""):
        rename[formal] = actual
    for formal, actual in itertools.zip_longest(body.output, node.output, fillvalue=""):
        if formal:
            rename[formal] = actual or prefix + formal

    def name(n: str) -> str:
        if not n:
            return ""
        return rename.setdefault(n, prefix + n)

    out = []
    for k, inner in enumerate(body.node):
        new = NodeProto()
        new.CopyFrom(inner)
        del new.input[:], new.output[:], new.attribute[:]
        new.input.extend(name(n) for n in inner.input)
        new.output.extend(name(n) for n in inner.output)
        new.name = f"{prefix}{inner.name or inner.op_type + str(k)}"
        for a in inner.attribute:
            if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                copy = AttributeProto()
                copy.CopyFrom(a)
                for g in ([copy.g] if a.type == AttributeProto.GRAPH else list(copy.graphs)):
                    _rename_outer(g, name)
                new.attribute.append(copy)
                continue
            resolved = resolve_reference(a, attrs)
            if resolved is not None:
                new.attribute.append(resolved)
        out.append(new)
    return out


def _rename_outer(graph: onnx.GraphProto, name) -> None:
    """Rename, in place, the values a subgraph reads from the body around it (those it does
    not define itself), through `name`; nested subgraphs too."""
    local = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    local |= {o for n in graph.node for o in n.output}
    outer = lambda n: n if (not n or n in local) else name(n)   # noqa: E731
    for node in graph.node:
        node.input[:] = [outer(n) for n in node.input]
        for a in node.attribute:
            for g in ([a.g] if a.type == AttributeProto.GRAPH else
                      list(a.graphs) if a.type == AttributeProto.GRAPHS else []):
                _rename_outer(g, outer)
    for o in graph.output:
        o.name = outer(o.name)


def expand_functions(model: onnx.ModelProto, has_converter) -> onnx.ModelProto:
    """`model` with every node that `has_converter(domain, op_type)` rejects and that onnx
    defines as a function replaced by that function's body (repeatedly, for bodies that use
    function ops); `model` itself when there is none."""
    if all(has_converter(n.domain, n.op_type) for n in model.graph.node):
        return model
    model_copy = onnx.ModelProto()
    model_copy.CopyFrom(model)
    changed = False
    for depth in range(MAX_DEPTH):
        types = _value_types(model_copy)
        nodes, expanded = [], False
        for k, node in enumerate(model_copy.graph.node):
            body_nodes = None
            if not has_converter(node.domain, node.op_type):
                body_nodes = _expand(model_copy, node, types, f"{node.name or node.op_type}"
                                     f"_{depth}_{k}/")
            if body_nodes is None:
                nodes.append(node)
                continue
            body_nodes, imports = body_nodes
            nodes.extend(body_nodes)
            expanded = True
            for imp in imports:
                if _opset_of(model_copy, imp.domain) is None:
                    model_copy.opset_import.append(imp)
        if not expanded:
            break
        changed = True
        del model_copy.graph.node[:]
        model_copy.graph.node.extend(nodes)
    return model_copy if changed else model


def _expand(model: onnx.ModelProto, node: NodeProto, types, prefix: str):
    """(the body's nodes, its opset imports), or None when `node` cannot be expanded."""
    opset = _opset_of(model, node.domain)
    if opset is None:
        return None
    try:
        schema = defs.get_schema(node.op_type, opset, node.domain)
    except defs.SchemaError:
        return None
    body = function_body(schema, node, opset, types)
    if body is None:
        return None
    nodes = _inline(node, body, attribute_values(schema, node, body), prefix)
    return None if nodes is None else (nodes, list(body.opset_import))


def _value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Types of the graph's values as far as onnx's inference tells (for the bodies that
    depend on their inputs' types)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        inferred = model
    g = inferred.graph
    types = {v.name: v.type for v in list(g.input) + list(g.value_info) + list(g.output)}
    for t in g.initializer:
        types.setdefault(t.name, onnx.helper.make_tensor_type_proto(t.data_type, t.dims))
    return types
