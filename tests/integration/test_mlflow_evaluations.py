"""Evaluations in MLflow itself (issue 38), against a real ``mlflow server`` on 127.0.0.1.

Two ``vsbench similarity run`` commands of different models on one synthetic DISC must give
evaluation runs with the same plain metric keys, one per (model, variant), found by a params search,
with each model a LoggedModel ranked per dataset in both directions. Synthetic evaluations check what
the commands cannot show cheaply: a lower-is-better metric of a benchmark the registry does not know
ranks by the run's tag, model options stay apart, a nightly series keeps one LoggedModel and one
series key, and the regression check compares a night logged in today's layout with one logged in
the layout before (long metric names on the parent, as ``main`` wrote them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from vsbench.reporting.leaderboard import leaderboard
from vsbench.reporting.regression import check_regression
from vsbench.reporting.runs import collect_runs
from vsbench.tracking.config import ARTIFACT_LOCATION_ENV
from vsbench.tracking.evaluations import (
    SERIES_TAG,
    Embedder,
    day_of,
    evaluation_children,
    evaluations_of,
    log_evaluations,
)
from vsbench.tracking.runs import ensure_experiment, open_parent_run

from .mlflow_server import record_pipeline_run

pytestmark = pytest.mark.integration

MODELS = ("efficientnet_lite0", "resnet34")
DAY_MS = 86_400_000


@pytest.fixture(scope="module")
def two_runs(mlflow_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Two `vsbench similarity run`s (random weights: nothing to download) of different models on one
    synthetic DISC, tracked to the server; returns the experiment, its id and model -> command run id."""
    from vsbench.benchmarks.disc.synth import generate_disc
    from vsbench.cli.app import app
    from vsbench.tracking.command import BUNDLE_NAME, read_bundle

    root = tmp_path_factory.mktemp("disc")
    generate_disc(root, references=10, queries=8, train=8)
    experiment = f"evaluations-{root.name}"
    parents = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
        patch.delenv(ARTIFACT_LOCATION_ENV, raising=False)
        for model in MODELS:
            out = tmp_path_factory.mktemp(model)
            result = CliRunner().invoke(app, ["similarity", "run", "--benchmark", "disc", "--root", str(root), "--out",
                                              str(out), "--model", model, "--model-options", '{"weights": "random"}',
                                              "--experiment", experiment, "--batch-size", "8", "--device", "cpu"])
            assert result.exit_code == 0, result.output
            parents[model] = read_bundle(out / BUNDLE_NAME)["uploaded"]["run_id"]
        experiment_id = MlflowClient(mlflow_server).get_experiment_by_name(experiment).experiment_id
    yield {"experiment": experiment, "experiment_id": experiment_id, "parents": parents, "uri": mlflow_server}


def _children(client: MlflowClient, two_runs: dict, model: str) -> dict[str, object]:
    """variant -> evaluation run of ``model``'s command."""
    runs = evaluation_children(client, two_runs["parents"][model], two_runs["experiment_id"])
    return {run.data.tags["vsbench.variant"]: run for run in runs}


