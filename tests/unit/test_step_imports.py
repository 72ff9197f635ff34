"""The pipeline steps that never compute with torch do not import it (torch alone costs ~2.4 s of CPU
to import and ~0.7 s more at exit, paid by every Kubeflow pod and every step subprocess of the test
suite). Each case imports what a light component's body imports, in a fresh interpreter, and lists
the torch packages loaded. Nothing is timed here (bench/README.md, "The torch-free steps", has the figures).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository: `components` imports from here
TORCH = ("torch", "torchvision")

# What the bodies of the light components in components/similarity.py import (shard_list,
# search_tasks, index, index_finish, index_fill, search, score) and the other step modules.
LIGHT_MODULES = (
    "vsbench.steps.similarity",
    "vsbench.steps.evaluate",
    "vsbench.steps.abid",
    "vsbench.steps.compare",
    "vsbench.retrieval.engine",
    "vsbench.retrieval.origin",
    "vsbench.retrieval.shards",
    "vsbench.runspec.run",
    "vsbench.io.locks",
    "vsbench.io.storage",
    "vsbench.tracking.runs",
)

_LOADED = "import json, sys; print(json.dumps(sorted({n.split('.')[0] for n in sys.modules})))"


def _torch_loaded(code: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", f"{code}\n{_LOADED}"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return [name for name in json.loads(done.stdout.strip().splitlines()[-1]) if name in TORCH]


@pytest.mark.parametrize("module", LIGHT_MODULES)
def test_a_light_step_module_imports_no_torch(module: str) -> None:
    assert _torch_loaded(f"import {module}") == []


def test_the_fan_out_components_run_without_torch() -> None:
    """The bodies of ``shard_list`` and ``search_tasks``, as a pod runs them."""
    code = ("from components.similarity import shard_list, search_tasks\n"
            "assert shard_list.python_func(num_shards=3) == [0, 1, 2]\n"
            "assert search_tasks.python_func(search_shards=2, reference_shards=2) == [0, 1, 2, 3]\n")
    assert _torch_loaded(code) == []


def test_the_heavy_modules_still_import_torch() -> None:
    """The check sees torch when it is there (the embed path keeps its top-level imports)."""
    assert "torch" in _torch_loaded("import vsbench.retrieval.embed")


def test_index_search_and_score_refuse_a_missing_embed_output_without_torch(tmp_path: Path) -> None:
    """The three steps run (as far as their refusal of features that are not there) with no torch."""
    from vsbench.benchmarks.disc.synth import generate_disc

    generate_disc(tmp_path / "disc", references=4, queries=3, train=4, seed=1)
    code = f"""
from vsbench.io.features import FeatureError
from vsbench.runspec.run import BenchmarkRun
from vsbench.steps.similarity import similarity_index_step, similarity_score_step, similarity_search_step
run = BenchmarkRun.parse(benchmark="disc", root={str(tmp_path / "disc")!r}, codecs="l2/Flat", k=5, score_norm="",
                         search_shards=1, reference_shards=1, benchmark_options="")
for step, extra in ((similarity_index_step, {{}}), (similarity_search_step, {{"task": 0}}), (similarity_score_step, {{}})):
    try:
        step(run, {str(tmp_path / "out")!r}, model="torchscript", **extra)
    except FeatureError as exc:
        assert "no shards" in str(exc), exc
    else:
        raise AssertionError(f"{{step.__name__}} ran without features")
"""
    assert _torch_loaded(code) == []
