"""Run bundles against a real ``mlflow server`` over HTTP (issue 26 part 6): the legitimate flow
(written while the store was down, uploaded later, uploaded again) and a forged bundle for the same
run key, with artifacts going through the server's proxy as on a cluster."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from vsbench.cli.app import app
from vsbench.platform.local_s3 import free_port
from vsbench.tracking.bundles import DIGEST_TAG, content_digest
from vsbench.tracking.command import BUNDLE_NAME, read_bundle, upload_within, write_bundle


def test_a_bundle_kept_while_the_store_was_down_uploads_later_once(tmp_path, monkeypatch, mlflow_tracking,
                                                                    fresh_experiment):
    from mlflow.tracking import MlflowClient

    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.json").write_text('{"uap": 0.5}\n')
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")  # down when the command ran
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    bundle = write_bundle(out / BUNDLE_NAME, experiment=fresh_experiment, pipeline="vsbench-similarity",
                          params={"model": "m"}, metrics={"uap": 0.5}, artifacts={str(out / "metrics.json"): ""})
    assert not upload_within(bundle, timeout=20).uploaded
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_tracking)  # the store is back
    runner = CliRunner()
    assert runner.invoke(app, ["track", "upload", str(out)]).exit_code == 0
    again = runner.invoke(app, ["track", "upload", str(out), "--force"])
    assert again.exit_code == 0, again.output
    client = MlflowClient(mlflow_tracking)
    (run,) = client.search_runs([client.get_experiment_by_name(fresh_experiment).experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags[DIGEST_TAG] == read_bundle(bundle)["digest"]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "uap")] == [0.5]
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["metrics.json"]

    forged = tmp_path / "forged" / BUNDLE_NAME
    forged.parent.mkdir()
    data = {**json.loads(bundle.read_text()), "artifacts": [], "uploaded": None}
    data["metrics"]["uap"] = 0.99
    data["end_ms"] += 60_000
    data["digest"] = content_digest({k: v for k, v in data.items() if k not in ("uploaded", "digest", "tracking_uri")})
    forged.write_text(json.dumps(data))
    refused = runner.invoke(app, ["track", "upload", str(forged)])
    assert refused.exit_code == 1 and "a run made from a different bundle" in refused.output, refused.output
    assert [m.value for m in client.get_metric_history(run.info.run_id, "uap")] == [0.5]