def test_two_models_give_one_run_per_evaluation_with_the_same_metric_keys(two_runs, mlflow_tracking):
    client = MlflowClient()
    first, second = (_children(client, two_runs, model) for model in MODELS)
    assert set(first) == set(second) == {"Flat · none", "Flat · 1.00[0,2]"}  # one run per (codec, score norm)
    for variant in first:
        assert set(first[variant].data.metrics) == set(second[variant].data.metrics)  # MLflow lines them up
        assert {"uap", "accuracy_at_1", "recall_at_p90"} <= set(first[variant].data.metrics)
    parent = client.get_run(two_runs["parents"]["resnet34"])
    assert parent.data.tags["vsbench.evaluations"] == "2"
    assert parent.data.tags["vsbench.best.disc.run"] in {run.info.run_id for run in second.values()}
    # The parent summarizes: its best child's headline and interval, copied (issue 57), nothing else.
    best = client.get_run(parent.data.tags["vsbench.best.disc.run"]).data.metrics
    assert parent.data.metrics == {f"best.disc.{name}": best[name] for name in ("uap", "uap_ci95_low", "uap_ci95_high")}
    run = second["Flat · 1.00[0,2]"]
    assert run.info.run_name == 'resnet34-random · Flat · 1.00[0,2]'  # the model first (issue 57)
    assert {k: run.data.params[k] for k in ("benchmark", "model", "codec", "score_norm", "k", "seed")} == {
        "benchmark": "disc", "model": "resnet34", "codec": "Flat", "score_norm": "1.00[0,2]", "k": "10", "seed": "0"}
    assert json.loads(run.data.params["model_options"]) == {"weights": "random"}
    # The numbers are the command's own (metrics.json), under plain names.
    records = json.loads(Path(client.download_artifacts(parent.info.run_id, "metrics.json")).read_text())["records"]
    normalized = next(r for r in records if r["score_norm"] == "1.00[0,2]")
    assert run.data.metrics["uap"] == normalized["uap"]

    found = client.search_runs([two_runs["experiment_id"]], "params.model = 'resnet34' and params.benchmark = 'disc'")
    assert sorted(r.data.tags["vsbench.variant"] for r in found) == sorted(second)  # one row per evaluation
    assert {r.data.tags["mlflow.parentRunId"] for r in found} == {parent.info.run_id}


def test_each_model_is_a_logged_model_ranked_per_dataset(two_runs, mlflow_tracking):
    client = MlflowClient()
    experiment_id = two_runs["experiment_id"]
    run = client.get_run(_children(client, two_runs, "efficientnet_lite0")["Flat · none"].info.run_id)
    [dataset] = run.inputs.dataset_inputs
    [model_input] = run.inputs.model_inputs  # the model this run evaluated (the runs table's Models column)
    model = client.get_logged_model(model_input.model_id)
    assert model.tags["mlflow.model.isExternal"] == "true" and model.model_type == "embedder"
    assert model.params["family"] == "efficientnet_lite0" and model.params["weights"] == "random initialization (seed 0)"
    assert json.loads(model.params["preprocessing"])["input_size"] > 0
    assert {(m.key, m.dataset_name, m.dataset_digest) for m in model.metrics} >= {
        ("uap", "disc", dataset.dataset.digest)}

    datasets = [{"dataset_name": "disc", "dataset_digest": dataset.dataset.digest}]
    for ascending in (False, True):
        ranked = client.search_logged_models(experiment_ids=[experiment_id], datasets=datasets, order_by=[
            {"field_name": "metrics.uap", "ascending": ascending, **datasets[0]}])
        values = [next(m.value for m in found.metrics if m.key == "uap") for found in ranked]
        assert len(values) == 4 and values == sorted(values, reverse=not ascending)  # 2 models x 2 variants


def test_compare_reads_the_commands_runs_with_variants_apart(two_runs, mlflow_tracking):
    records = collect_runs(two_runs["experiment"])
    assert {r.model for r in records} == {f'{m} {{"weights":"random"}} · Flat · {norm} (random features)'
                                          for m in MODELS for norm in ("none", "1.00[0,2]")}
    frame = leaderboard(records)  # no registry handed over: directions come from the runs' tags
    assert set(frame.metric) >= {"uap", "accuracy_at_1", "recall_at_p90"}
    assert frame[frame.metric == "uap"].higher_is_better.all()


def _evaluate(client: MlflowClient, parent: str, benchmark: str, model: str, records: list[dict], *,
              options: dict | None = None, lower: tuple[str, ...] = (), timestamp_ms: int | None = None) -> list[str]:
    embedder = Embedder(model=model, options=options or {})
    evaluations = evaluations_of(benchmark, records, embedder, run_params={"codecs": "Flat", "k": 10},
                                 data_digest="cd" * 32, declared_lower=lower)
    return log_evaluations(client, parent, evaluations, timestamp_ms=timestamp_ms)


