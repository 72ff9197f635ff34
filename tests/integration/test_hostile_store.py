"""A hostile store (issue 54): runs forged in a real ``mlflow server`` on 127.0.0.1 by someone with write
access; ``vsbench compare --runs`` must end each in one ``error:`` line, exit 2, and import nothing."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from tests.forged_units import all_right, disc_units, logged_value, marker_module, naming_statistic, with_metadata
from vsbench.cli.app import app
from vsbench.platform.local_s3 import free_port
from vsbench.tracking.evaluations import BENCHMARK_TAG
from vsbench.tracking.units import UNITS_TAG

pytestmark = pytest.mark.integration


@pytest.fixture
def forge(mlflow_tracking, fresh_experiment, tmp_path, monkeypatch):
    """``forge(data, metrics, benchmark=..., status=...)``: a run holding ``data`` as its unit file, the
    tag updated to the file's digest (whoever writes the run writes the tag)."""
    monkeypatch.setenv("VSBENCH_RESAMPLES", "50")
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    client = MlflowClient()
    experiment = client.create_experiment(fresh_experiment)

    def make(data: bytes | None, metrics: dict[str, float], *, benchmark: str = "disc", status: str = "FINISHED") -> str:
        run_id = client.create_run(experiment, tags={BENCHMARK_TAG: benchmark}).info.run_id
        for name, value in metrics.items():
            client.log_metric(run_id, name, value)
        if data is not None:
            folder = tmp_path / run_id
            folder.mkdir()
            (folder / "disc.parquet").write_bytes(data)
            client.log_artifact(run_id, str(folder / "disc.parquet"), "units")
            client.set_tag(run_id, UNITS_TAG, json.dumps({"units/disc.parquet": hashlib.sha256(data).hexdigest()}))
        if status != "RUNNING":
            client.set_terminated(run_id, status)
        return run_id

    return make


def _compare(*runs: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, ["compare", "--runs", *runs, "--report", "/dev/null"])
    return result.exit_code, result.output.strip().splitlines()


def _honest(forge) -> str:
    units = disc_units()
    return forge(units.to_parquet_bytes(), {"accuracy_at_1": logged_value(units)})


def test_honest_runs_are_compared(forge, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, lines = _compare(_honest(forge), _honest(forge))
    assert code == 0 and any("second - first" in line for line in lines)


@pytest.mark.parametrize("statistic", ["this:x", "builtins:print", "vsbench_hostile_marker:run"])
def test_a_statistic_naming_a_module_is_refused_and_nothing_runs(statistic, forge, tmp_path, monkeypatch):
    marker = marker_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    units = disc_units()
    forged = forge(naming_statistic(units, statistic), {"accuracy_at_1": logged_value(units)})
    code, lines = _compare(_honest(forge), forged)
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: run {forged}: unit file units/disc.parquet: metric 'accuracy_at_1': statistic")
    assert not marker.exists() and "Beautiful is better" not in "".join(lines)


def test_units_rewritten_with_their_tag_updated_are_refused(forge):
    honest = disc_units()
    forged = forge(all_right(honest).to_parquet_bytes(), {"accuracy_at_1": logged_value(honest)})
    code, lines = _compare(_honest(forge), forged)
    assert code == 2 and lines == [f"error: run {forged}: unit file units/disc.parquet: its units give accuracy_at_1 "
                                   "= 1.0, the run logged 0.35; these are not the units behind the logged number "
                                   "(refused)"]


def test_broken_metadata_is_one_line(forge):
    units = disc_units()
    forged = forge(with_metadata(units, lambda m: m.pop("kind") and None), {"accuracy_at_1": logged_value(units)})
    code, lines = _compare(_honest(forge), forged)
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: run {forged}: unit file units/disc.parquet: its vsbench.units metadata is "
                               "broken: kind: Field required")


def test_runs_of_other_benchmarks_and_running_runs_are_refused(forge):
    disc = _honest(forge)
    counting = forge(None, {"accuracy_at_1": 0.5}, benchmark="abid_counting")
    code, lines = _compare(disc, counting)
    assert code == 2 and lines == [f"error: runs {disc} (disc) and {counting} (abid_counting) scored different "
                                   "benchmarks; compare two runs of one benchmark"]
    running = forge(None, {"accuracy_at_1": 0.5}, status="RUNNING")
    code, lines = _compare(disc, running)
    assert code == 2 and lines == [f"error: run {running} is RUNNING, not FINISHED: its numbers may still change; "
                                   "compare it once it has finished"]
    other = forge(None, {"uap": 0.5})
    code, lines = _compare(disc, other)
    assert code == 2 and len(lines) == 1 and "share no metric" in lines[0]


def test_a_store_that_is_down_is_one_line_naming_it(tmp_path):
    uri = f"http://127.0.0.1:{free_port()}"
    env = {**__import__("os").environ, "MLFLOW_TRACKING_URI": uri, "VSBENCH_TRACKING_TIMEOUT": "5"}
    done = subprocess.run([sys.executable, "-m", "vsbench", "compare", "--runs", "a", "b"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"error: MLflow store {uri} cannot be reached (")
