"""The import arrows point down (DESIGN.md: no import cycles; imaging and models import nothing above
them). Read from the source with ``ast`` (every import, deferred ones inside functions too), nothing
imported: issue 58 moved ``Preprocessing`` to :mod:`vsbench.imaging.preprocessing` and the ResNet
trunks to :mod:`vsbench.models.trunks`, which removed imaging -> models and models -> abid."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "vsbench"

# Each layer and the vsbench packages it may import (itself included). io sits below both.
ALLOWED = {
    "io": {"io"},
    "imaging": {"io", "imaging"},
    "models": {"io", "imaging", "models"},
}
# Known arrows up, each with why it is left (a new one fails the test; a fixed one must leave this list).
KNOWN = {("models/check.py", "vsbench.benchmarks.check")}  # plugin checks share the annotation reader


def vsbench_imports(path: Path) -> set[str]:
    """Every ``vsbench.*`` module ``path`` imports, at any depth of the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "vsbench" or name.startswith("vsbench.")}


def arrows_up(layer: str) -> list[tuple[str, str]]:
    """(file, module) for each import of ``layer`` into a package it may not import."""
    bad = []
    for path in sorted((SRC / layer).rglob("*.py")):
        for module in sorted(vsbench_imports(path)):
            package = module.split(".")[1] if "." in module else ""
            if package and package not in ALLOWED[layer]:
                bad.append((str(path.relative_to(SRC)), module))
    return bad


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_lower_layer_imports_nothing_above_it(layer):
    assert [arrow for arrow in arrows_up(layer) if arrow not in KNOWN] == []


def test_the_known_arrows_up_are_still_there():
    """A fixed arrow leaves :data:`KNOWN`, so the list never hides a new one under an old name."""
    found = {arrow for layer in ALLOWED for arrow in arrows_up(layer)}
    assert KNOWN <= found


def test_the_reader_sees_a_deferred_import(tmp_path):
    """The check reads imports inside functions too: the kind that would hide an arrow up."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from vsbench.abid.models import resnet_trunk\n    import vsbench.steps.abid\n")
    assert vsbench_imports(module) == {"vsbench.abid.models", "vsbench.steps.abid"}
