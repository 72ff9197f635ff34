"""Every registered benchmark, built-in or from a plugin, passes the same tests: its spellings
resolve to it, its generator writes a layout its loader reads, and a whole run over random
features scores every headline metric it declares, with the same records sharded and unsharded.
A new benchmark is tested here by registering it, without writing a test."""

from __future__ import annotations

from pathlib import Path

import pytest

from vsbench.benchmarks import registry
from vsbench.benchmarks.registry import BenchmarkSpec
from vsbench.runspec.run import SimilarityRun
from vsbench.steps.similarity import run_inline
from vsbench.steps.trial import random_features, trial_problems

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
    random_features(spec, root, options, path)


@pytest.mark.slow
@pytest.mark.parametrize("name", GENERATED)
def test_a_generated_benchmark_runs_end_to_end_and_shards_change_no_number(tmp_path: Path, name: str) -> None:
    """The trial run a plugin's author runs as ``vsbench benchmarks --check NAME --run``: generated data,
    random features, every declared metric reported, finite, the same records with shards, metrics.json
    and the unit files as the records say."""
    assert trial_problems(name, tmp_path) == []


def test_the_trial_run_names_a_declared_metric_the_records_lack(tmp_path: Path, monkeypatch) -> None:
    """The trial can fail: a spec declaring a metric its records never report is one sentence naming it."""
    spec = SPECS["disc"]
    lying = BenchmarkSpec(**{**{f: getattr(spec, f) for f in ("name", "title", "loader", "generator", "aliases",
                                                                  "tasks", "lower_is_better", "datasets")},
                             "metrics": (*spec.metrics, "no_such_metric")})
    monkeypatch.setattr(registry, "get", lambda name: lying)
    problems = trial_problems(spec.name, tmp_path)
    assert problems == [f"{spec.name}: its records lack declared metrics no_such_metric (BenchmarkSpec.metrics)"]


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
