"""MLflow's pages as a person reads them (issue 48), in headless Chromium at 1600x900 against a real
``mlflow server``.

Three nights of two models (two variants each) are logged as the nightly pipeline logs them; then a
command's run is recorded by a process of its own, as ``vsbench similarity run`` records it, and its
output is read: vsbench's links only (MLflow's "View run" lines suppressed), each in the Model
training view. The links it prints are then opened: the leaderboard (evaluation runs as rows, the
headline metrics and model params visible without scrolling sideways, best first), the evaluations
chart (a date axis, every line named in its legend), and the Models tab (readable names).
``VSBENCH_UPDATE_SCREENSHOT=1`` copies the screenshots to docs/img (docs/tracking.md's pictures).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from vsbench.tracking.evaluations import Embedder, evaluations_of, log_evaluations
from vsbench.tracking.runs import ensure_experiment, open_parent_run

from .test_failure_pages import _Chromium

pytestmark = pytest.mark.integration

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
WINDOW = (1440, 900)  # the window issue 57 was walked at
DAY_MS = 86_400_000
MODELS = {"resnet34": 0.5, "efficientnet_lite0": 0.4}
NORMS = {"none": 0.0, "1.00[0,2]": 0.03}
HEADLINES = ("uap", "accuracy_at_1", "recall_at_p90")
LINES = {f"{m}-random · Flat · {n}" for m in MODELS for n in NORMS}

_COMMAND = textwrap.dedent("""
    import sys
    import time
    from pathlib import Path
    from vsbench.tracking.command import record_command_run
    from vsbench.tracking.evaluations import Embedder, evaluations_of
    records = [{"codec": "Flat", "score_norm": "none", "uap": 0.53, "uap_ci95_low": 0.4125, "uap_ci95_high": 0.6431,
                "accuracy_at_1": 0.7, "recall_at_p90": 0.4}]
    evaluations = evaluations_of("disc", records, Embedder(model="resnet34", options={"weights": "random"}),
                                 run_params={"codecs": "Flat", "k": 10}, data_digest="cd" * 32)
    record_command_run(Path(sys.argv[1]), experiment=sys.argv[2], pipeline="vsbench-similarity",
                       params={"benchmark": "disc", "model": "resnet34"}, metrics={}, evaluations=evaluations,
                       started=time.time() - 5, title="resnet34-random · disc")
""")


def _pair_records(base: float) -> list[dict]:
    """patch_pairs' records: a split a record, counts beside the scores, and the mean split last."""
    splits = [{"variant": split, "distance": "l2", "roc_auc": base + 0.3, "pr_ap": base + shift,
               "num_positives": 40, "num_negatives": 40}
              for split, shift in (("easy_diffseq", 0.1), ("hard_sameseq", -0.1))]
    return [*splits, {"variant": "mean", "distance": "l2", "mean_pr_ap": base}]


def _records(base: float, night: int) -> list[dict]:
    """A night's records, each headline with its interval as a score logs it (the leaderboard's picture
    showed the nights' headlines bare, which no evaluation logs)."""
    return [{"codec": "Flat", "score_norm": norm, "uap": round(base + shift + 0.01 * night, 4),
             "uap_ci95_low": round(base + shift + 0.01 * night - 0.1, 4),
             "uap_ci95_high": round(base + shift + 0.01 * night + 0.1, 4),
             "accuracy_at_1": round(base + 0.2 + shift, 4), "recall_at_p90": round(base - 0.1 + shift, 4)}
            for norm, shift in NORMS.items()]


