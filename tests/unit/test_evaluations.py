"""Evaluations as MLflow runs (vsbench.tracking.evaluations) without a server: what a record becomes
(names, params, directions, the name a parent held before), the embedder read from an embed manifest,
and a command's bundle carrying its evaluations, uploaded twice into one run each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vsbench.tracking.evaluations import Embedder, evaluations_of, readable_label
from vsbench.tracking.names import flat_metrics, run_metric_names

RECORDS = [{"codec": "PCAW64,L2norm,Flat", "score_norm": "1.00[0,2]", "uap": 0.25, "accuracy_at_1": 0.5,
            "mean_rank": 3, "tied": 2},
           {"codec": "PCAW64,L2norm,Flat", "score_norm": "none", "uap": 0.125, "accuracy_at_1": 0.375,
            "mean_rank": 4, "tied": 0}]


def _evaluations(options: dict | None = None, model: str = "efficientnet_lite0"):
    return evaluations_of("disc", RECORDS, Embedder(model=model, options=options or {}, seed=3),
                          run_params={"codecs": "PCAW64,L2norm,Flat", "k": 10, "score_norm": "1.00[0,2]",
                                      "search_params": "", "global_cap": 0, "benchmark_options": "{}"},
                          data_digest="ab" * 32, declared_lower=("mean_rank",))


def test_a_record_becomes_one_evaluation_with_plain_names_and_the_values_unchanged():
    normalized, plain = _evaluations()
    assert normalized.metrics == {"uap": 0.25, "accuracy_at_1": 0.5, "mean_rank": 3.0, "tied": 2.0}  # as scored
    assert normalized.run_name == "efficientnet_lite0 · PCAW64,L2norm,Flat · 1.00[0,2]"  # model first (issue 57)
    assert plain.params["score_norm"] == "none" and normalized.params["score_norm"] == "1.00[0,2]"  # the record's own
    assert {k: normalized.params[k] for k in ("benchmark", "model", "model_options", "codec", "k", "seed")} == {
        "benchmark": "disc", "model": "efficientnet_lite0", "model_options": "{}", "codec": "PCAW64,L2norm,Flat",
        "k": "10", "seed": "3"}
    assert normalized.lower_is_better == ["mean_rank"] and normalized.tags()["vsbench.lower_is_better"] == "mean_rank"
    assert normalized.model_name == "efficientnet_lite0 · PCAW64,L2norm,Flat · 1_00[0,2]"  # MLflow refuses "."
    assert normalized.series != plain.series and normalized.model_key != plain.model_key
    assert normalized.series == _evaluations()[0].series  # the same evaluation on another night
    # What a parent held before issue 38, name for name: the regression check's rules keep matching.
    before = run_metric_names("disc", "efficientnet_lite0", flat_metrics(RECORDS))
    assert {name for e in (normalized, plain) for name in e.flat_names().values()} == set(before)


def test_model_options_make_another_model_and_long_names_are_cut():
    four, eight = _evaluations({"bins": 4})[0], _evaluations({"bins": 8})[0]
    assert four.run_name == 'efficientnet_lite0-bins4 · PCAW64,L2norm,Flat · 1.00[0,2]'  # issues 48, 57
    assert four.line == 'efficientnet_lite0-bins4 · seed 3 · PCAW64,L2norm,Flat · 1.00[0,2]'  # the chart's legend
    assert four.model_name == 'efficientnet_lite0-bins4 · PCAW64,L2norm,Flat · 1_00[0,2]'
    # The series keeps the name as logged before issue 48: nights logged before and after still pair.
    assert four.series.startswith('disc · efficientnet_lite0 {"bins":4} · PCAW64,L2norm,Flat · 1.00[0,2] · ')
    assert len({four.series, eight.series}) == len({four.model_key, eight.model_key}) == 2
    long = _evaluations({"path": "/data/models/" + "x" * 200 + ".pt"})[0]
    assert len(long.run_name) <= 90 and long.run_name.startswith("efficientnet_lite0-")
    assert readable_label("resnet34", {"weights": "random"}) == "resnet34-random"
    assert readable_label("torchscript", {"path": "/m/net.pt", "fp16": True}) == "torchscript-fp16-net"
    assert readable_label("m", {"cfg": {"a": 1}}).startswith("m-cfg_")  # no JSON in a name


def test_vsbench_switches_off_mlflows_own_run_links():
    import os

    import vsbench.tracking  # noqa: F401 - sets the switch on import

    assert os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] in ("true", "1", "True")
    assert evaluations_of("disc", [{"codec": "Flat", "uap": float("nan")}], Embedder(model="m"), run_params={}) == []


def test_the_embedder_comes_from_the_embed_manifest(tmp_path):
    weights = tmp_path / "model.pt"
    weights.write_bytes(b"weights")
    features = tmp_path / "features"
    features.mkdir()
    (features / "query.shard-0-of-1.json").write_text(json.dumps({
        "complete": True, "model": "torchscript", "options": {"path": str(weights)}, "seed": 0, "dim": 8,
        "preprocessing": {"input_size": 224}, "weights_source": f"TorchScript file {weights}", "output": "pooled",
        "key": {"inputs": {"option_files": {"path": "f" * 64}}}}))
    embedder = Embedder.from_features(features, "ignored")
    assert (embedder.model, embedder.family, embedder.dim) == ("torchscript", "torchscript", 8)
    assert embedder.weights_sha256 == "path:" + "f" * 64 and embedder.files == {"path": str(weights)}
    assert embedder.params()["preprocessing"] == '{"input_size": 224}'
    assert Embedder.from_features(tmp_path / "none", "timm:resnet50", {"a": 1}, 7).params()["family"] == "timm"


def test_a_bundle_carries_its_evaluations_and_uploads_them_once(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from vsbench.tracking.command import read_bundle, upload_bundle, write_bundle
    from vsbench.tracking.evaluations import evaluation_children

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("VSBENCH_MLFLOW_ARTIFACT_LOCATION", str(tmp_path / "artifacts"))
    bundle = write_bundle(tmp_path / "mlflow-run.json", experiment="e", pipeline="vsbench-similarity",
                          params={"benchmark": "disc"}, metrics={}, evaluations=_evaluations(), title="disc · m")
    assert len(read_bundle(bundle)["evaluations"]) == 2
    run_id = upload_bundle(bundle)
    assert upload_bundle(bundle) == run_id  # again: completes the same runs, adds nothing
    client = MlflowClient(uri)
    parent = client.get_run(run_id)
    assert parent.info.run_name.startswith("disc · m · vsbench-similarity-cli-")
    children = evaluation_children(client, run_id, parent.info.experiment_id)
    assert len(children) == 2 and all(c.info.status == "FINISHED" for c in children)
    assert all(len(client.get_metric_history(c.info.run_id, "uap")) == 1 for c in children)
    assert len(client.search_logged_models(experiment_ids=[parent.info.experiment_id])) == 2

    # An edited evaluation is an edited bundle: refused before MLflow is contacted.
    data = json.loads(bundle.read_text())
    data["evaluations"][0]["metrics"]["uap"] = 0.99
    bundle.write_text(json.dumps(data))
    with pytest.raises(Exception, match="edited"):
        upload_bundle(Path(bundle))


def test_a_unit_file_changed_since_the_score_wrote_it_is_not_logged(tmp_path, capsys):
    """The score step's unit-file entries come from its output folder (docs/reliability.md, "What
    vsbench reads back"): a file is logged to the evaluation run only when its bytes still hash to the
    sha256 the score recorded; a changed one is said in one line and not logged."""
    from types import SimpleNamespace

    from tests.forged_units import disc_units
    from vsbench.tracking.evaluations import _log_units

    path = tmp_path / "units" / "disc.parquet"
    sha256 = disc_units().write(path)
    [evaluation] = evaluations_of("disc", RECORDS[:1], Embedder(model="m"), run_params={},
                                  units=[{"path": str(path), "sha256": sha256}])
    logged: list[str] = []
    client = SimpleNamespace(get_run=lambda run_id: SimpleNamespace(data=SimpleNamespace(tags={})),
                             log_artifact=lambda run_id, local, folder: logged.append(Path(local).name),
                             set_tag=lambda *args: None)
    _log_units(client, "r1", evaluation)
    assert logged == ["disc.parquet"]
    path.write_bytes(path.read_bytes() + b"x")
    _log_units(client, "r1", evaluation)
    assert logged == ["disc.parquet"]  # not a second time
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"unit file {path} changed since the score wrote it; not logged" in line
