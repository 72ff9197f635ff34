"""The wheel (what the images install) holds every package of the source tree.

pyproject.toml lists the packages by hand (two of them live outside src/); a package missing
from that list works in the editable development install and fails only inside the image."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_source_package_is_in_the_wheel() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    on_disk = {".".join(init.parent.relative_to(ROOT / "src").parts) for init in (ROOT / "src").rglob("__init__.py")
               if "__pycache__" not in init.parts and ".egg-info" not in str(init)}
    for name, folder in setuptools["package-dir"].items():
        if name:  # packages kept outside src/ (components/, pipelines/)
            on_disk |= {".".join([name, *init.parent.relative_to(ROOT / folder).parts])
                        for init in (ROOT / folder).rglob("__init__.py")}
    assert on_disk - listed == set(), f"packages missing from pyproject.toml's [tool.setuptools] packages: {sorted(on_disk - listed)}"
