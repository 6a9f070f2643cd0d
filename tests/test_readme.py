"""README.md states facts the code decides: the operator counts per ONNX domain, and that no
"session N" label (a private history) appears in the project's prose or code."""
import importlib
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# internal domains whose ops are ONNX ops of the default domain (staged data-dependent ops)
DEFAULT_DOMAIN_ALIASES = {"kiln.datadep"}
KNOWN_DOMAINS = ("ai.onnx.preview.training", "ai.onnx.ml", "com.microsoft")


def _converters() -> dict:
    """The converter registry, with every converter module imported (graph/onnx/converters)."""
    importlib.import_module("kiln.graph.onnx.converters")
    return dict(importlib.import_module("kiln.graph.onnx.registry").CONVERTERS)


def _domain(key: str) -> str:
    for domain in KNOWN_DOMAINS + tuple(DEFAULT_DOMAIN_ALIASES):
        if key.startswith(domain + "."):
            return "ai.onnx" if domain in DEFAULT_DOMAIN_ALIASES else domain
    assert "." not in key, f"converter key {key!r} has a domain this test does not know"
    return "ai.onnx"


def test_readme_operator_counts_match_the_registry():
    counts = Counter(_domain(key) for key in _converters())
    text = (ROOT / "README.md").read_text()
    section = text.split("## Supported operators", 1)[1].split("\n## ", 1)[0]
    stated = {m.group(1): int(m.group(2))
              for m in re.finditer(r"^\| ([a-z.]+) \| (\d+) \|$", section, re.M)}
    assert stated == dict(counts), (
        f"README.md's operator table says {stated}; the registry holds {dict(counts)}: "
        "update the table under '## Supported operators'")


def test_no_session_numbers_anywhere():
    listing = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listing.returncode != 0:
        pytest.skip("not a git checkout: no file list")
    files = listing.stdout.split()
    pattern = re.compile(r"sessions? ?\d", re.I)
    hits = []
    for name in files:
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".txt", ".toml") or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{name}:{number}: {line.strip()[:80]}")
    assert not hits, "name runs by date, not by session number:\n" + "\n".join(hits)
