"""Every package folder is listed in pyproject.toml, so a non-editable install keeps it."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_in_pyproject():
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir, packages = setup["package-dir"], set(setup["packages"])
    folders = {}
    for top in ("kiln", "te", "schedule", "codegen", "autotune", "graph"):
        for init in (ROOT / top).rglob("__init__.py"):
            folders[init.parent.relative_to(ROOT).as_posix()] = init
    mapped = {folder: name for name, folder in package_dir.items()}
    missing = sorted(f for f in folders if f not in mapped)
    assert not missing, f"package folders missing from pyproject's package-dir: {missing}"
    unlisted = sorted(mapped[f] for f in folders if mapped[f] not in packages)
    assert not unlisted, f"packages missing from pyproject's packages: {unlisted}"
    gone = sorted(n for n, f in package_dir.items() if not (ROOT / f / "__init__.py").exists())
    assert not gone, f"pyproject names package folders that do not exist: {gone}"