def test_directions_come_from_the_run_and_model_options_stay_apart(mlflow_tracking, fresh_experiment):
    """A plugin's benchmark (unknown to this registry) declares mean_rank lower-is-better; the tag says
    so, and compare, the leaderboard and the Models tab rank it that way with no plugin installed."""
    client = MlflowClient()
    experiment_id = ensure_experiment(client, fresh_experiment)
    for bins, (rank, hit) in ((4, (3.0, 0.5)), (8, (7.0, 0.6))):
        parent = open_parent_run(fresh_experiment, f"kfp-bins-{bins}", "vsbench-similarity", {})
        records = [{"codec": "Flat", "mean_rank": rank, "hit_rate": hit}]
        ids = _evaluate(client, parent, "plugin_bench", "histogram", records, options={"bins": bins},
                        lower=("mean_rank",))
        assert _evaluate(client, parent, "plugin_bench", "histogram", records, options={"bins": bins},
                         lower=("mean_rank",)) == ids  # logged again: the same run, one value per metric
        assert len(client.get_metric_history(ids[0], "mean_rank")) == 1
        assert client.get_run(ids[0]).data.tags["vsbench.lower_is_better"] == "mean_rank"
        client.set_terminated(parent, "FINISHED")

    frame = leaderboard(collect_runs(fresh_experiment))
    rank = frame[frame.metric == "mean_rank"].set_index("model")
    assert list(rank.index) == ['histogram {"bins":4} · Flat', 'histogram {"bins":8} · Flat']  # two columns
    assert rank.loc['histogram {"bins":4} · Flat', "best"] and not rank.higher_is_better.any()
    hit = frame[frame.metric == "hit_rate"].set_index("model")
    assert hit.loc['histogram {"bins":8} · Flat', "best"]

    # Through a server the dataset filter needs its digest too (MLflow 3.17 sends a missing one as
    # NULL, which matches nothing); it is the evaluation run's dataset input's.
    [data] = client.get_run(ids[0]).inputs.dataset_inputs
    dataset = {"dataset_name": "plugin_bench", "dataset_digest": data.dataset.digest}
    ranked = client.search_logged_models(experiment_ids=[experiment_id], datasets=[dataset],
                                         order_by=[{"field_name": "metrics.mean_rank", "ascending": True, **dataset}])
    assert [m.params["model_options"] for m in ranked] == ['{"bins":4}', '{"bins":8}']  # lowest rank first


def test_a_week_of_nights_is_one_series_and_the_regression_reads_it(mlflow_tracking, fresh_experiment):
    """A night in the layout before issue 38 (long names on the parent), then nights in today's: each
    evaluation keeps its series and LoggedModel, its metrics sit at the night's day (a line per series
    in MLflow's charts), and the regression check compares across the two layouts."""
    client = MlflowClient()
    experiment_id = ensure_experiment(client, fresh_experiment)
    legacy = {"disc__efficientnet_lite0__Flat__none__uap": 0.50, "disc__efficientnet_lite0__Flat__none__accuracy_at_1": 0.6}
    record_pipeline_run(fresh_experiment, "vsbench-nightly", legacy)
    first_day = 20_500 * DAY_MS
    runs = []
    for night, uap in enumerate((0.51, 0.52, 0.40)):
        parent = open_parent_run(fresh_experiment, f"kfp-night-{night}", "vsbench-nightly", {})
        [run_id] = _evaluate(client, parent, "disc", "efficientnet_lite0",
                             [{"codec": "Flat", "score_norm": "none", "uap": uap, "accuracy_at_1": 0.6}],
                             timestamp_ms=first_day + night * DAY_MS)
        runs.append(run_id)
        report = check_regression(fresh_experiment, parent, threshold=0.02)
        assert report.previous_run_id is not None and report.compared == 2  # the night before, in any layout
        assert report.passed == (night < 2), report.drops
        client.set_terminated(parent, "FINISHED" if report.passed else "FAILED")
    assert report.drops[0]["metric"] == "disc__efficientnet_lite0__Flat__none__uap"

    evaluations = [client.get_run(run_id) for run_id in runs]
    assert len({run.data.tags[SERIES_TAG] for run in evaluations}) == 1
    assert [client.get_metric_history(run_id, "uap")[0].step for run_id in runs] == [
        day_of(first_day + night * DAY_MS) for night in range(3)]
    [model] = client.search_logged_models(experiment_ids=[experiment_id])
    assert len(model.metrics) == 6  # three nights x two metrics, on one model


