"""Every registered benchmark, built-in or from a plugin, passes the same tests: its spellings
resolve to it, its generator writes a layout its loader reads, and a whole run over random
features scores every headline metric it declares, with the same records sharded and unsharded.
A new benchmark is tested here by registering it, without writing a test."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from vsbench.benchmarks import registry
from vsbench.benchmarks.registry import BenchmarkSpec
from vsbench.io.features import FeatureSet, save_features
from vsbench.retrieval.engine import Engine
from vsbench.runspec.run import SimilarityRun
from vsbench.steps.similarity import run_inline

SPECS = registry.specs()
GENERATED = [name for name, spec in SPECS.items() if spec.generator]


@pytest.mark.parametrize("name", list(SPECS))
def test_every_spelling_names_one_benchmark(name: str) -> None:
    spec = SPECS[name]
    assert registry.NAME_PATTERN.match(spec.name)
    for spelling in spec.spellings:
        assert registry.get(spelling) is spec and registry.canonical(spelling) == name
        assert SimilarityRun(benchmark=spelling, root=".").benchmark == name
    assert callable(registry._resolve(spec.loader))
    assert spec.title and spec.metrics, "a benchmark says what it is and which metrics it reports"


def test_spellings_never_clash_and_unknown_names_list_the_benchmarks() -> None:
    spellings = [s for spec in SPECS.values() for s in spec.spellings]
    assert len(spellings) == len(set(spellings))
    with pytest.raises(ValueError, match="unknown benchmark 'nope'.*disc"):
        registry.get("nope")


def _generated(name: str, out: Path) -> tuple[Path, dict]:
    summary = registry.generate(name, out, seed=3)
    return Path(summary.get("root", out)), summary.get("benchmark_options", {})


def _random_features(spec: BenchmarkSpec, root: Path, options: dict, path: Path) -> None:
    """A seeded random feature for every image the benchmark embeds (rows repeated: ties)."""
    bench = spec.load(root, **options)
    ids = sorted({i for images in bench.image_sets().values() for i in images.ids})
    values = np.random.default_rng(11).standard_normal((len(ids), 8)).astype(np.float32)
    values[1::4] = values[0::4][: len(values[1::4])]
    save_features(path, FeatureSet(np.asarray(ids), values))


@pytest.mark.slow
@pytest.mark.parametrize("name", GENERATED)
def test_a_generated_benchmark_runs_end_to_end_and_shards_change_no_number(tmp_path: Path, name: str) -> None:
    spec = SPECS[name]
    root, options = _generated(name, tmp_path / "data")
    features = tmp_path / "features.npz"
    _random_features(spec, root, options, features)
    run = SimilarityRun(benchmark=name, root=str(root), benchmark_options=options, model="precomputed",
                        model_options={"path": str(features)}, score_norm="")
    records = run_inline(run, tmp_path / "one", progress=False).manifest["records"]
    assert records
    keys = {key for record in records for key in record}
    assert set(spec.metrics) <= keys, f"{name} declares metrics its records lack: {set(spec.metrics) - keys}"
    for record in records:
        for key, value in record.items():
            assert not (isinstance(value, float) and math.isinf(value)), (name, key)
    sharded = run.model_copy(update={"num_shards": 2, "search_shards": 2, "reference_shards": 2})
    assert run_inline(sharded, tmp_path / "sharded", progress=False).manifest["records"] == records
    written = json.loads((tmp_path / "one" / "metrics.json").read_text())
    assert {k: written[k] for k in ("benchmark", "records")} == {"benchmark": name, "records": records}
    assert len(written["units"]) == len(records)  # per record, its unit file, or None (no intervals)
    for record, entry in zip(records, written["units"]):
        if entry is not None:  # what the units recompute is in the record, with its interval
            assert (tmp_path / "one" / entry["file"]).is_file()
            assert all(m in record and f"{m}_ci95_low" in record for m in entry["metrics"]), (name, entry)
    assert Engine(run, tmp_path / "one").bench is not None


@pytest.mark.parametrize("name", GENERATED)
def test_synth_names_reach_the_generator(tmp_path: Path, name: str) -> None:
    """``vsbench synth similarity`` takes every spelling of a benchmark and its other datasets."""
    spec = SPECS[name]
    for spelling in spec.spellings[:2]:
        assert registry.dataset_names()[spelling] == (spec, "")
    for dataset in spec.datasets:
        assert registry.dataset_names()[dataset] == (spec, dataset)


def test_one_inline_run_reads_the_benchmark_and_opens_the_features_once(tmp_path: Path, monkeypatch) -> None:
    """The walk of one `similarity run` (issue 27): the native files are parsed once, each image
    set's embed shards are opened once (in place: no merged copy is written or read back), the
    search requests are built once."""
    import vsbench.retrieval.engine as engine_module
    import vsbench.retrieval.shards as shards_module

    root, options = _generated("disc", tmp_path / "data")
    features = tmp_path / "features.npz"
    _random_features(SPECS["disc"], root, options, features)
    calls = {"load_benchmark": 0, "search_requests": 0}
    opened: list[str] = []
    real_load, real_open = engine_module.load_benchmark, shards_module._open_shards

    def counting_load(*args, **kwargs):
        calls["load_benchmark"] += 1
        bench = real_load(*args, **kwargs)
        real_requests = type(bench).search_requests

        def counting_requests(self, *a, **k):
            calls["search_requests"] += 1
            return real_requests(self, *a, **k)

        monkeypatch.setattr(type(bench), "search_requests", counting_requests)
        return bench

    def counting_open(folder, set_name):
        opened.append(set_name)
        return real_open(folder, set_name)

    monkeypatch.setattr(engine_module, "load_benchmark", counting_load)
    monkeypatch.setattr(shards_module, "_open_shards", counting_open)
    run = SimilarityRun(benchmark="disc", root=str(root), model="precomputed", model_options={"path": str(features)},
                        codecs="Flat;PCA4,Flat", num_shards=2, search_shards=2, reference_shards=2)
    run_inline(run, tmp_path / "run", progress=False)
    assert calls == {"load_benchmark": 1, "search_requests": 1}
    assert sorted(opened) == sorted(set(opened)) and set(opened) == {"query", "reference", "train"}
    assert not list((tmp_path / "run" / "features").glob("reference.npz"))  # no merged gallery file
