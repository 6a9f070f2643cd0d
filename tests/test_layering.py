"""Imports point one way: kiln -> graph -> autotune -> codegen -> schedule -> te; no module
imports another that imports it back (but the few circles listed); inside a layer, the
packages keep their directions (graph: ir <- ops <- passes, onnx <- compile; the executor
below compile, the per-shape models above it)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ["te", "schedule", "codegen", "autotune", "graph", "kiln"]  # lowest first
FOLDER_OF = {"te": "te", "schedule": "schedule", "codegen": "codegen", "autotune": "autotune",
             "graph": "graph", "kiln": "kiln"}


def _imported_layers(path: Path, layer: str) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    depth_in_package = len(path.relative_to(ROOT / FOLDER_OF[layer]).parts) - 1
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] == "kiln":
                    found.add(parts[1] if len(parts) > 1 and parts[1] in LAYERS else "kiln")
                continue
            up = node.level - 1 - depth_in_package
            if up <= 0:
                continue  # inside the same layer
            # `from ..codegen import x` names the layer in the module, `from .. import te`
            # in the imported names
            names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
            found.update(n if n in LAYERS else "kiln" for n in names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "kiln":
                    found.add(parts[1] if len(parts) > 1 and parts[1] in LAYERS else "kiln")
    return found


def _modules():
    for layer in LAYERS:
        for path in sorted((ROOT / FOLDER_OF[layer]).rglob("*.py")):
            yield layer, path


@pytest.mark.parametrize("layer,path", list(_modules()),
                         ids=lambda x: str(x.relative_to(ROOT)) if isinstance(x, Path) else x)
def test_no_upward_imports(layer, path):
    rank = LAYERS.index(layer)
    upward = {dep for dep in _imported_layers(path, layer)
              if dep in LAYERS and LAYERS.index(dep) > rank}
    assert not upward, f"{path.relative_to(ROOT)} ({layer}) imports higher layers {upward}"


# --- import circles and the directions inside the layers ------------------------------------

def _module_name(layer: str, path: Path) -> str:
    parts = list(path.relative_to(ROOT / FOLDER_OF[layer]).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["kiln"] + ([] if layer == "kiln" else [layer]) + parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the Kiln modules it imports, at the top or inside functions (imports under
    `if TYPE_CHECKING:` excluded): `from .a import b` counts as importing a and, when b is a
    module, b. A package's imports of its own submodules are left out."""
    found: dict[str, set[str]] = {}
    for layer, path in _modules():
        name = _module_name(layer, path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text())
        hidden = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                  and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        deps = set()
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                if base.split(".")[0] == "kiln":
                    deps.add(base)
                    deps.update(f"{base}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.split(".")[0] == "kiln")
        found[name] = deps
    return {m: {d for d in deps if d in found and d != m and not d.startswith(m + ".")}
            for m, deps in found.items()}


def _cycles(graph: dict[str, set[str]]) -> list[frozenset]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(frozenset(comp))
    return out


# circles left, each inside one small part of the IR (an expression and its printer)
KNOWN_CYCLES = {
    frozenset({"kiln.te.expr", "kiln.te.printer", "kiln.te.tensor", "kiln.te.visit"}),
    frozenset({"kiln.schedule.ir", "kiln.schedule.printer"}),
    frozenset({"kiln.schedule.bound", "kiln.schedule.simplify"}),
}


def test_no_new_import_cycles():
    cycles = set(_cycles(_import_graph()))
    new = [sorted(c) for c in cycles - KNOWN_CYCLES]
    assert not new, f"modules that import each other (directly or around a circle): {new}"
    gone = [sorted(c) for c in KNOWN_CYCLES - cycles]
    assert not gone, f"these circles are gone: take them out of KNOWN_CYCLES: {gone}"


@pytest.mark.parametrize("pair", [
    ("kiln.graph.onnx.load", "kiln.graph.onnx.core"),       # the frontend and its converters
    ("kiln.graph.onnx.core", "kiln.graph.onnx.more"),
    ("kiln.autotune.space.rules", "kiln.autotune.space.apply"),
    ("kiln.autotune.space.rules", "kiln.autotune.space.defaults"),
    ("kiln.autotune.compare", "kiln.autotune.measure"),
    ("kiln.codegen.export", "kiln.codegen.kernel"),
    ("kiln.codegen.parallel", "kiln.codegen.runtime"),
])
def test_named_circles_stay_gone(pair):
    graph = _import_graph()
    a, b = pair
    reach = lambda src, dst: _reaches(graph, src, dst)   # noqa: E731
    assert not (reach(a, b) and reach(b, a)), f"{a} and {b} import each other again"


def _reaches(graph, src, dst) -> bool:
    seen, todo = {src}, [src]
    while todo:
        for w in graph[todo.pop()]:
            if w == dst:
                return True
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return False


# inside a layer: (package, the packages it must not import)
INNER_DIRECTIONS = [
    ("kiln.graph.ir", ["kiln.graph.ops", "kiln.graph.onnx", "kiln.graph.passes",
                       "kiln.graph.compile", "kiln.graph.runtime"]),
    ("kiln.graph.ops", ["kiln.graph.onnx", "kiln.graph.compile", "kiln.graph.runtime"]),
    ("kiln.graph.passes", ["kiln.graph.onnx", "kiln.graph.compile", "kiln.graph.runtime"]),
    ("kiln.graph.onnx", ["kiln.graph.passes", "kiln.graph.compile", "kiln.graph.runtime"]),
    ("kiln.graph.runtime.executor", ["kiln.graph.onnx", "kiln.graph.passes",
                                     "kiln.graph.compile"]),
    ("kiln.schedule.passes", ["kiln.schedule.lower", "kiln.schedule.schedule"]),
]


@pytest.mark.parametrize("package,forbidden", INNER_DIRECTIONS,
                         ids=[p for p, _ in INNER_DIRECTIONS])
def test_inner_directions(package, forbidden):
    graph = _import_graph()
    wrong = sorted(f"{m} -> {d}" for m, deps in graph.items()
                   if m == package or m.startswith(package + ".")
                   for d in deps for f in forbidden if d == f or d.startswith(f + "."))
    assert not wrong, f"imports against the direction of the layers: {wrong}"


def test_codegen_runs_the_pipeline_not_single_passes():
    """codegen takes the loop-IR passes from schedule/passes' PIPELINE only (run_passes)."""
    graph = _import_graph()
    wrong = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.startswith("kiln.codegen.")
                   for d in deps if d.startswith("kiln.schedule.passes."))
    assert not wrong, wrong
