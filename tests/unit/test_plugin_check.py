"""A plugin author's page (issue 39, item 5): docs/plugins.md holds the example plugin's files word
for word; ``vsbench benchmarks --check PLUGIN`` passes the example and vsbench's own benchmarks and
lists every problem of a broken plugin one a line (exit 2); registration refuses a spec field of the
wrong type (``tasks`` as a str) in one line naming the plugin and the fix; a per-query CSV is named,
not printed. Every case runs the ``vsbench`` command, with plugins installed as a user installs them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.example_plugin import EXAMPLE, environment, fake_plugin, install_example_plugin, vsbench
from vsbench.benchmarks.registry import builtin_specs

ROOT = Path(__file__).resolve().parents[2]
PLUGINS_DOC = ROOT / "docs" / "plugins.md"
FILE_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```\w+\n(.*?)```\n", re.DOTALL)


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example_plugin(tmp_path_factory.mktemp("example-plugin"))


def test_the_docs_worked_example_is_the_example_plugins_files_word_for_word() -> None:
    blocks = dict(FILE_BLOCK.findall(PLUGINS_DOC.read_text()))
    example_files = {str(path.relative_to(ROOT)) for path in (EXAMPLE / "src").rglob("*.py")}
    assert set(blocks) == example_files | {str((EXAMPLE / "pyproject.toml").relative_to(ROOT))}
    for path, text in blocks.items():
        assert text == (ROOT / path).read_text(), f"docs/plugins.md's copy of {path} differs from the file: copy it again"


def test_the_plugin_page_is_linked_from_the_readme_and_the_architecture_page() -> None:
    assert "(docs/plugins.md)" in (ROOT / "README.md").read_text()
    assert "(plugins.md)" in (ROOT / "docs" / "architecture.md").read_text()


def test_check_passes_the_installed_example_plugin_by_entry_point_name(plugin_site: Path) -> None:
    env = environment(plugin_site)
    benchmark = vsbench(env, "benchmarks", "--check", "colour_match")
    assert benchmark.returncode == 0 and benchmark.stderr == "", benchmark.stderr
    assert benchmark.stdout.startswith("OK benchmark colour_match (entry point colour_match = vsbench_example:SPEC "
                                       "(vsbench-example-plugin)): metrics top1_accuracy, mean_rank; lower is better: "
                                       "mean_rank"), benchmark.stdout
    model = vsbench(env, "benchmarks", "--check", "mean_colour")
    assert model.returncode == 0 and model.stderr == "", model.stderr
    assert model.stdout.startswith("OK model mean_colour (entry point mean_colour = vsbench_example.mean_colour"), \
        model.stdout
    assert "dim 6, input 32x32" in model.stdout and "mean (0.0, 0.0, 0.0), std (1.0, 1.0, 1.0)" in model.stdout


def test_check_run_runs_the_installed_plugin_end_to_end_without_the_checkout(plugin_site: Path, tmp_path: Path) -> None:
    """docs/plugins.md's test command for a plugin's own environment: no tests/ folder, no pytest."""
    env = environment(plugin_site)
    done = subprocess.run([sys.executable, "-m", "vsbench", "benchmarks", "--check", "colour_match", "--run"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.splitlines()[-1].startswith("OK trial colour_match: generated data (seed 3)"), done.stdout
    alone = vsbench(env, "benchmarks", "--run")
    assert alone.returncode == 2 and alone.stderr.startswith("error: --run goes with --check NAME")


def test_check_takes_a_reference_before_the_plugin_is_installed() -> None:
    env = environment(EXAMPLE / "src")  # importable, but no entry point: not installed
    for reference, line in (("vsbench_example:SPEC", "OK benchmark colour_match (vsbench_example:SPEC)"),
                            ("vsbench_example.mean_colour", "OK model mean_colour (vsbench_example.mean_colour)")):
        checked = vsbench(env, "benchmarks", "--check", reference)
        assert checked.returncode == 0 and checked.stdout.startswith(line), checked.stdout + checked.stderr


def test_check_passes_vsbenchs_own_benchmarks_and_refuses_an_unknown_name() -> None:
    env = environment()
    for spec in builtin_specs():
        checked = vsbench(env, "benchmarks", "--check", spec.spellings[-1])
        assert checked.returncode == 0, checked.stderr
        assert checked.stdout.startswith(f"OK benchmark {spec.name} (vsbench's {spec.name})")
    unknown = vsbench(env, "benchmarks", "--check", "nosuch")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr.startswith("error: --check 'nosuch': no entry point of vsbench.benchmarks or vsbench.models")
    assert len(unknown.stderr.splitlines()) == 1


STR_TASKS = ("from vsbench.benchmarks.registry import BenchmarkSpec\n"
             "SPEC = BenchmarkSpec(name='mine', title='x', loader='broken_plugin:load', tasks='retrieval',\n"
             "                     metrics=(), lower_is_better=['mean_rank'])\n")


def test_registration_refuses_fields_of_the_wrong_type_in_one_line_naming_the_plugin_and_the_fix(
        tmp_path: Path) -> None:
    env = environment(fake_plugin(tmp_path / "site", "vsbench.benchmarks", "mine", "broken_plugin:SPEC", STR_TASKS))
    for command in (["benchmarks"], ["synth", "similarity", "disc", "--out", str(tmp_path / "data")]):
        failed = vsbench(env, *command)
        assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr
        assert failed.stderr == (
            "error: benchmark plugin 'mine' (broken_plugin:SPEC): tasks is a str, not a tuple of str: write "
            "tasks=('retrieval',) (the comma makes a one-item tuple); lower_is_better is a list, not a tuple of str: "
            "write lower_is_better=(...); fix it in broken-plugin (vsbench benchmarks --check mine lists each)\n")
    checked = vsbench(env, "benchmarks", "--check", "mine")
    assert checked.returncode == 2 and checked.stdout == ""
    assert checked.stderr.splitlines() == [
        "error: benchmark mine (entry point mine = broken_plugin:SPEC (broken-plugin)): tasks is a str, not a tuple of str: "
        "write tasks=('retrieval',) (the comma makes a one-item tuple)",
        "error: benchmark mine (entry point mine = broken_plugin:SPEC (broken-plugin)): lower_is_better is a list, not a "
        "tuple of str: write lower_is_better=(...)"]


BAD_DECLARATIONS = '''
from pathlib import Path
from vsbench.benchmarks.base import EvalResult, ImageSet
from vsbench.benchmarks.registry import BenchmarkSpec

SPEC = BenchmarkSpec(name="mine", title="x", loader="broken_plugin:load", generator="broken_plugin:generate",
                     aliases=("pairs",), metrics=("top1",), lower_is_better=("rank",))


class Mine:
    name = "mine"

    def image_sets(self) -> list[ImageSet]:
        return []


def load(root: Path, **options) -> Mine:
    return Mine()


def generate(out: Path) -> dict:
    return {}
'''


def test_check_lists_every_problem_of_a_benchmark_one_a_line(tmp_path: Path) -> None:
    """The spec's fields are well typed, so it registers; what it declares is wrong in five ways."""
    env = environment(fake_plugin(tmp_path / "site", "vsbench.benchmarks", "mine", "broken_plugin:SPEC",
                                  BAD_DECLARATIONS))
    checked = vsbench(env, "benchmarks", "--check", "mine")
    assert checked.returncode == 2 and checked.stdout == "" and "Traceback" not in checked.stderr
    prefix = "error: benchmark mine (entry point mine = broken_plugin:SPEC (broken-plugin)): "
    lines = checked.stderr.splitlines()
    assert all(line.startswith(prefix) for line in lines), lines
    assert [line.removeprefix(prefix) for line in lines] == [
        "lower_is_better names 'rank', which metrics does not list: add it to metrics or fix its spelling "
        "(else compare and the regression check rank it higher-is-better)",
        "Mine.image_sets returns list[ImageSet], not dict[str, ImageSet]: fix the annotation or what it returns",
        "Mine has no method evaluate(): add it (docs/plugins.md, 'The adapter')",
        "generator broken_plugin:generate cannot be called as generate(out, seed=0): got an unexpected keyword "
        "argument 'seed'",
        "spelling 'pairs' is taken by vsbench's 'patch_pairs': rename it"]


