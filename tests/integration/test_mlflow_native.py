"""MLflow's own records, read back through its client: the data each run used as a dataset input,
trained baselines as logged models (on their step and on the pipeline's parent run), experiments
marked as model training, and a re-run of a finished training that registers nothing new."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.abid_data import tiny_abid
from vsbench.tracking.config import ARTIFACT_LOCATION_ENV
from vsbench.tracking.runs import EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND, ensure_experiment, open_parent_run

pytestmark = pytest.mark.slow


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv(ARTIFACT_LOCATION_ENV, str(tmp_path / "artifacts"))
    monkeypatch.delenv("VSBENCH_NO_TRACK", raising=False)
    return MlflowClient()


def test_experiments_are_marked_as_model_training_and_a_kind_set_by_hand_stays(store):
    fresh = ensure_experiment(store, "fresh")
    assert store.get_experiment(fresh).tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING_KIND
    old = store.create_experiment("old")  # made before vsbench tagged experiments
    assert ensure_experiment(store, "old") == old
    assert store.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING_KIND
    mine = store.create_experiment("mine", tags={EXPERIMENT_KIND_TAG: "finetuning"})
    ensure_experiment(store, "mine")
    assert store.get_experiment(mine).tags[EXPERIMENT_KIND_TAG] == "finetuning"


def test_training_logs_dataset_and_model_and_a_rerun_registers_nothing_new(store, tmp_path, capsys):
    from vsbench.abid.prepare import tasks_dataset
    from vsbench.steps.abid import abid_train_counting_step
    from vsbench.tracking.models import aliases
    from vsbench.tracking.provenance import PARENT_TAG

    tasks, images = tiny_abid(tmp_path / "data", 120)
    parent = open_parent_run("native", "kfp-1", "vsbench-abid", {"seed": 0})
    overrides = {"epochs": 1, "batch_size": 8, "image_size": 32, "workers": 0}
    first = abid_train_counting_step(str(tasks), str(images), str(tmp_path / "out"), overrides=overrides,
                                     device="cpu", parent_run_id=parent, progress=False)
    assert first.metrics["train_images_per_second"] > 0
    again = abid_train_counting_step(str(tasks), str(images), str(tmp_path / "out"), overrides=overrides,
                                     device="cpu", parent_run_id=parent, progress=False)
    printed = capsys.readouterr().out
    assert "already trained: " in printed and "holds epoch 1 of 1; nothing to train" in printed
    assert "vsbench-abid-counting: version 1 already holds these weights" in printed
    assert "train_images_per_second" not in again.metrics  # nothing trained: no rate, not 0.0

    versions = store.search_model_versions("name = 'vsbench-abid-counting'")
    assert [str(v.version) for v in versions] == ["1"]
    assert aliases(store, "vsbench-abid-counting") == {"newest": "1", "best": "1"}

    experiment = store.get_experiment_by_name("native")
    assert experiment.tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING_KIND
    runs = {r.info.run_id: r for r in store.search_runs([experiment.experiment_id])}
    children = [r for r in runs.values() if r.data.tags.get(PARENT_TAG) == parent]
    assert len(children) == 2
    name, digest, location = tasks_dataset(tasks)
    for child in children:
        [dataset_input] = child.inputs.dataset_inputs
        assert (dataset_input.dataset.name, dataset_input.dataset.digest) == (name, digest[:36])
        assert location in dataset_input.dataset.source
        assert {t.key: t.value for t in dataset_input.tags} == {"mlflow.data.context": "training"}
    found = store.search_runs([experiment.experiment_id], filter_string=f"dataset.digest = '{digest[:36]}'")
    assert {r.info.run_id for r in found} == {c.info.run_id for c in children}

    [model] = store.search_logged_models(experiment_ids=[experiment.experiment_id])
    assert model.name == "counting_model" and model.source_run_id in {c.info.run_id for c in children}
    assert [o.model_id for o in store.get_run(parent).outputs.model_outputs] == [model.model_id]
