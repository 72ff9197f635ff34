"""The readers of intervals and unit files (issue 45) against a real ``mlflow server``: the leaderboard
reads ``<metric>_ci95_low/_high`` as its metric's interval and tests each model against the best,
``vsbench compare --runs`` compares two runs paired or unpaired, the report shows both, and the
nightly check fails only a drop beyond chance."""

from __future__ import annotations

import json
import math
import re
import tempfile
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from vsbench.io.terminal import too_wide
from vsbench.reporting.html_report import write_report
from vsbench.reporting.leaderboard import leaderboard, mark_indistinguishable, render_leaderboard
from vsbench.reporting.pairs import compare_runs
from vsbench.reporting.regression import ARTIFACT, REGRESSION_TAG, TEST_TAG, check_regression
from vsbench.reporting.runs import collect_runs
from vsbench.reporting.significance import UnitsReader
from vsbench.stats.compare import interval_fields, intervals
from vsbench.stats.resample import Resampling
from vsbench.stats.units import Units
from vsbench.tracking.evaluations import Embedder, evaluations_of, log_evaluations
from vsbench.tracking.provenance import DATA_DIGEST_TAG
from vsbench.tracking.runs import child_run, open_parent_run
from vsbench.tracking.units import UNITS_TAG, log_unit_files

from .mlflow_server import record_pipeline_run

pytestmark = pytest.mark.integration

N = 400
DIGEST = "cd" * 32
ACCURACY = "accuracy_at_1"
NIGHTLY = "vsbench-nightly"


@pytest.fixture(autouse=True)
def _few_resamples(monkeypatch):
    monkeypatch.setenv("VSBENCH_RESAMPLES", "400")


def _outcomes(right: int, n: int = N) -> np.ndarray:
    out = np.zeros(n)
    out[:right] = 1
    return out


def _flip(outcomes: np.ndarray, to_wrong: int, to_right: int) -> np.ndarray:
    """Some right units wrong and some wrong ones right (the first of each)."""
    out = outcomes.copy()
    right, wrong = np.flatnonzero(out == 1), np.flatnonzero(out == 0)
    out[right[:to_wrong]] = 0
    out[wrong[:to_right]] = 1
    return out


def _units(correct: np.ndarray, prefix: str = "q", metric: str = ACCURACY, benchmark: str = "disc") -> Units:
    return Units("query", benchmark, np.array([f"{prefix}{i}" for i in range(len(correct))]),
                 {"correct": np.asarray(correct, dtype=np.float64)}, {metric: {"statistic": "ratio", "num": "correct"}})


def _log_units(client: MlflowClient, run_id: str, units: Units) -> None:
    folder = Path(tempfile.mkdtemp())
    sha = units.write(folder / f"{units.benchmark}.parquet")
    log_unit_files(client, run_id, {str(folder / f"{units.benchmark}.parquet"): sha})


def _evaluate(client: MlflowClient, parent: str, model: str, units: Units | None, *, digest: str = DIGEST,
              value: float | None = None) -> str:
    """One evaluation run as the runner logs it: the metric, its interval fields and its unit file."""
    record: dict = {"codec": "Flat"}
    if units is not None:
        record[ACCURACY] = float(units.values("correct").mean())
        record.update(interval_fields(intervals(units, Resampling(400, 0))))
    else:
        record[ACCURACY] = value
    evaluations = evaluations_of("disc", [record], Embedder(model=model), run_params={"codecs": "Flat", "k": 10},
                                 data_digest=digest)
    [run_id] = log_evaluations(client, parent, evaluations, tags={DATA_DIGEST_TAG: digest})
    if units is not None:
        _log_units(client, run_id, units)
    return run_id


@pytest.fixture
def board(mlflow_tracking, fresh_experiment) -> dict:
    """One parent with four models on disc: best (70%), close (3 units flipped from best: the same
    units), far (35%), other_units (69%, other query ids: unpaired); plus a model without unit files."""
    client = MlflowClient()
    parent = open_parent_run(fresh_experiment, "kfp-board", "vsbench-similarity", {})
    best = _outcomes(280)
    ids = {
        "best": _evaluate(client, parent, "best", _units(best)),
        "close": _evaluate(client, parent, "close", _units(_flip(best, 3, 0))),
        "far": _evaluate(client, parent, "far", _units(_outcomes(140))),
        "other_units": _evaluate(client, parent, "other_units", _units(_outcomes(276), prefix="r")),
        "plain": _evaluate(client, parent, "plain", None, value=0.5),
    }
    client.set_terminated(parent, "FINISHED")
    return {"experiment": fresh_experiment, "client": client, **ids}


