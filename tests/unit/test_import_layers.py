"""The import arrows point down (DESIGN.md: no import cycles; imaging and models import nothing above
them). Read from the source with ``ast`` (every import, deferred ones inside functions too), nothing
imported: issue 58 moved ``Preprocessing`` to :mod:`vsbench.imaging.preprocessing` and the ResNet
trunks to :mod:`vsbench.models.trunks` and the plugin checks' annotation reader to
:mod:`vsbench.io.annotations`, which removed imaging -> models, models -> abid and models -> benchmarks."""

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
    "stats": {"io", "stats"},  # issue 55: the interval names moved down from tracking/names.py
}


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
    assert arrows_up(layer) == []


def test_the_reader_sees_a_deferred_import(tmp_path):
    """The check reads imports inside functions too: the kind that would hide an arrow up."""
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from vsbench.abid.models import resnet_trunk\n    import vsbench.steps.abid\n")
    assert vsbench_imports(module) == {"vsbench.abid.models", "vsbench.steps.abid"}
