"""The example plugin (examples/vsbench-example-plugin) installed the way a user installs one, for
tests that run ``vsbench`` in subprocesses.

pip writes the package and its ``.dist-info`` (the entry points included) into a folder of the
test's own; that folder goes on the subprocesses' PYTHONPATH, where ``importlib.metadata`` finds the
entry points. Nothing is installed into the test environment, and the checkout stays clean (pip
builds in the source tree, so it builds a copy). The expected numbers are computed here from the
generated files alone, without vsbench.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "vsbench-example-plugin"
DISTRIBUTION = "vsbench-example-plugin"


def install_example_plugin(work: Path) -> Path:
    """pip-install the example plugin into ``work/site`` (no index, no dependencies); returns that folder."""
    source, target = work / "source", work / "site"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                           "--no-build-isolation", "--disable-pip-version-check", "--target", str(target), str(source)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"pip install of the example plugin failed:\n{done.stdout}\n{done.stderr}"
    return target


def environment(*paths: Path, **variables: str) -> dict[str, str]:
    """This process's environment (the tests' private caches and stores included) with ``paths``
    first on PYTHONPATH."""
    before = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), *before]), **variables}


def fake_plugin(site: Path, group: str, entry: str, module: str = "", source: str = "") -> Path:
    """A distribution ``broken-plugin`` in ``site`` with one entry point in ``group`` and, optionally,
    a module ``broken_plugin`` holding ``source``."""
    info = site / "broken_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{entry} = {module}\n")
    if source:
        (site / "broken_plugin.py").write_text(source)
    return site


def vsbench(env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -m vsbench ARGS`` in a subprocess with ``env``."""
    return subprocess.run([sys.executable, "-m", "vsbench", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def expected_colour_match(root: Path) -> dict[str, float]:
    """top1_accuracy and mean_rank of mean_colour on a generated colour_match set, from the PNGs and
    colours.csv only: each image's colour as integers, exact squared distances, first hit per query.

    mean_colour's descriptor of a solid image is its colour / 255 (and a zero std), so its ranking
    is this one provided no two gallery images are at the same distance from a query (the model's
    float32 could then order them either way): that is asserted, so a seed with ties fails here
    rather than by a float's last bit."""
    with (root / "colours.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    colours = [row["colour"] for row in rows]
    pixels = [np.asarray(Image.open(root / "images" / f"{row['image']}.png").convert("RGB")).reshape(-1, 3)
              for row in rows]
    assert all((p == p[0]).all() for p in pixels), "the generator writes solid colours"
    rgb = np.array([p[0] for p in pixels], dtype=np.int64)
    ranks = []
    for query in range(len(rows)):
        distance = {other: int(((rgb[query] - rgb[other]) ** 2).sum()) for other in range(len(rows)) if other != query}
        assert len(set(distance.values())) == len(distance), f"query {query}: two images at one distance"
        ranked = sorted(distance, key=distance.__getitem__)
        ranks.append(1 + next(n for n, other in enumerate(ranked) if colours[other] == colours[query]))
    return {"top1_accuracy": sum(rank == 1 for rank in ranks) / len(ranks), "mean_rank": sum(ranks) / len(ranks)}