def test_leaderboard_reads_intervals_and_marks_the_indistinguishable(board):
    records = collect_runs(board["experiment"])
    frame = leaderboard(records)
    assert set(frame.metric) == {ACCURACY}  # the _ci95 bounds are no rows of their own
    rows = frame.set_index("model")
    assert rows.loc["best · Flat", "best"] and rows.loc["best · Flat", "low"] < 0.7 < rows.loc["best · Flat", "high"]
    assert math.isnan(rows.loc["plain · Flat", "low"]) and rows.loc["plain · Flat", "units_run_id"] == ""

    reader = UnitsReader(board["client"])
    rows = mark_indistinguishable(frame, reader).set_index("model")
    assert rows.loc["close · Flat", "indistinguishable"] and rows.loc["close · Flat", "p_value"] >= 0.05
    assert rows.loc["close · Flat", "test"].startswith("exact McNemar test")  # accuracy: 0/1 per unit
    assert rows.loc["close · Flat", "diff_low"] <= rows.loc["close · Flat", "diff_high"] <= 0
    # far: its interval excludes 0 and says so from its own paired test (no "intervals disjoint" shortcut)
    assert not rows.loc["far · Flat", "indistinguishable"] and rows.loc["far · Flat", "test"].startswith("exact McNemar")
    assert rows.loc["far · Flat", "diff_high"] < 0
    assert rows.loc["other_units · Flat", "test"].startswith("unpaired")
    assert rows.loc["other_units · Flat", "indistinguishable"]
    assert rows.loc["plain · Flat", "test"] == "" and not rows.loc["plain · Flat", "indistinguishable"]
    # Only the cells that needed a test read unit files: best, close, far, other_units (plain has none), each once.
    assert reader.downloads == 4 and not reader.refused

    marked = mark_indistinguishable(frame, reader)
    assert reader.downloads == 4  # cached
    default = render_leaderboard(marked)  # within 100 columns: the intervals and tests with --details
    assert all(len(line) <= 100 for line in default.splitlines()) and "0.6925≈" in default, default
    text = render_leaderboard(marked, width=80, details=True)
    print(text)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    close_line = next(line for line in text.splitlines() if line.strip().startswith("close"))
    assert re.search(r"0\.6925 \[0\.\d+, 0\.\d+\]≈\s+p=\d\.\d{3} paired$", close_line), close_line
    assert re.search(r"best · Flat\s+0\.7 \[0\.\d+, 0\.\d+\]\*$", text, re.M)
    assert "≈ not distinguishable from the best" in text.replace("\n", " ")


def test_report_shows_intervals_marks_and_the_tests(board, tmp_path):
    records = collect_runs(board["experiment"])
    reader = UnitsReader(board["client"])
    pair = compare_runs(reader, board["best"], board["close"])
    page = write_report(records, tmp_path / "r.html", title="t", reader=reader, pairs=[pair]).read_text()
    assert re.search(r'<td class="same" title="vs the best: p=[\d.]+, exact McNemar[^"]*">'
                     r'<a [^>]*>0\.6925 ≈</a> <span class="ci">\[0\.\d+, 0\.\d+\]</span></td>', page)
    assert re.search(r'<td class="best"><a [^>]*>0\.7 \*</a> <span class="ci">\[', page)
    table = re.search(r'<table class="versus-best">.*?</table>', page).group(0)
    assert table.count("<tr data-metric") == 3 and "intervals disjoint" not in table and "unpaired" in table
    pairs = re.search(r'<table class="pair">.*?</table>', page).group(0)
    assert "exact McNemar test" in pairs and "3 / 0" in pairs  # McNemar: 3 units right only in best


