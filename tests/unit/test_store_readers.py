"""Every reader of the MLflow store goes through the one bounded client (issue 54): the nightly
components, a trunk read from a training run, the score step's evaluation runs. With the store at a
closed port and a bound of a fraction of a second, each ends in one line naming the store's URI
(nothing here measures time: an unbounded client gives MLflow's own error instead, after its
retries, and that is what fails these tests).

The nightly components are loaded from this checkout's ``components/`` (``components.nightly``):
``vsbench.components`` is wherever the package was installed from, which in a second work tree is
another checkout's copy."""

from __future__ import annotations

import pytest

from vsbench.io.store import StoreError

DOWN = "http://127.0.0.1:9"  # the discard port: nothing listens there


@pytest.fixture
def store_down(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", DOWN)
    monkeypatch.setenv("VSBENCH_TRACKING_TIMEOUT", "0.5")
    return DOWN


def _one_line_naming_the_store(err: str, uri: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: MLflow store {uri} "), err
    assert "VSBENCH_TRACKING_TIMEOUT" in lines[0] or "cannot be reached" in lines[0], err


def test_the_regression_check_with_the_store_down_is_one_line_naming_it(store_down, capsys):
    from components.nightly import regression_check
    from kfp.dsl import Metrics

    with pytest.raises(SystemExit) as ended:
        regression_check.python_func(experiment="e", parent_run_id="night", threshold=0.02, relative=False,
                                     metrics_json="[]", pipeline="vsbench-nightly",
                                     metrics=Metrics(name="metrics", uri="", metadata={}))
    assert ended.value.code == 2
    _one_line_naming_the_store(capsys.readouterr().err, store_down)


def test_the_comparison_report_with_the_store_down_is_one_line_naming_it(store_down, capsys, tmp_path):
    from components.nightly import comparison_report
    from kfp.dsl import HTML

    report = HTML(name="report", uri=str(tmp_path / "report.html"), metadata={})
    with pytest.raises(SystemExit) as ended:
        comparison_report.python_func(experiment="e", last=5, report=report, parent_run_id="night")
    assert ended.value.code == 2
    _one_line_naming_the_store(capsys.readouterr().err, store_down)


def test_a_trunk_read_from_a_run_with_the_store_down_is_one_line_naming_it(store_down):
    from vsbench.models.registry import build_model

    with pytest.raises(StoreError) as refused:
        build_model("abid_trunk", run_id="r1")
    assert str(refused.value).startswith(f"MLflow store {store_down} ") and "\n" not in str(refused.value)


@pytest.mark.parametrize("value", ["abc", "1e9", "100000", "-3", "0", "²", "9" * 5000])
def test_a_runs_image_size_param_is_a_side_or_one_line_naming_the_run(value):
    """The param is data whoever writes the run chose: not a size is refused before any image is
    resized to it (``int("1e9")`` raised a bare ValueError; ``100000`` would have been believed)."""
    from vsbench.models.backbones import run_image_size

    with pytest.raises(ValueError, match=r"^run r1: its image_size param .* is not a side of 1 to 4096 pixels; "
                                         r"give the size in the model options \(input_size\)$"):
        run_image_size("r1", value)


def test_a_runs_image_size_param_in_range_is_used():
    from vsbench.models.backbones import run_image_size

    assert [run_image_size("r1", v) for v in ("96", " 224 ", 4096, None, "")] == [96, 224, 4096, None, None]


def test_the_score_steps_evaluation_runs_with_the_store_down_say_the_store_once(store_down, tmp_path, capsys):
    """The step goes on without its evaluation runs (tracking never fails a step) and its one line
    says which store did not answer, within the bound."""
    from vsbench.steps.evaluate import log_step_evaluations

    assert log_step_evaluations("parent", None, "model", [], tmp_path) == []  # type: ignore[arg-type]
    said = " ".join(capsys.readouterr().err.split())
    assert said.startswith("[vsbench] MLflow tracking unavailable (evaluation runs: StoreError: "
                           f"MLflow store {store_down} "), said


def test_a_trainjobs_mounts_with_the_store_down_are_one_line_naming_it(store_down):
    """Before a TrainJob starts, the parent run's artifact folder is looked up in the store the
    environment names (a server the nodes can reach: not 127.0.0.1, so 127.0.0.2 here)."""
    from vsbench.platform.trainjob import _mlflow_mounts

    uri = "http://127.0.0.2:9"
    with pytest.raises(StoreError) as refused:
        _mlflow_mounts({"MLFLOW_TRACKING_URI": uri}, parent_run_id="parent")
    assert str(refused.value).startswith(f"MLflow store {uri} ") and "\n" not in str(refused.value)


class _RunOf:
    """A store client that answers ``get_run`` with a run whose ``artifact_uri`` is ``value``."""

    def __init__(self, value: str) -> None:
        self.value = value

    def get_run(self, run_id: str):
        from types import SimpleNamespace

        return SimpleNamespace(info=SimpleNamespace(run_id=run_id, artifact_uri=self.value))


@pytest.mark.parametrize("value", ["file:///a", "/artifacts", "", "/parent/artifacts", "relative/1/parent/artifacts",
                                   "/srv/mlruns/1/another-run/artifacts", "/srv/mlruns/1/parent/models"])
def test_a_trainjobs_mounts_refuse_an_artifact_uri_of_another_shape_naming_run_and_value(monkeypatch, tmp_path, value):
    """The parent run's ``artifact_uri`` is read from the store and its experiment folder mounted
    writable into the nodes: a path too short for ``<folder>/<run id>/artifacts`` (was an IndexError)
    or whose folder would be ``/`` is one line naming the run and the value."""
    from vsbench.io import store
    from vsbench.platform.trainjob import TrainJobError, _mlflow_mounts

    monkeypatch.setattr(store, "store_client", lambda **kwargs: _RunOf(value))
    database = tmp_path / "mlflow.db"
    with pytest.raises(TrainJobError) as refused:
        _mlflow_mounts({"MLFLOW_TRACKING_URI": f"sqlite:///{database}"}, parent_run_id="parent")
    said = str(refused.value)
    assert "\n" not in said and said.startswith("run parent: its artifact_uri ") and repr(value) in said, said


def test_a_trainjobs_mounts_take_the_experiment_folder_of_a_local_artifact_uri(monkeypatch, tmp_path):
    from vsbench.io import store
    from vsbench.platform.trainjob import _mlflow_mounts

    monkeypatch.setattr(store, "store_client", lambda **kwargs: _RunOf(f"file://{tmp_path}/mlruns/7/parent/artifacts"))
    database = tmp_path / "mlflow.db"
    folders, files = _mlflow_mounts({"MLFLOW_TRACKING_URI": f"sqlite:///{database}"}, parent_run_id="parent")
    assert folders == [tmp_path, tmp_path / "mlruns" / "7"] and files == [database]


# --- the writers: a step's tracker and the local run's set-up go offline within the bound ------------


@pytest.fixture
def store_hangs(monkeypatch: pytest.MonkeyPatch):
    """A store that accepts connections and never answers (what costs MLflow's own client its request
    timeout times its retries: about a minute a call at vsbench's settings). MLflow's request timeout
    is cut to 2 s here only so that a planted unbounded client fails this test in seconds, not minutes."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # the kernel completes the handshakes; nothing ever reads or answers
    uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("VSBENCH_TRACKING_TIMEOUT", "0.5")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    yield uri
    listener.close()


def _offline_once_naming(err: str, what: str, uri: str, verb: str) -> None:
    import re

    said = " ".join(err.split())
    assert said.count("MLflow tracking unavailable") == 1, said
    assert re.match(re.escape(f"[vsbench] MLflow tracking unavailable ({what}: StoreError: MLflow store {uri} ") + verb,
                    said), said


# a closed port is refused at once, but MLflow's retries back off past a bound of 0.5 s: either line
@pytest.mark.parametrize(("fixture", "verb"), [("store_down", "(cannot be reached|did not answer)"),
                                               ("store_hangs", "did not answer")])
def test_a_steps_tracker_goes_offline_within_the_bound_saying_the_store_once(fixture, verb, request, capsys):
    """A pipeline step's child run on a store that is down or hangs: the step goes on (its body runs,
    its logging calls are no-ops), and one message says the tracker went offline, naming the store
    (an unbounded client: MLflow's own MlflowException after its retries)."""
    from vsbench.tracking.runs import child_run

    uri = request.getfixturevalue(fixture)
    ran = []
    with child_run("parent", "embed", params={"k": 10}) as tracker:
        tracker.log_metrics({"m": 1.0})
        ran.append(True)
    assert ran == [True] and not tracker.online
    _offline_once_naming(capsys.readouterr().err, "open child run embed", uri, verb)


def test_a_pipelines_parent_run_on_a_hanging_store_is_none_and_said_once(store_hangs, capsys):
    from vsbench.tracking.runs import open_parent_run

    assert open_parent_run("vsbench", "kfp-1", "vsbench-similarity", {"benchmark": "disc"}) == ""
    _offline_once_naming(capsys.readouterr().err, "open parent run", store_hangs, "did not answer")


# a closed port is refused at once, but MLflow's retries back off past a bound of 0.5 s: either line
@pytest.mark.parametrize(("fixture", "verb"), [("store_down", "(cannot be reached|did not answer)"),
                                               ("store_hangs", "did not answer")])
def test_the_local_runs_set_up_with_the_store_down_or_hanging_is_one_line_naming_it(fixture, verb, request, capsys):
    """Before a local pipeline's containers start: the experiment's artifact folder is asked of the
    store; one that does not answer costs the bound and one line, and the run goes on (its steps
    then go offline as above)."""
    import re

    from vsbench.platform.local_run import tracking_locations

    uri = request.getfixturevalue(fixture)
    assert tracking_locations("vsbench") == ([], [], {"MLFLOW_TRACKING_URI": uri})
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and re.match(re.escape(f"[vsbench] MLflow unavailable before the run (StoreError: MLflow store "
                                                f"{uri} ") + verb, out[0]), out
