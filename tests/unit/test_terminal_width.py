"""What a command prints fits a 100-column terminal (issue 57): the MLflow link lines (120-184
characters before), the embed step's start-up line (108-112), ``compare --runs`` (up to 120). Each is
made by the very function the command prints with, from realistic long names; a URL, a path or a
command alone on its line may be longer (it cannot be wrapped and stay usable), nothing else."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from vsbench.io.terminal import WIDTH, command, labelled, too_wide, wrap, wrap_lines

RUN_ID = "0c2e5a1f9d8b4e7fa3c6b2d1e0f98765"
LONG_LABEL = 'disc · efficientnet_lite0 {"weights":"random"} · PCAW64,L2norm,Flat · 1.00[0,2]'


def test_the_helpers_wrap_at_words_and_never_split_one() -> None:
    url = "http://mlflow.mlflow.svc.cluster.local:5000/#/experiments/123456789/runs?viewStateShareKey=" + "x" * 60
    assert labelled("run page:", url) == ["  run page:", f"    {url}"]  # alone on its line, whole
    assert labelled("store:", "http://127.0.0.1:5000") == ["  store: http://127.0.0.1:5000"]
    lines = wrap("word " * 60, "  ", "    ")
    assert all(len(line) <= WIDTH for line in lines) and " ".join(lines).split() == ["word"] * 60
    assert wrap_lines(f"short\n  {'a ' * 70}{url}").splitlines()[-1] == f"    {url}"
    assert too_wide([url, f"  {url}", "x" * 100]) == [] and too_wide([f"label {url}"]) == [f"label {url}"]
    args = ["/opt/a folder/bin/mlflow", "ui", "--backend-store-uri", "sqlite:///" + "d/" * 60 + "m.db"]
    lines = command(args)
    assert len(lines) > 1 and too_wide(lines) == [] and all(line.endswith(" \\") for line in lines[:-1])
    assert shlex.split(" ".join(line.removesuffix(" \\") for line in lines)) == args
    assert command(["vsbench", "track", "upload", "b.json"]) == ["    vsbench track upload b.json"]


def _outcome(uri: str, benchmarks: tuple[str, ...] = ("disc", "patch_pairs")):
    from vsbench.tracking.command import Outcome

    return Outcome(run_id=RUN_ID, experiment_id="817263540918273645", tracking_uri=uri,
                   bundle=Path("/tmp/out/vsbench-run.json"), evaluations=18, benchmarks=benchmarks)


@pytest.mark.parametrize("uri", ["http://127.0.0.1:5000", "http://mlflow.mlflow.svc.cluster.local:5000",
                                 "sqlite:////home/someone/.local/share/vsbench/a-long-folder-name/mlflow.db"])
def test_the_printed_links_fit_and_each_url_stands_alone(uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from vsbench.tracking.command import describe

    monkeypatch.delenv("VSBENCH_MLFLOW_UI", raising=False)
    text = describe(_outcome(uri))
    assert too_wide(text) == [], text
    urls = [line for line in text.splitlines() if "/#/experiments/" in line]
    # the run page, then a leaderboard and an evaluations view per benchmark
    assert len(urls) == 5 and all(line.startswith("    http") and len(line.split()) == 1 for line in urls), text
    if not uri.startswith("http"):  # the command to serve it, continued with \ where long: one command
        serve = text.split("serve the store first:\n", 1)[1]
        assert shlex.split(serve.replace(" \\\n", " ")) == [str(Path(sys.executable).with_name("mlflow")), "ui",
                                                             "--backend-store-uri", uri]


def test_a_store_that_is_down_is_said_within_the_width() -> None:
    from vsbench.tracking.command import Outcome, describe

    down = Outcome(tracking_uri="http://mlflow.mlflow.svc.cluster.local:5000",
                   error="no answer within 30 s (VSBENCH_TRACKING_TIMEOUT); ConnectionError: " + "refused " * 20,
                   bundle=Path("/data/runs/2026-12-06/disc-efficientnet_lite0/out/vsbench-run.json"))
    text = describe(down, kept=Path("/data/runs/2026-12-06/disc-efficientnet_lite0/out/metrics.json"))
    assert too_wide(text) == [], text
    assert text.splitlines()[-1] == f"    vsbench track upload {down.bundle}"


def test_the_start_up_line_fits() -> None:
    from vsbench.runtime.throughput import startup_line

    text = startup_line("references.shard-12-of-16", 1_000_000, 12.3, 1234.5)
    assert too_wide(text) == [] and len(text.splitlines()) == 2, text
    assert " ".join(text.split()) == ("[vsbench] references.shard-12-of-16: 1,000,000 images, start-up 12.3 s "
                                      "(model, workers, first batch), then 1,234 images/s")


def test_the_tracking_outage_line_fits(capsys: pytest.CaptureFixture[str]) -> None:
    from vsbench.tracking.runs import Tracker

    Tracker("r", object())._go_offline("open child run abid-score: MlflowException: " + "API request failed " * 12)
    err = capsys.readouterr().err
    assert too_wide(err) == [] and err.startswith("[vsbench] MLflow tracking unavailable"), err


def test_compare_runs_fits() -> None:
    from vsbench.reporting.pairs import MetricPair, RunPair, render_pair
    from vsbench.stats.compare import Difference

    test = ("paired bootstrap of the difference (10000 resamples, seed 0; each run ranked by its own scores); "
            "exact McNemar test on queries: 12 right only in the first, 30 only in the second")
    rows = [MetricPair(metric, True, 0.8123, 0.8456, (0.7712, 0.8531), (0.8011, 0.8899),
                       Difference(metric, 0.8123, 0.8456, 0.0333, 0.0121, 0.0551, 0.0021, True, test))
            for metric in ("uap", "accuracy_at_1", "recall_at_p90")]
    rows.append(MetricPair("mean_pr_ap", True, 0.5, 0.6, (0.4, 0.6), (0.5, 0.7), None,
                           note="no unit files in the first run (logged before issue 45): unpaired, no test"))
    pair = RunPair(RUN_ID, RUN_ID[::-1], LONG_LABEL, LONG_LABEL.replace("random", "imagenet"), rows,
                   notes=["the runs scored different units (1,000 and 998 queries): compared unpaired, each "
                          "interval from its own run's bootstrap, the difference's from both together"])
    text = render_pair(pair)
    assert too_wide(text) == [], text
    assert f"({RUN_ID})" in text and "+0.0333 [+0.0121, +0.0551]" in " ".join(text.split())


def test_compare_runs_names_each_run_as_mlflow_does() -> None:
    """``compare --runs``'s "first:"/"second:" lines name an evaluation's model as its run name in
    MLflow does (``resnet34-random``), never the options' JSON (issue 57)."""
    from types import SimpleNamespace

    from vsbench.reporting.pairs import _label

    tags = {"vsbench.step": "evaluation", "vsbench.benchmark": "disc", "vsbench.model": "resnet34",
            "vsbench.model_options": '{"weights":"random"}', "vsbench.variant": "Flat · none"}
    run = SimpleNamespace(info=SimpleNamespace(run_id="r1", start_time=0, experiment_id="1", run_name="x"),
                          data=SimpleNamespace(tags=tags, params={}, metrics={}))
    assert _label(run) == "disc · resnet34-random · Flat · none"
