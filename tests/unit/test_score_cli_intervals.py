"""``vsbench score abid-*`` print each headline number with its 95% interval, write the per-question
outcomes beside the metrics JSON (named in it) and add the interval fields; other benchmarks say in
one line that they have no intervals here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vsbench.cli.score import print_record, score_app
from vsbench.stats.statistics import evaluate
from vsbench.stats.units import read_units

runner = CliRunner()
NUMBER_AND_INTERVAL = r"\d\.\d{4} \[\d\.\d{4}, \d\.\d{4}\]"


def _run(*args: str | Path, env: dict[str, str] | None = None):
    return runner.invoke(score_app, [str(a) for a in args], env=env)


def _counting_files(tmp_path: Path, n: int = 120) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 6, n)
    gt = tmp_path / "counting_val.json"
    gt.write_text(json.dumps([[4 * i, int(t)] for i, t in enumerate(truth)]))
    pred = tmp_path / "counting_result.txt"
    pred.write_text("".join(f"{max(0, int(t) + int(rng.choice([-1, 0, 0, 1])))}\n" for t in truth))
    return pred, gt


def test_counting_prints_intervals_and_writes_the_unit_file(tmp_path: Path) -> None:
    pred, gt = _counting_files(tmp_path)
    out = tmp_path / "m.json"
    result = _run("abid-counting", "--pred", pred, "--gt", gt, "--output", out, "--num-classes", 6,
                  "--resamples", 200, "--no-track")
    assert result.exit_code == 0, result.output
    assert re.search(rf"^  accuracy +{NUMBER_AND_INTERVAL}$", result.stdout, re.M), result.stdout
    assert re.search(rf"^  rmse +{NUMBER_AND_INTERVAL}$", result.stdout, re.M)
    assert re.search(rf"^  accuracy_class_3 +{NUMBER_AND_INTERVAL}$", result.stdout, re.M)
    assert ("95% interval, expanded percentile bootstrap over the 120 questions (200 resamples, seed 0)"
            in " ".join(result.stdout.split()))  # the note wraps at the terminal's width
    assert "_ci95_" not in result.stdout  # the fields are in the JSON, shown beside their metric only
    record = json.loads(out.read_text())
    assert record["accuracy_ci95_low"] <= record["accuracy"] <= record["accuracy_ci95_high"]
    assert record["rmse_class_0_ci95_low"] <= record["per_class_rmse"][0] <= record["rmse_class_0_ci95_high"]
    units = read_units(Path(record["units"]["path"]), record["units"]["sha256"])
    assert Path(record["units"]["path"]) == tmp_path / "m.units.parquet"
    assert units.ids.tolist()[:3] == ["0", "4", "8"] and len(units) == 120
    ones = evaluate(units, np.ones((1, 120), np.int32))
    assert float(ones["accuracy"][0]) == pytest.approx(record["accuracy"])  # named as the record names it
    assert float(ones["accuracy_class_2"][0]) == pytest.approx(record["per_class_accuracy"][2])


def test_a_short_result_file_scores_and_keeps_its_prefix(tmp_path: Path) -> None:
    pred, gt = _counting_files(tmp_path, 30)
    pred.write_text("".join(pred.read_text().splitlines(keepends=True)[:20]))
    out = tmp_path / "m.json"
    result = _run("abid-counting", "--pred", pred, "--gt", gt, "--output", out, "--no-track")
    assert result.exit_code == 0, result.output
    assert len(read_units(tmp_path / "m.units.parquet")) == 20


@pytest.mark.parametrize("command,gt_rows", [
    ("abid-verification", [[i, f"B{i}", i % 2, [1]] for i in range(30)]),
    ("abid-quantity", [[i, f"B{i}", i % 2, 2, 2 if i % 2 else 3, []] for i in range(30)]),
])
def test_verification_and_quantity_print_their_accuracy_interval(tmp_path: Path, command: str,
                                                                 gt_rows: list) -> None:
    gt = tmp_path / "gt.json"
    gt.write_text(json.dumps(gt_rows))
    pred = tmp_path / "result.txt"
    pred.write_text("".join(f"{(i % 2) if i % 3 else 1 - i % 2}\n" for i in range(30)))
    out = tmp_path / "m.json"
    result = _run(command, "--pred", pred, "--gt", gt, "--output", out, "--no-track")
    assert result.exit_code == 0, result.output
    assert re.search(rf"^  accuracy +{NUMBER_AND_INTERVAL}$", result.stdout, re.M), result.stdout
    record = json.loads(out.read_text())
    assert {"accuracy_ci95_low", "accuracy_ci95_high"} <= set(record)
    assert read_units(tmp_path / "m.units.parquet").ids[0] == ("0:B0" if command == "abid-verification" else "0:B0:3")


def test_resampling_off_or_wrong(tmp_path: Path) -> None:
    pred, gt = _counting_files(tmp_path, 20)
    out = tmp_path / "m.json"
    for args, env in ((["--resamples", 0], None), ([], {"VSBENCH_RESAMPLES": "0"})):
        result = _run("abid-counting", "--pred", pred, "--gt", gt, "--output", out, "--no-track", *args, env=env)
        assert result.exit_code == 0, result.output
        assert re.search(r"^  accuracy +\d\.\d{4}$", result.stdout, re.M)
        assert "no intervals: resampling is off" in result.stdout
        assert not any("_ci95_" in key for key in json.loads(out.read_text()))
        assert (tmp_path / "m.units.parquet").exists()  # the outcomes are kept all the same
    bad = _run("abid-counting", "--pred", pred, "--gt", gt, "--output", tmp_path / "b.json", "--resamples", 5)
    assert bad.exit_code == 2 and "at least 10" in bad.stderr and "Traceback" not in bad.output
    bad = _run("abid-counting", "--pred", pred, "--gt", gt, "--output", tmp_path / "b.json",
               env={"VSBENCH_RESAMPLES": "many"})
    assert bad.exit_code == 2 and "VSBENCH_RESAMPLES='many'" in bad.stderr
    assert not (tmp_path / "b.json").exists()


def test_copy_detection_prints_intervals_over_its_queries(tmp_path: Path) -> None:
    predictions = tmp_path / "p.csv"
    predictions.write_text("query_id,reference_id,score\nq1,r1,0.9\nq2,r2,0.8\n")
    gt = tmp_path / "gt.csv"
    gt.write_text("query_id,reference_id\nq1,r1\nq2,r3\n")
    result = _run("copy-detection", "--predictions", predictions, "--gt", gt, "--output", tmp_path / "m.json",
                  "--no-track")
    assert result.exit_code == 0, result.output
    assert re.search(rf"^  uap +{NUMBER_AND_INTERVAL}  \(only 2 queries \(under 20\): a rough interval\)$",
                     result.stdout, re.M), result.stdout  # issue 55: an interval over 2 queries says so
    assert "expanded percentile bootstrap over the 2 queries" in result.stdout
    assert "intervals are not available" not in result.stdout


def test_print_record_is_reusable(capsys: pytest.CaptureFixture[str]) -> None:
    import typer  # noqa: F401 - print_record echoes through typer

    print_record("thing", {"map": 0.5, "map_ci95_low": 0.4, "map_ci95_high": 0.6, "n": 3}, None)
    shown = capsys.readouterr().out
    assert "  map  0.5000 [0.4000, 0.6000]" in shown and "intervals are not available" in shown


def test_help_names_the_option_and_the_environment() -> None:
    result = runner.invoke(score_app, ["abid-counting", "--help"], env={"COLUMNS": "200"})
    assert "--resamples" in result.stdout and "VSBENCH_RESAMPLES" in result.stdout


def test_tracked_run_holds_the_unit_file_and_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from vsbench.tracking.units import fetch_units

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    pred, gt = _counting_files(tmp_path, 40)
    out = tmp_path / "m.json"
    result = _run("abid-counting", "--pred", pred, "--gt", gt, "--output", out, "--resamples", 50)
    assert result.exit_code == 0, result.output
    client = MlflowClient()
    [run] = client.search_runs([client.get_experiment_by_name("vsbench-score").experiment_id])
    assert run.data.params["ci_resamples"] == "50"
    assert run.data.metrics["accuracy_ci95_low"] == json.loads(out.read_text())["accuracy_ci95_low"]
    fetched = fetch_units(client, run, tmp_path / "cache")
    assert {"accuracy", "rmse"} <= set(fetched) and len(fetched["accuracy"]) == 40
    # each per-class value is logged beside its bounds (issue 55: the bounds alone were logged, and
    # `compare --metric accuracy_class_1` found no such metric), equal to the record's per-class list
    record = json.loads(out.read_text())
    for index, value in enumerate(record["per_class_accuracy"]):
        if f"accuracy_class_{index}_ci95_low" in run.data.metrics:
            assert run.data.metrics[f"accuracy_class_{index}"] == pytest.approx(value, abs=1e-12)
            assert record[f"accuracy_class_{index}"] == pytest.approx(value, abs=1e-12)
    assert any(name.startswith("accuracy_class_") and not name.endswith(("_low", "_high")) for name in run.data.metrics)
    assert "accuracy_class_1" in fetched  # the units recompute the value the run logged
    # issue 55: an interval over fewer than 20 questions says so in one line: on the terminal beside
    # the interval, and as a plain tag on the run; the 40 questions' accuracy has no note
    counts = np.bincount(np.asarray([row[1] for row in json.loads(gt.read_text())]))
    small = [c for c, n in enumerate(counts) if 0 < n < 20]
    assert small and "interval_note.accuracy" not in run.data.tags
    for c in small:
        note = f"only {counts[c]} question{'s' if counts[c] > 1 else ''} (under 20): a rough interval"
        assert run.data.tags[f"interval_note.accuracy_class_{c}"] == note
        assert re.search(rf"^  accuracy_class_{c} +{NUMBER_AND_INTERVAL}  \({re.escape(note)}\)$",
                         result.stdout, re.M), result.stdout