# --- MLflow's own UI in a real browser ---------------------------------------------------------------------

COMPARE_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "mlflow-compare.png"
MODELS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "img" / "mlflow-models.png"
_KEY_CELL = re.compile(r'top: (\d+)px;[^"]*"><a title="Plot chart"[^>]*>([^<]+)<')
_VALUE_CELL = re.compile(r'left: (\d+)px; position: absolute; top: (\d+)px;[^"]*"><span[^>]*>([^<]+)</span>')


def _browse(url: str, profile: Path, *args: str) -> str:
    """A page of the MLflow UI in headless Chromium after its requests settled (virtual time), as a DOM
    or a screenshot (``--screenshot=...`` in ``args``)."""
    from .test_report_browser import _chromium

    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", "--virtual-time-budget=30000",
               "--window-size=1400,2400", *args, url]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _metric_rows(dom: str) -> dict[str, list[tuple[int, float]]]:
    """The compare page's Metrics table: metric -> [(column offset, value shown)], a row being the
    cells at one height of its two virtualized grids (names; values)."""
    section = dom[dom.index(">Metrics<"):dom.index(">Artifacts<")]
    names = {int(top): name for top, name in _KEY_CELL.findall(section)}
    rows: dict[str, list[tuple[int, float]]] = {name: [] for name in names.values()}
    for left, top, text in _VALUE_CELL.findall(section):
        if int(top) in names:
            rows[names[int(top)]].append((int(left), float(text)))
    return rows


def test_mlflow_compare_page_shows_both_models_in_one_row(two_runs, tmp_path):
    """The done-when of issue 38 in MLflow's own UI: two commands' evaluations of one variant side by
    side, every metric one row holding both values (before, each value sat alone beside a NaN)."""
    client = MlflowClient(two_runs["uri"])
    runs = [_children(client, two_runs, model)["Flat · none"] for model in MODELS]
    ids = json.dumps([run.info.run_id for run in runs])
    url = (f"{two_runs['uri']}/#/compare-runs?runs={urllib.parse.quote(ids)}"
           f"&experiments={urllib.parse.quote(json.dumps([two_runs['experiment_id']]))}")
    rows = _metric_rows(_browse(url, tmp_path / "profile", "--dump-dom"))

    assert set(rows) == set(runs[0].data.metrics)
    for metric, cells in rows.items():
        shown = [value for _, value in sorted(cells)]
        assert len(shown) == 2, (metric, cells)  # both models, one row
        for value, run in zip(shown, runs):
            assert abs(value - run.data.metrics[metric]) <= 5e-4 + 1e-9, (metric, value, run.data.metrics[metric])
    if os.environ.get("VSBENCH_UPDATE_SCREENSHOT") == "1":  # docs/tracking.md's pictures, from this very run
        from .test_failure_pages import _Chromium

        # Driven, not a one-shot --screenshot: the Assistant panel MLflow 3.17 opens took a third of the
        # picture; _Chromium.screenshot closes it first, as a person does once. 1440 px wide, as walked.
        browser = _Chromium(tmp_path / "profile-shot", (1440, 2400))
        try:
            browser.open(url)
            browser.wait("document.body.innerText.includes('recall_at_p90') && /Run Name:\\s+\\S/.test("
                         "document.body.innerText)", "the compare page's rows")
            browser.screenshot(COMPARE_SCREENSHOT)
            browser.open(f"{two_runs['uri']}/#/experiments/{two_runs['experiment_id']}/models?"
                         "workflowType=machine_learning")
            browser.wait(" && ".join(f"document.body.innerText.includes({json.dumps(model)})" for model in MODELS),
                         "the Models tab's rows")
            browser.screenshot(MODELS_SCREENSHOT)
        finally:
            browser.close()


