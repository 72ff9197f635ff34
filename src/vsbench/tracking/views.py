"""Links into MLflow's own UI, and the saved view that shows nightly evaluations as lines.

A user should not have to learn MLflow's UI to see what issue 38's layout is for. Two things make
the numbers one click away:

* **Links** (:func:`run_page`, :func:`artifact_page`, :func:`evaluations_page`): a command prints
  them when its run is in MLflow, and the HTML report links every value and failure sheet. They
  open the UI's *Model training* view (:data:`ML_VIEW`): MLflow 3.17 picks its labels from the
  sidebar's GenAI | Model training switch, not from the experiment's kind tag, and only that view
  says "Runs" and has the Models tab. A server store links to itself; a local store (sqlite, files)
  to what ``mlflow ui`` serves, or to ``VSBENCH_MLFLOW_UI``.
* **The evaluations view** (:func:`evaluations_key`, one per benchmark): a *shared view* of the experiment, which is
  how MLflow's own "Share" button saves one: the tag ``mlflow.sharedViewState.<key>`` holds the
  runs page's state as JSON, and ``?viewStateShareKey=<key>`` opens it. vsbench's view lists the
  evaluation runs only, grouped by ``vsbench.series``, in the chart view: the UI draws a group as
  one line through its runs' steps (each night logs at its UTC day), so a week of nights of one
  evaluation is one line per metric chart and two models are two lines. The state's field names
  are those of MLflow 3.17's UI (``groupBy``, ``runsHiddenMode``...); an older or newer UI ignores
  a field it does not know, and the link still opens the experiment. Its charts plot against wall
  time (``globalLineChartConfig.xAxisKey = "time"``): the x axis reads as dates, not as the step
  (a day number, 20.78k), and each line is labelled ``vsbench.line`` (``resnet34-random · Flat · none``).
* **The leaderboard view** (:func:`leaderboard_page`, one per benchmark, key
  ``vsbench-leaderboard-<benchmark>``): the runs table with that benchmark's evaluation runs as
  rows (their parents filtered out, so nothing is nested under a collapsed parent), the headline
  metrics and the model's params as the visible columns, sorted best first by the headline metric.

MLflow prints its own "View run / View experiment" lines when a run ends; they open the GenAI view.
:data:`SUPPRESS_URLS_ENV` (MLflow's documented switch) is set for every process that imports
``vsbench.tracking``, so the links above are the only ones a command prints.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from typing import Any

UI_ENV = "VSBENCH_MLFLOW_UI"  # where links point when the store is not a server (default DEFAULT_UI)
DEFAULT_UI = "http://127.0.0.1:5000"  # what `mlflow ui` serves
ML_VIEW = "workflowType=machine_learning"  # the UI's Model training view (see the module docstring)
SHARED_VIEW_TAG = "mlflow.sharedViewState."  # MLflow's own prefix for a saved, shareable view
EVALUATIONS_VIEW = "vsbench-evaluations"
LEADERBOARD_VIEW = "vsbench-leaderboard-"  # + the benchmark: one saved leaderboard per benchmark
SUPPRESS_URLS_ENV = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"  # MLflow's own "View run ..." lines off


def ui_base(uri: str | None = None) -> str:
    """The UI's address for the tracking store ``uri`` (default: the current one)."""
    if uri is None:
        from vsbench.tracking.runs import tracking_uri

        uri = tracking_uri()
    override = os.environ.get(UI_ENV, "").strip()
    if override:
        return override.rstrip("/")
    return uri.rstrip("/") if uri.startswith(("http://", "https://")) else DEFAULT_UI


def served(uri: str) -> bool:
    """Whether the store is a server (its links work as they are), not a local store needing ``mlflow ui``."""
    return uri.startswith(("http://", "https://"))


def run_page(run_id: str, experiment_id: str, uri: str | None = None) -> str:
    """A run's page, in the Model training view."""
    return f"{ui_base(uri)}/#/experiments/{experiment_id or '0'}/runs/{run_id}?{ML_VIEW}"


def artifact_page(run_id: str, experiment_id: str, path: str, uri: str | None = None) -> str:
    """A run's Artifacts tab with the artifact ``path`` selected and previewed (an image drawn, an HTML
    page rendered): MLflow 3's route ``runs/<run>/artifacts/<path>`` (its UI's ``getRunPageRoute``)."""
    quoted = urllib.parse.quote(path.strip("/"), safe="/")
    return f"{ui_base(uri)}/#/experiments/{experiment_id or '0'}/runs/{run_id}/artifacts/{quoted}?{ML_VIEW}"


def evaluations_key(benchmark: str) -> str:
    """The shared view key of ``benchmark``'s evaluations chart: one per benchmark (issue 57), since
    MLflow's legend names every group the view holds in every chart, drawn there or not (a DISC chart
    listed patch_pairs lines, which have no DISC metric)."""
    from vsbench.tracking.names import safe_part

    return f"{EVALUATIONS_VIEW}-{safe_part(benchmark)}"


def evaluations_page(experiment_id: str, benchmark: str, uri: str | None = None) -> str:
    """``benchmark``'s evaluations view: the chart view, one line per evaluation over the nights."""
    query = urllib.parse.urlencode({"viewStateShareKey": evaluations_key(benchmark), "compareRunsMode": "CHART"})
    return f"{ui_base(uri)}/#/experiments/{experiment_id}/runs?{query}&{ML_VIEW}"


def leaderboard_key(benchmark: str) -> str:
    """The shared view key of ``benchmark``'s leaderboard (MLflow keeps it in an experiment tag)."""
    from vsbench.tracking.names import safe_part

    return LEADERBOARD_VIEW + safe_part(benchmark)


def leaderboard_page(experiment_id: str, benchmark: str, uri: str | None = None) -> str:
    """The runs table as a leaderboard of ``benchmark``'s evaluations (see the module docstring)."""
    query = urllib.parse.urlencode({"viewStateShareKey": leaderboard_key(benchmark), "compareRunsMode": "TABLE"})
    return f"{ui_base(uri)}/#/experiments/{experiment_id}/runs?{query}&{ML_VIEW}"


def column(kind: str, name: str) -> str:
    """A runs-table column as MLflow 3.17's UI names it in ``selectedColumns`` and ``orderByKey``
    (its ``makeCanonicalSortKey``): ``metrics.`uap```, ``params.`model```."""
    return f"{kind}.`{name}`"


def save_shared_view(client: Any, experiment_id: str, key: str, state: dict[str, Any]) -> None:
    """Save a runs-page ``state`` as the experiment's shared view ``key``, unless it already holds this
    very state (one read per upload; a user's own shared views, under other keys, are left alone)."""
    value = json.dumps(state, sort_keys=True)
    tag = SHARED_VIEW_TAG + key
    if (client.get_experiment(experiment_id).tags or {}).get(tag) != value:
        client.set_experiment_tag(experiment_id, tag, value)
