"""The example plugin's benchmark and model through the similarity pipeline on kfp.local, into MLflow,
compared with a built-in model by ``vsbench compare``, and compiled into the nightly pipeline, all
through the ``vsbench`` command with the plugin pip-installed (issue 27, item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.example_plugin import environment, expected_colour_match, install_example_plugin, vsbench
from vsbench.tracking.config import ARTIFACT_LOCATION_ENV

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXPERIMENT = "plugin-test"


def test_the_plugin_runs_in_the_pipeline_is_tracked_compared_and_compiled(tmp_path: Path) -> None:
    site = install_example_plugin(tmp_path / "plugin")
    env = environment(site, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
                      **{ARTIFACT_LOCATION_ENV: str(tmp_path / "artifacts")})
    data = tmp_path / "data"
    assert vsbench(env, "synth", "similarity", "colour_match", "--out", str(data)).returncode == 0
    expected = expected_colour_match(data)

    piped = vsbench(env, "similarity", "run", "--benchmark", "colour_match", "--root", str(data),
                    "--out", str(tmp_path / "pipeline"), "--model", "mean_colour", "--num-shards", "2",
                    "--runner", "subprocess", "--experiment", EXPERIMENT)
    assert piped.returncode == 0, (piped.stdout + piped.stderr)[-4000:]
    assert f"l2,{expected['top1_accuracy']!r},{expected['mean_rank']!r}\n" in piped.stdout
    assert "ran in: host venv" in piped.stdout

    inline = vsbench(env, "similarity", "run", "--benchmark", "colour-match", "--root", str(data),
                     "--out", str(tmp_path / "effnet"), "--model", "efficientnet_lite0", "--experiment", EXPERIMENT)
    assert inline.returncode == 0, inline.stderr[-3000:]
    effnet_rank = float(inline.stdout.split("\nl2,")[1].split(",")[1].split()[0])
    assert effnet_rank > expected["mean_rank"], "the test needs the models to differ: mean_colour ranks better"

    compared = vsbench(env, "compare", "--experiment", EXPERIMENT, "--report", str(tmp_path / "report.html"))
    assert compared.returncode == 0, compared.stderr[-3000:]
    board = compared.stdout.split("== colour_match ==\n")[1].split("\n\n")[0].splitlines()
    # A column per model and variant (the record's distance), rows under the benchmark's plain names.
    assert board[0].split() == ["metric", "better", "efficientnet_lite0", "·", "l2", "mean_colour", "·", "l2"]
    rank_row = next(line.split() for line in board if line.startswith("mean_rank"))
    assert rank_row[1] == "lower" and rank_row[3] == f"{expected['mean_rank']:.4g}*"  # the lower rank is best
    assert "colour_match" in (tmp_path / "report.html").read_text()

    suite = tmp_path / "suite.yaml"
    suite.write_text(f"entries:\n  - {{benchmark: color-match, root: {data}, model: mean_colour}}\n")
    compiled = vsbench(env, "compile", "--out", str(tmp_path / "compiled"), "--suite", str(suite))
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    nightly = (tmp_path / "compiled" / "nightly.yaml").read_text()
    assert "colour_match" in nightly and "mean_colour" in nightly and "color-match" not in nightly