def test_compare_two_runs_paired_unpaired_and_as_json(board, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the compare sheet's default folder is ./compare-<A>-<B>/
    from vsbench.cli.app import app

    runner = CliRunner()
    result = runner.invoke(app, ["compare", "--runs", board["best"], board["close"], "--report",
                                 str(tmp_path / "pair.html")])
    assert result.exit_code == 0, result.output
    print(result.output)
    assert too_wide(result.output) == []  # within 100 columns, wrapped at words (issue 57)
    said = " ".join(result.output.split())
    assert "second - first -0.0075 [" in said
    assert "exact McNemar test on every unit: 3 right only in the first, 0 only in the second" in said
    # the verdict, in words, from the interval printed above it ([-0.0175, +0] holds 0)
    assert "verdict indistinguishable (≈): the 95% interval of the difference holds 0" in said
    assert "unpaired" not in result.output
    page = (tmp_path / "pair.html").read_text()
    assert 'class="pair"' in page
    # A page of two runs says which two (issue 57: it said "0 runs" above an empty Runs table and the
    # leaderboard's legend, of which it has none).
    assert "1 comparison of two runs: " in page and board["best"] in page and board["close"] in page
    assert '<table class="runs">' not in page and "0 runs" not in page and "highlighted" not in page

    # --runs alone writes no page into the current folder (the terminal and the compare sheet say it all).
    result = runner.invoke(app, ["compare", "--runs", board["best"], board["close"]])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "vsbench-report.html").exists() and "report:" not in result.output

    result = runner.invoke(app, ["compare", "--runs", board["best"], board["other_units"], "--json"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    [row] = found["metrics"]
    assert row["metric"] == ACCURACY and row["paired"] is False and row["test"].startswith("unpaired")
    assert math.isclose(row["difference"], 0.69 - 0.70) and row["ci_low"] < 0 < row["ci_high"]
    assert row["first_ci95"][0] < 0.7 < row["first_ci95"][1]
    assert found["notes"] == ["unpaired: the two runs scored different units; each run bootstrapped on its own"]

    result = runner.invoke(app, ["compare", "--runs", board["best"], board["plain"], "--json"])
    [row] = json.loads(result.stdout)["metrics"]
    assert "paired" not in row and row["note"].startswith("no unit files")

    # A unit file whose bytes are not those its tag names is refused, naming the run and the file: one
    # line, exit 2 (issue 54: compare of two named runs has nothing to fall back to).
    client = board["client"]
    named = json.loads(client.get_run(board["close"]).data.tags[UNITS_TAG])
    client.set_tag(board["close"], UNITS_TAG, json.dumps({k: "0" * 64 for k in named}))
    result = runner.invoke(app, ["compare", "--runs", board["best"], board["close"], "--json"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert result.output.startswith(f"error: run {board['close']}: unit file units/disc.parquet: its bytes")
    reader = UnitsReader(client)
    rows = mark_indistinguishable(leaderboard(collect_runs(board["experiment"])), reader).set_index("model")
    assert rows.loc["close · Flat", "test"] == "" and board["close"] in reader.refused  # no test, no crash


# --- the nightly check ------------------------------------------------------------------------------------


def _night(experiment: str, units: Units | None, *, digest: str = DIGEST, value: float | None = None,
           finished: bool = True) -> str:
    client = MlflowClient()
    parent = record_pipeline_run(experiment, NIGHTLY, {}, status=None)
    _evaluate(client, parent, "effnet", units, digest=digest, value=value)
    if finished:
        client.set_terminated(parent, "FINISHED")
    return parent


def _outcome(run_id: str) -> tuple[dict, dict]:
    run = MlflowClient().get_run(run_id)
    return run.data.tags, mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/{ARTIFACT}")


BASE = _outcomes(280)


def test_a_rerun_with_no_change_or_noise_only_raises_no_alarm(mlflow_tracking, fresh_experiment):
    exp = fresh_experiment
    _night(exp, _units(BASE))
    same = _night(exp, _units(BASE), finished=False)
    report = check_regression(exp, same, threshold=0.0, pipeline=NIGHTLY)
    assert report.passed and report.drops == [] and report.test == "threshold"  # nothing moved: no test
    MlflowClient().set_terminated(same, "FINISHED")

    # 6 units flipped to wrong, 2 to right: 1 point lower, beyond a 0.005 threshold but not beyond chance.
    noisy = _night(exp, _units(_flip(BASE, 6, 2)), finished=False)
    report = check_regression(exp, noisy, threshold=0.005, pipeline=NIGHTLY)
    assert report.passed and report.drops == [], report.drops
    [moved] = report.within_noise
    assert moved["paired"] and moved["p_value"] >= 0.05 and moved["ci_low"] < 0 < moved["ci_high"]
    assert moved["mcnemar"]["previous_only"] == 6 and moved["mcnemar"]["current_only"] == 2
    tags, saved = _outcome(noisy)
    assert tags[REGRESSION_TAG] == "passed" and "exact McNemar test" in tags[TEST_TAG]
    assert "not beyond chance" in tags["vsbench.regression.message"]
    assert saved["within_noise"][0]["metric"].endswith("__accuracy_at_1")
    # The same move without unit files fails, as it always did (the noisy night marked failed: no baseline).
    MlflowClient().set_terminated(noisy, "FAILED")
    plain = _night(exp, None, value=float(_flip(BASE, 6, 2).mean()), finished=False)
    assert not check_regression(exp, plain, threshold=0.005, pipeline=NIGHTLY).passed


def test_another_machines_rounding_is_no_regression(mlflow_tracking, fresh_experiment):
    """Per-query scores off by +-1e-3 either way (201 down, 199 up): the mean is lower, beyond a zero
    threshold, but the paired test sees no drop."""
    exp = fresh_experiment
    rng = np.random.default_rng(3)
    ap = rng.uniform(0.2, 0.9, N)
    signs = np.array([-1.0] * 201 + [1.0] * 199)
    rng.shuffle(signs)
    _night(exp, _units(ap))
    moved = _night(exp, _units(ap + 1e-3 * signs), finished=False)
    report = check_regression(exp, moved, threshold=0.0, pipeline=NIGHTLY)
    assert report.passed and len(report.within_noise) == 1 and report.within_noise[0]["p_value"] > 0.5


def test_a_real_drop_in_many_units_is_caught_with_its_p_value(mlflow_tracking, fresh_experiment):
    exp = fresh_experiment
    _night(exp, _units(BASE))
    bad = _night(exp, _units(_flip(BASE, 60, 0)), finished=False)  # 15 points lower

    report = check_regression(exp, bad, threshold=0.02, pipeline=NIGHTLY)

    [drop] = report.drops
    assert not report.passed and drop["paired"] and drop["p_value"] < 0.01 and drop["ci_high"] < 0
    assert drop["mcnemar"] == {"previous_only": 60, "current_only": 0, "p_value": pytest.approx(2 * 0.5 ** 60)}
    tags, saved = _outcome(bad)
    assert tags[REGRESSION_TAG] == "failed"
    assert re.search(r"__accuracy_at_1: exact McNemar test on every unit: 60 right only in the first, 0 only in "
                     r"the second, p=1\.73\de-18",
                     tags[TEST_TAG]), tags[TEST_TAG]
    assert re.search(r"0\.7 -> 0\.55, p<0\.001 paired", tags["vsbench.regression.message"])
    assert saved["drops"][0]["p_value"] == drop["p_value"]

    # Other data (another digest) is compared unpaired, even where the unit ids coincide.
    MlflowClient().set_terminated(bad, "FAILED")
    other = _night(exp, _units(_flip(BASE, 60, 0)), digest="ef" * 32, finished=False)
    [drop] = check_regression(exp, other, threshold=0.02, pipeline=NIGHTLY).drops
    assert not drop["paired"] and drop["test"].startswith("unpaired") and drop["p_value"] < 0.05


def test_abid_scores_are_tested_from_the_score_steps_unit_files(mlflow_tracking, fresh_experiment):
    exp = fresh_experiment
    client = MlflowClient()

    def abid_night(correct: np.ndarray, finished: bool = True) -> str:
        units = _units(correct, metric="counting_accuracy", benchmark="abid")
        fields = interval_fields(intervals(units, Resampling(400, 0)))
        parent = record_pipeline_run(exp, "vsbench-abid", {"counting_accuracy": float(correct.mean())}, status=None)
        with child_run(parent, "abid-score") as step:
            step.log_metrics({"counting_accuracy": float(correct.mean()), **fields})
            _log_units(client, step.run_id, units)
        if finished:
            client.set_terminated(parent, "FINISHED")
        return parent

    abid_night(BASE)
    noisy = abid_night(_flip(BASE, 6, 2), finished=False)
    report = check_regression(exp, noisy, threshold=0.005, pipeline="vsbench-abid")
    assert report.passed and report.within_noise[0]["metric"] == "counting_accuracy"
    client.set_terminated(noisy, "FINISHED")

    [record] = [r for r in collect_runs(exp) if r.run_id == noisy]
    assert record.units_run_id and "counting_accuracy_ci95_low" in record.metrics  # from its score step
    row = leaderboard([record]).iloc[0]
    assert row.metric == "counting_accuracy" and row.low < row.value < row.high

    bad = abid_night(_flip(BASE, 60, 0), finished=False)
    report = check_regression(exp, bad, threshold=0.02, pipeline="vsbench-abid")
    assert not report.passed and report.drops[0]["metric"] == "counting_accuracy" and report.drops[0]["p_value"] < 0.01
