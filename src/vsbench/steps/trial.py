"""A benchmark's trial run: what ``vsbench benchmarks --check NAME --run`` adds to the check from
declarations (``vsbench.benchmarks.check``).

The benchmark's own generator writes a small set (seed 3), every image it asks for gets a seeded
random feature (rows repeated, so there are ties), and the similarity pipeline runs inline over
them twice: unsharded, and with 2 embed, search and reference shards. Each problem found is one
sentence. This is what ``tests/unit/test_registry.py`` asserts for every registered benchmark,
shipped in the package so that a plugin's author runs it from the plugin's own environment, with no
checkout of vsbench and no pytest: nothing is downloaded, nothing is tracked in MLflow.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.benchmarks import registry
from vsbench.benchmarks.registry import BenchmarkSpec
from vsbench.io.features import FeatureSet, save_features
from vsbench.runspec.run import SimilarityRun

SEED = 3
SHARDS = {"num_shards": 2, "search_shards": 2, "reference_shards": 2}


def random_features(spec: BenchmarkSpec, root: Path, options: dict[str, Any], path: Path) -> None:
    """A seeded random 8-d feature for every image the benchmark embeds, every fourth row a copy of
    the one before it (ties, which a scorer must order as the original does)."""
    bench = spec.load(root, **options)
    ids = sorted({i for images in bench.image_sets().values() for i in images.ids})
    values = np.random.default_rng(11).standard_normal((len(ids), 8)).astype(np.float32)
    values[1::4] = values[0::4][: len(values[1::4])]
    save_features(path, FeatureSet(np.asarray(ids), values))


def trial_problems(name: str, work: Path) -> list[str]:
    """Generate ``name``'s data into ``work``, run it over random features unsharded and sharded, and
    say what is wrong: no generator, records missing a declared metric, an infinite value, sharded
    numbers that differ, ``metrics.json`` not holding the records, a unit file named but absent.
    An exception from the plugin's own code propagates (the caller reports it in one line)."""
    from vsbench.retrieval.engine import Engine
    from vsbench.steps.similarity import run_inline

    spec = registry.get(name)
    if not spec.generator:
        return [f"{spec.name} has no generator: the trial run needs one (BenchmarkSpec(generator="
                "'module:function')), or run it on your data with vsbench similarity run"]
    summary = registry.generate(spec.name, work / "data", seed=SEED)
    root, options = Path(summary.get("root", work / "data")), summary.get("benchmark_options", {})
    features = work / "features.npz"
    random_features(spec, root, options, features)
    run = SimilarityRun(benchmark=spec.name, root=str(root), benchmark_options=options, model="precomputed",
                        model_options={"path": str(features)}, score_norm="")
    records = run_inline(run, work / "one", progress=False).manifest["records"]
    if not records:
        return [f"{spec.name}: evaluate/score returned no records"]
    problems: list[str] = []
    keys = {key for record in records for key in record}
    missing = [metric for metric in spec.metrics if metric not in keys]
    if missing:
        problems.append(f"{spec.name}: its records lack declared metrics {', '.join(missing)} (BenchmarkSpec.metrics)")
    for record in records:
        for key, value in record.items():
            if isinstance(value, float) and math.isinf(value):
                problems.append(f"{spec.name}: metric {key} is infinite on the generated data")
    sharded = run_inline(run.model_copy(update=SHARDS), work / "sharded", progress=False).manifest["records"]
    if sharded != records:
        problems.append(f"{spec.name}: 2 embed, search and reference shards change the records "
                        f"({sharded} against {records})")
    written = json.loads((work / "one" / "metrics.json").read_text())
    if written.get("benchmark") != spec.name or written.get("records") != records:
        problems.append(f"{spec.name}: metrics.json does not hold the run's records")
    units = written.get("units", [])
    if len(units) != len(records):
        problems.append(f"{spec.name}: metrics.json lists {len(units)} unit entries for {len(records)} records")
    for record, entry in zip(records, units):
        if entry is None:
            continue
        if not (work / "one" / entry["file"]).is_file():
            problems.append(f"{spec.name}: unit file {entry['file']} is named but not written")
        absent = [m for m in entry["metrics"] if m not in record or f"{m}_ci95_low" not in record]
        if absent:
            problems.append(f"{spec.name}: units recompute {', '.join(absent)}, missing from the record or "
                            "without its interval")
    try:
        Engine(run, work / "one")
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the other problems still print
        problems.append(f"{spec.name}: its run folder cannot be opened again ({type(exc).__name__}: {exc})")
    return problems
