"""Compile every pipeline to YAML (``vsbench compile --out DIR``) for upload to Kubeflow.

Compiled pipelines carry the cluster settings (``vsbench.platform.cluster``): GPU limits and node pools on
the train/embed/index steps, resources, secrets and config as environment variables, the data
volume, retries. ``load_pipeline`` without settings gives the plain pipeline kfp.local runs.
"""

from __future__ import annotations

import importlib
import tempfile
from collections.abc import Sequence
from pathlib import Path

from vsbench.platform.cluster import ClusterSettings

# name -> (module, factory taking ClusterSettings | None); one entry per pipeline in pipelines/.
PIPELINES: dict[str, tuple[str, str]] = {
    "abid": ("vsbench.pipelines.abid", "build_abid_pipeline"),
    "similarity": ("vsbench.pipelines.similarity", "build_similarity_pipeline"),
    "nightly": ("vsbench.pipelines.nightly", "build_nightly_pipeline"),
}


def load_pipeline(name: str, cluster: ClusterSettings | None = None, suite_path: Path | None = None):
    """The pipeline ``name`` built with ``cluster`` settings (and, for the nightly one, the suite)."""
    if name not in PIPELINES:
        raise ValueError(f"unknown pipeline {name!r}; choose from {sorted(PIPELINES)}")
    module, factory = PIPELINES[name]
    build = getattr(importlib.import_module(module), factory)
    if name == "nightly":
        from vsbench.runspec.suite import Suite

        return build(cluster, Suite.load(suite_path))
    return build(cluster)


def compile_all(out: Path, cluster: ClusterSettings | None = None, suite_path: Path | None = None,
                names: Sequence[str] | None = None) -> list[Path]:
    """Write ``<out>/<name>.yaml`` for each pipeline (or each of ``names``), atomically; returns the paths.

    kfp compiles into a private scratch folder; the YAML then goes through :func:`atomic_write_bytes`,
    which gives it the mode a plain ``open()`` would (0644 under the usual umask), not the 0600 of a
    temporary file, so whoever uploads it (another user, a CI job) can read it."""
    from kfp import compiler

    from vsbench.io.storage import atomic_write_bytes

    cluster = cluster or ClusterSettings()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="vsbench-compile-") as scratch:
        for name in PIPELINES if names is None else names:
            compiled = Path(scratch) / f"{name}.yaml"
            compiler.Compiler().compile(load_pipeline(name, cluster, suite_path), package_path=str(compiled))
            target = out / f"{name}.yaml"
            atomic_write_bytes(target, compiled.read_bytes())
            written.append(target)
    return written