def _charted(url: str, profile: Path, timeout: float = 150.0) -> dict[str, list[dict]]:
    """The plotted data of every chart on an MLflow UI page (metric -> Plotly traces), read from the
    live page through Chromium's DevTools protocol once every chart has drawn: a chart is a canvas and
    SVG that a DOM dump taken at one moment does not hold."""
    import time
    import urllib.request

    import websocket

    from .test_report_browser import _chromium

    browser = subprocess.Popen([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                "--no-first-run", "--disable-background-networking", "--disable-sync",
                                "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1400,1400",
                                url], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    script = ("JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => ({"
              "text: (el.closest('[data-testid]') || el.parentElement.parentElement).textContent, traces: (el.data || []).map(t => ({x: t.x, y: t.y, mode: t.mode || ''}))})))")
    try:
        deadline = time.monotonic() + timeout
        port_file = profile / "DevToolsActivePort"
        while not (port_file.exists() and port_file.read_text().strip()):
            assert time.monotonic() < deadline, "Chromium did not open its DevTools port"
            time.sleep(0.2)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as answer:
            [page] = [target for target in json.load(answer) if target["type"] == "page"]
        socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        charts: list[dict] = []
        for ask in range(10_000):
            socket.send(json.dumps({"id": ask, "method": "Runtime.evaluate",
                                    "params": {"expression": script, "returnByValue": True}}))
            while (reply := json.loads(socket.recv())).get("id") != ask:
                pass
            charts = json.loads(reply["result"]["result"]["value"])
            if charts and all(chart["traces"] for chart in charts) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        socket.close()
    finally:
        browser.terminate()
        browser.wait(timeout=30)
    # A chart's legend names its metric: "disc · resnet34 · Flat · none · 8e0e8143b3 (uap)".
    return {metric: chart["traces"] for chart in charts for metric in set(re.findall(r"\((\w+)\)", chart["text"]))}


def test_the_evaluations_view_draws_a_week_of_nights_as_a_line_per_evaluation(mlflow_tracking, fresh_experiment,
                                                                               tmp_path):
    """The done-when of issue 38 over time: seven nights of two models, opened at the link a command
    prints (the experiment's evaluations view), are two lines in MLflow's own chart of each metric,
    each through the seven nights at their times (the view's date axis), with the values logged."""
    from vsbench.tracking.views import evaluations_page

    client = MlflowClient()
    experiment_id = ensure_experiment(client, fresh_experiment)
    first_day = 20_600 * DAY_MS
    logged: dict[str, list[tuple[int, float]]] = {model: [] for model in MODELS}
    for night in range(7):
        parent = open_parent_run(fresh_experiment, f"kfp-night-{night}", "vsbench-nightly", {})
        for model, base in zip(MODELS, (0.5, 0.3)):
            uap = round(base + 0.01 * night * (1 if model == MODELS[0] else -1), 4)
            _evaluate(client, parent, "disc", model, [{"codec": "Flat", "score_norm": "none", "uap": uap}],
                      timestamp_ms=first_day + night * DAY_MS + 3_600_000)
            logged[model].append((first_day + night * DAY_MS + 3_600_000, uap))  # wall time: a date axis
        client.set_terminated(parent, "FINISHED")

    charts = _charted(evaluations_page(experiment_id, "disc", mlflow_tracking), tmp_path / "profile")
    assert "uap" in charts, sorted(charts)
    lines = {tuple(zip(trace["x"], (round(y, 4) for y in trace["y"])))
             for trace in charts["uap"] if "lines" in trace["mode"] and None not in trace["x"]}
    assert lines == {tuple(points) for points in logged.values()}  # one line per evaluation, a point a night


def test_report_links_open_mlflow_in_the_view_whose_labels_agree(two_runs, tmp_path, mlflow_tracking):
    """The report's run links open MLflow's model-training view: the run page says "Runs" (its
    breadcrumb) and the experiment has a Models tab; the default GenAI view would say "Evaluations"
    for the same run and "Training runs" for the list."""
    from vsbench.tracking.views import run_page as run_url

    run = _children(MlflowClient(), two_runs, "resnet34")["Flat · none"]
    page = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", _browse(run_url(run.info.run_id, two_runs["experiment_id"]),
                                                                tmp_path / "profile", "--dump-dom")))
    assert " Runs " in page and " Models " in page and run.info.run_name in page
    assert "Evaluations" not in page and "Training runs" not in page