@pytest.fixture(scope="module")
def shown(mlflow_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The experiment, the command's output, and a Chromium to open its links."""
    root = tmp_path_factory.mktemp("as-read")
    experiment = f"as-read-{root.name}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
        client = MlflowClient()
        experiment_id = ensure_experiment(client, experiment)
        now = int(time.time() * 1000)
        for night in range(3):
            parent = open_parent_run(experiment, f"kfp-night-{night}", "vsbench-nightly", {})
            for model, base in MODELS.items():
                evaluations = evaluations_of("disc", _records(base, night), Embedder(model=model, options={"weights": "random"}),
                                             run_params={"codecs": "Flat", "k": 10}, data_digest="cd" * 32)
                log_evaluations(client, parent, evaluations, timestamp_ms=now - (3 - night) * DAY_MS)
                # Another benchmark in the same experiment: its lines must not reach DISC's legend.
                pairs = evaluations_of("patch_pairs", _pair_records(base), Embedder(model=model),
                                       run_params={}, data_digest="ef" * 32, split_field="variant",
                                       headline_split="mean")
                log_evaluations(client, parent, pairs, timestamp_ms=now - (3 - night) * DAY_MS)
            client.set_terminated(parent, "FINISHED")
        env = {k: v for k, v in os.environ.items() if k != "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"}
        env.update(MLFLOW_TRACKING_URI=mlflow_server, PYTHONPATH=os.pathsep.join(sys.path))
        command = subprocess.run([sys.executable, "-c", _COMMAND, str(root / "bundle.json"), experiment],
                                 capture_output=True, text=True, timeout=120, env=env)
        assert command.returncode == 0, command.stderr[-3000:]
        browser = _Chromium(root / "profile", WINDOW)
        try:
            yield {"client": client, "experiment_id": experiment_id, "output": command.stdout, "browser": browser,
                   "root": root}
        finally:
            browser.close()


def _link(output: str, label: str) -> str:
    """The URL printed on the line after ``label`` (``leaderboard (disc, best first):``, issue 57)."""
    return re.search(rf"^\s*{label}\b[^\n]*:\n\s*(\S+)", output, re.M).group(1)


def _keep(path: Path, name: str) -> None:
    if os.environ.get("VSBENCH_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(path, DOCS_IMG / name)


def test_the_command_prints_only_vsbench_links_each_in_the_model_training_view(shown):
    output = shown["output"]
    assert "View run" not in output and "View experiment" not in output, output  # MLflow's own lines
    urls = re.findall(r"https?://\S+/#/\S+", output)  # pages (the store's own address is named too)
    assert len(urls) == 3, output  # run page, leaderboard, evaluations
    assert all("workflowType=machine_learning" in url for url in urls), urls


def test_the_leaderboard_shows_evaluations_as_rows_with_their_columns_best_first(shown):
    browser = shown["browser"]
    browser.open(_link(shown["output"], "leaderboard"))
    headers = browser.wait("(h => h.length > 5 && h)(Array.from(document.querySelectorAll('.ag-header-cell[col-id]'))"
                           ".map(e => [e.getAttribute('col-id'), e.getBoundingClientRect().right]))", "the runs table")
    wanted = ({"params.`headline`"} | {"metrics.`uap`"}
              | {f"params.`{p}`" for p in ("model_name", "codec", "score_norm")})
    right = dict(headers)
    assert wanted <= set(right), (str(headers), browser.value("Array.from(document.querySelectorAll('.ag-header-cell'))"
                                                         ".map(e => e.getAttribute('col-id') + '=' + e.innerText)"))
    assert all(right[column] <= WINDOW[0] for column in wanted), headers  # no scrolling sideways
    assert browser.value("document.scrollingElement.scrollWidth <= window.innerWidth")  # nor the page
    # What a person reads (issue 57): the model's whole name, and the headline with its interval, low < high.
    cells = browser.value("Array.from(document.querySelectorAll('.ag-center-cols-container .ag-row')).map(r => "
                          "[r.querySelector('[col-id=\"params.`model_name`\"]'), "
                          "r.querySelector('[col-id=\"params.`headline`\"]')].map(c => "
                          "[c.innerText.trim(), [c, ...c.querySelectorAll('*')].every(e => e.scrollWidth <= e.clientWidth + 1"
                          " && e.getBoundingClientRect().right <= c.getBoundingClientRect().right + 1)]))")
    assert cells and all(name_shown and value_shown for (_, name_shown), (_, value_shown) in cells), cells
    assert {name for (name, _), _ in cells} == {f"{m}-random" for m in MODELS}, cells
    for _, (value, _) in cells:
        found = re.fullmatch(r"(\d\.\d{4}) \[(\d\.\d{4}), (\d\.\d{4})\]", value)
        assert found, value  # every evaluation logged its interval
        assert float(found[2]) <= float(found[1]) <= float(found[3]), value
    assert "0.5300 [0.4125, 0.6431]" in {value for _, (value, _) in cells}, cells
    rows = browser.wait("(r => r.length >= 13 && r)(Array.from(document.querySelectorAll("
                        "'.ag-center-cols-container .ag-row')).map(r => [Number(r.getAttribute('row-index')), "
                        "r.querySelector('[col-id=\"metrics.`uap`\"]').innerText]))", "every evaluation as a row")
    uap = [float(value) for _, value in sorted(rows)]
    assert len(uap) == 13 and uap == sorted(uap, reverse=True), rows  # 3 nights x 4 + the command's; no parent
    names = browser.value("Array.from(document.querySelectorAll('.ag-pinned-left-cols-container .ag-row')).map(r => r.innerText)")
    assert any("resnet34-random" in name for name in names), names
    _keep(browser.screenshot(shown["root"] / "leaderboard.png"), "mlflow-leaderboard.png")


def test_the_evaluations_chart_has_a_date_axis_and_names_every_line(shown):
    browser = shown["browser"]
    browser.open(_link(shown["output"], "evaluations"))
    charts = browser.wait("(c => c.length && c.every(x => x.x.length) && c)(Array.from(document.querySelectorAll("
                          "'.js-plotly-plot')).map(el => ({x: (el.data || []).flatMap(t => (t.x || []).filter(v => v !== null)), "
                          "axis: el.layout && el.layout.xaxis && el.layout.xaxis.type})))", "the charts")
    assert all(min(chart["x"]) > 1e12 for chart in charts), charts  # wall-time milliseconds, not a day number
    assert {chart["axis"] for chart in charts} == {"date"}, charts
    legend = browser.value("Array.from(document.querySelectorAll('.js-plotly-plot')).slice(0, 1).map(el => "
                           "{ let c = el; for (let i = 0; i < 6; i++) c = c.parentElement; return c.innerText; })[0]")
    named = {line for line in LINES if f"{line} (uap)" in legend or f"{line} (accuracy_at_1)" in legend}
    assert named == LINES, legend
    # Only lines that are drawn (issue 57): no patch_pairs line in a DISC chart, no two lines one colour.
    assert " · l2" not in legend and "mean" not in legend, legend
    drawn = browser.value("Array.from(document.querySelectorAll('.js-plotly-plot')).slice(0, 1).map(el => (el.data || [])"
                          ".filter(t => (t.x || []).some(v => v !== null) && String(t.mode).includes('lines'))"
                          ".map(t => (t.marker || {}).color || '').filter(c => /^#[0-9a-f]{6}$/i.test(c)))[0]")
    assert len(drawn) == len(LINES) == len(set(drawn)), drawn  # a line each (its band aside), no colour twice
    _keep(browser.screenshot(shown["root"] / "chart.png"), "mlflow-evaluations-chart.png")


def test_the_models_tab_names_models_as_people_read_them(shown):
    client, experiment_id = shown["client"], shown["experiment_id"]
    names = {model.name for model in client.search_logged_models(experiment_ids=[experiment_id])}
    # One per identity, options in params; patch_pairs' splits are one model's rows (issue 57).
    assert names == {line.replace(".", "_") for line in LINES} | {f"{m} · l2" for m in MODELS}, names
    browser = shown["browser"]
    browser.open(f"{client.tracking_uri}/#/experiments/{experiment_id}/models?workflowType=machine_learning")
    browser.wait("document.body.innerText.includes('resnet34-random') && document.body.innerText.includes("
                 "'efficientnet_lite0-random')", "the Models tab's names")
    _keep(browser.screenshot(shown["root"] / "models.png"), "mlflow-models-named.png")


def test_the_run_page_opens_on_the_best_evaluations_numbers(shown):
    """The run link a command prints (issue 57): its page lists the best evaluation's headline and its
    interval, not "No metrics recorded"; the evaluation under it ran for a while, not ``0ms``."""
    client, browser = shown["client"], shown["browser"]
    link = _link(shown["output"], "run page")
    browser.open(link)
    text = browser.wait("(t => t.includes('best.disc.uap') && t)(document.body.innerText)", "the parent's metrics")
    assert "No metrics recorded" not in text and "best.disc.uap_ci95_low" in text, text[:3000]
    parent = client.get_run(re.search(r"/runs/(\w+)", link).group(1))
    assert parent.data.metrics["best.disc.uap"] == 0.53
    [child] = client.search_runs([shown["experiment_id"]], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    assert child.info.end_time - child.info.start_time >= 4000  # the command's own start and end
    assert parent.data.tags["vsbench.best.disc"] == "resnet34-random · Flat · none: uap 0.5300 [0.4125, 0.6431]"
    assert not browser.value("document.scrollingElement.scrollWidth > window.innerWidth")
    _keep(browser.screenshot(shown["root"] / "run.png"), "mlflow-run-page.png")


def test_the_compare_page_reads_models_by_name_and_intervals_low_then_high(shown):
    """MLflow's compare page of two evaluations (issue 57): its plots' labels name the models as read
    (``resnet34-random``), never options as JSON (``{"weights"``), and the ``headline`` row shows the
    interval low then high."""
    import json
    import urllib.parse

    client, browser = shown["client"], shown["browser"]
    # The command's resnet34 run and efficientnet_lite0's last night (picked by model: the nights' two
    # models share one start time, so an order by time alone ties).
    runs = [client.search_runs([shown["experiment_id"]], "tags.`vsbench.benchmark` = 'disc' and "
                               f"tags.`vsbench.variant` = 'Flat · none' and tags.`vsbench.model` = '{model}'",
                               order_by=["attributes.start_time DESC"])[0]
            for model in ("resnet34", "efficientnet_lite0")]
    ids = json.dumps([run.info.run_id for run in runs])
    browser.open(f"{client.tracking_uri}/#/compare-runs?runs={urllib.parse.quote(ids)}"
                 f"&experiments={urllib.parse.quote(json.dumps([shown['experiment_id']]))}")
    text = browser.wait("(t => t.includes('recall_at_p90') && /Run Name:\\s+\\S/.test(t) && /headline\\s+\\d/.test(t)"
                        " && document.querySelector('.js-plotly-plot svg text') && t)(document.body.innerText)",
                        "the compare page, its run details, params and plots")
    labels = browser.value("Array.from(document.querySelectorAll('.js-plotly-plot text, svg text'))"
                           ".map(e => e.textContent)")
    assert not any('{"' in label for label in labels), labels
    # Run details: each run named by its model then its variant, whole (no benchmark in front).
    assert re.search(r"Run Name:\s+resnet34-random · Flat · none\s+efficientnet_lite0-random · Flat · none", text), text
    # Its headline param: the command's value and interval, low then high.
    assert re.search(r"headline\s+0\.5300 \[0\.4125, 0\.6431\]\s+0\.4200 \[0\.3200, 0\.5200\]", text), text
    _keep(browser.screenshot(shown["root"] / "compare.png"), "mlflow-compare-named.png")


def test_the_metric_page_with_x_axis_wall_draws_no_date_axis_for_an_evaluation(shown):
    """docs/tracking.md on a click on a metric (issue 57), checked as a person meets it: MLflow 3.17's
    metric page, even with ``x_axis=wall`` (and the ``metric`` its address needs: without it the page
    says "invalid URL"), draws an evaluation (one value a run, one run a night) as an empty bar chart,
    on no date axis; the link that plots the nights against dates is the evaluations view's
    (test_the_evaluations_chart_has_a_date_axis_and_names_every_line). Should MLflow draw it, this
    fails and the docs' workaround can come back."""
    import json
    import urllib.parse

    client, browser = shown["client"], shown["browser"]
    [run] = client.search_runs([shown["experiment_id"]], "tags.`vsbench.benchmark` = 'disc' and "
                               "tags.`vsbench.variant` = 'Flat · none' and tags.`vsbench.model` = 'resnet34'",
                               order_by=["attributes.start_time DESC"], max_results=1)
    [point] = client.get_metric_history(run.info.run_id, "uap")
    query = urllib.parse.urlencode({"runs": json.dumps([run.info.run_id]), "metric": json.dumps("uap"),
                                    "experiments": json.dumps([shown["experiment_id"]]),
                                    "plot_metric_keys": json.dumps(["uap"]), "x_axis": "wall"})
    browser.open(f"{client.tracking_uri}/#/metric/uap?{query}")
    # The page has read the run's value (its table) and drawn its chart.
    browser.wait(f"document.body.innerText.includes('{point.value:g} (step={point.step})') && "
                 "document.querySelector('.js-plotly-plot') && (document.querySelector('.js-plotly-plot').data || "
                 "[]).length", "the metric page's table and chart")
    charts = browser.value("Array.from(document.querySelectorAll('.js-plotly-plot')).map(el => ({types: (el.data || "
                           "[]).map(t => t.type), drawn: (el.data || []).flatMap(t => (t.x || []).filter(v => v != null)),"
                           " axis: (el.layout && el.layout.xaxis && el.layout.xaxis.type) || ''}))")
    assert charts and all(chart["types"] == ["bar"] and chart["drawn"] == [] and chart["axis"] != "date"
                          for chart in charts), charts
    assert "invalid URL" not in browser.value("document.body.innerText")