BAD_MODELS = '''
import torch
from torch import nn
from vsbench.models.registry import Embedder, Preprocessing, register_model

SQUARE = Preprocessing(input_size=8, resize_size=8, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))


class Means(nn.Module):
    def forward(self, images):
        return images.mean(dim=(2, 3))  # 3 values an image


@register_model("wrong_dim")
def wrong_dim() -> Embedder:
    return Embedder("wrong_dim", Means(), 5, SQUARE)


@register_model("not_an_embedder")
def not_an_embedder() -> nn.Module:
    return Means()


@register_model("good")
def good(size: int = 8) -> Embedder:
    return Embedder("good", Means(), 3, SQUARE)
'''


def test_check_lists_every_problem_of_a_model_plugin_one_a_line(tmp_path: Path) -> None:
    env = environment(fake_plugin(tmp_path / "site", "vsbench.models", "mine", "broken_plugin", BAD_MODELS))
    checked = vsbench(env, "benchmarks", "--check", "mine")
    assert checked.returncode == 2 and checked.stdout == "" and "Traceback" not in checked.stderr
    where = " (entry point mine = broken_plugin (broken-plugin))"
    assert checked.stderr.splitlines() == [
        "error: model 'not_an_embedder': the builder returns Module, not Embedder: return "
        f"vsbench.models.registry.Embedder(name, network, dim, preprocessing){where}",
        "error: model 'wrong_dim': two 8x8 images gave descriptors of shape (2, 3), not (2, 5): dim must be the "
        f"width the network returns{where}"]