def test_a_model_file_the_user_named_is_the_logged_models_artifact(mlflow_tracking, fresh_experiment, tmp_path):
    """Live (the command uploading its own run): the file goes up with the model; a later upload of a
    bundle (``upload_files=False``) records its digest only, never reading a file outside its folder."""
    client = MlflowClient()
    weights = tmp_path / "model.pt"
    weights.write_bytes(b"scripted network")
    parent = open_parent_run(fresh_experiment, "kfp-file", "vsbench-similarity", {})
    for upload, codec in ((True, "Flat"), (False, "PCA8,Flat")):
        embedder = Embedder(model="torchscript", options={"path": str(weights)}, weights_sha256="path:" + "f" * 64,
                            files={"path": str(weights)})
        [evaluation] = evaluations_of("disc", [{"codec": codec, "uap": 0.5}], embedder, run_params={})
        [run_id] = log_evaluations(client, parent, [evaluation], upload_files=upload)
        [model_input] = client.get_run(run_id).inputs.model_inputs
        listed = {a.path for a in client.list_logged_model_artifacts(model_input.model_id)}
        listed |= {a.path for a in client.list_logged_model_artifacts(model_input.model_id, "files/path")}
        assert ("files/path/model.pt" in listed) == upload and "MLmodel" in listed, listed
        assert client.get_logged_model(model_input.model_id).params["weights_sha256"] == "path:" + "f" * 64


def test_a_store_written_by_main_before_the_layout_is_read_beside_new_runs(tmp_path, monkeypatch):
    """tests/integration/stores/main-fb103dd.mlflow.db.gz: a command's run and a nightly parent as main
    wrote them (every number on the parent, long names). compare reads them, options kept apart; a
    night in the new layout is checked against the old night, metric for metric."""
    import gzip
    import shutil
    import sys

    db = tmp_path / "mlflow.db"
    with gzip.open(Path(__file__).parent / "stores" / "main-fb103dd.mlflow.db.gz") as packed, open(db, "wb") as out:
        shutil.copyfileobj(packed, out)
    uri = f"sqlite:///{db}"
    mlflow_cli = Path(sys.executable).with_name("mlflow")
    subprocess.run([str(mlflow_cli), "db", "upgrade", uri], check=True, capture_output=True, timeout=120)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv(ARTIFACT_LOCATION_ENV, str(tmp_path / "artifacts"))

    old = collect_runs("legacy")
    command = [r for r in old if r.benchmark == "patch_pairs"]
    assert {r.model for r in command} == {'efficientnet_lite0 {"weights":"random"} (random features)'}
    assert "mean__l2__mean_pr_ap" in command[0].metrics and command[0].lower_is_better is None
    assert {(r.model, r.benchmark) for r in old if r.pipeline == "vsbench-nightly"} == {
        ("efficientnet_lite0", "disc"), ("baselines", "abid")}

    client = MlflowClient()
    parent = open_parent_run("legacy", "kfp-new-night", "vsbench-nightly", {})
    _evaluate(client, parent, "disc", "efficientnet_lite0",
              [{"codec": "Flat", "score_norm": "none", "uap": 0.40, "accuracy_at_1": 0.61}])
    report = check_regression("legacy", parent, threshold=0.02)
    assert report.compared == 2 and report.missing == ["abid__baselines__counting_rmse"]
    assert [d["metric"] for d in report.drops] == ["disc__efficientnet_lite0__Flat__none__uap"]
    client.set_terminated(parent, "FINISHED")  # (a failed night is no baseline, and compare skips it)
    both = collect_runs("legacy", pipeline="vsbench-nightly")
    assert {r.model for r in both if r.benchmark == "disc"} == {"efficientnet_lite0", "efficientnet_lite0 · Flat · none"}
