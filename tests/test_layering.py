"""Imports point one way: kiln -> graph -> autotune -> codegen -> schedule -> te."""
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