@pytest.mark.slow
def test_a_per_query_csv_is_named_and_the_metrics_printed_instead(plugin_site: Path, tmp_path: Path) -> None:
    """24 images, a row each in the benchmark's CSV: more than 20, so the terminal gets the records
    and the CSV's path; 18 rows (the generator's default) are printed whole."""
    sys.path.insert(0, str(plugin_site))
    try:
        from vsbench_example.colour_match import generate_colour_match
    finally:
        sys.path.remove(str(plugin_site))
    env = environment(plugin_site)
    options = json.dumps({"per_query": True})
    for colours, printed in ((8, False), (6, True)):
        data, out = tmp_path / f"data{colours}", tmp_path / f"run{colours}"
        generate_colour_match(data, seed=0, colours=colours)
        ran = vsbench(env, "similarity", "run", "--benchmark", "colour_match", "--root", str(data), "--out", str(out),
                      "--model", "mean_colour", "--no-track", "--benchmark-options", options)
        assert ran.returncode == 0, ran.stderr[-3000:]
        table = out / "colour_match_ranks.csv"
        assert len(table.read_text().splitlines()) == colours * 3 + 1
        record = json.loads((out / "metrics.json").read_text())["records"][0]
        rows = [line for line in ran.stdout.splitlines() if line.startswith("c0")]
        if printed:
            assert table.read_text().rstrip() in ran.stdout and len(rows) == colours * 3
            assert "table:" not in ran.stdout
        else:
            assert rows == [] and "image,colour,first_hit_rank" not in ran.stdout
            expected = (f"distance,top1_accuracy,mean_rank\nl2,{record['top1_accuracy']!r},{record['mean_rank']!r}\n"
                        f"table: {table} (24 rows, not printed: more than 20)\n")
            assert expected in ran.stdout
