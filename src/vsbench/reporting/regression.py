"""The nightly regression check: tonight's parent run against the previous good night, in MLflow.

A night's numbers are read from its evaluation runs (one per evaluation, nested under the night's
parent, issue 38) and, for nights logged before, from the parent itself (:func:`night_metrics`);
each evaluation is named as the parent held it before (``disc__<model>__<variant>__<metric>``), so
one evaluation is compared with itself the night before (the same ``vsbench.series``), and rules
written as patterns of those names keep working. A metric's direction is its run's own
``vsbench.lower_is_better`` tag where it has one.

The baseline is the newest FINISHED parent run of the same pipeline in the experiment that started
before tonight's run. A night that failed (a regression included) is never a baseline, so a drop
cannot become tomorrow's normal by failing once. The outcome is recorded on tonight's run, where
whoever looks at the run in MLflow sees it:

* tag ``vsbench.regression`` = ``passed`` | ``failed`` | ``no-baseline``
* tag ``vsbench.regression.baseline`` = the baseline's run id (when there is one)
* tag ``vsbench.regression.rule`` = the threshold and whether it is absolute or relative
* metric ``regression_drops`` = how many metrics dropped (or went missing, when named)
* artifact ``regression.json`` = :meth:`RegressionReport.as_dict`

Raising is the caller's job (:class:`RegressionError`), so the outcome is on the run before the
pipeline step fails.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vsbench.reporting.runs import (
    BOOKKEEPING_METRICS,
    LowerIsBetter,
    evaluation_record,
    experiment_id,
    higher_is_better,
    parent_run_filter,
)
from vsbench.tracking.evaluations import MODEL_OPTIONS_TAG, MODEL_TAG, NAME_JOIN, VARIANT_TAG
from vsbench.tracking.names import SEPARATOR, split_run_metric

REGRESSION_TAG = "vsbench.regression"
BASELINE_TAG = "vsbench.regression.baseline"
RULE_TAG = "vsbench.regression.rule"
DROPS_METRIC = "regression_drops"
ARTIFACT = "regression.json"
DEFAULT_PIPELINE = "vsbench-nightly"


class RegressionError(RuntimeError):
    """Raised by the caller (the nightly's regression step) when a check did not pass."""

    one_line = True  # an expected failure: its message says all (the CLI prints no traceback)


@dataclass(frozen=True)
class RegressionReport:
    """``drops``: one dict per metric that got worse by more than the threshold (``metric``,
    ``previous``, ``current``, ``change`` = current - previous, ``higher_is_better``); a named metric
    that the baseline had and tonight lacks is a drop with ``current`` and ``change`` None.
    ``missing``: metrics the baseline had and tonight lacks (they fail the check only when named)."""

    current_run_id: str
    previous_run_id: str | None
    threshold: float
    drops: list[dict[str, Any]]
    passed: bool
    relative: bool = False
    compared: int = 0
    missing: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.previous_run_id is None:
            return "no-baseline"
        return "passed" if self.passed else "failed"

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, **asdict(self)}


def _worse_by(previous: float, current: float, higher: bool, relative: bool) -> float:
    """How much worse ``current`` is than ``previous`` (absolute, or as a fraction of ``previous``)."""
    worse = previous - current if higher else current - previous
    if not relative:
        return worse
    if previous == 0:
        return math.inf if worse > 0 else 0.0
    return worse / abs(previous)


def _beyond(worse: float, threshold: float) -> bool:
    """Strictly beyond the threshold: a drop of exactly ``threshold`` passes, even through float
    rounding (0.80 - 0.78 is 0.020000000000000018)."""
    return worse > threshold and not math.isclose(worse, threshold, rel_tol=1e-9, abs_tol=1e-12)


def _higher_is_better(name: str, lower_is_better: LowerIsBetter, directions: Mapping[str, bool]) -> bool:
    """A night's metric's direction: what its evaluation run's tag says (``directions``); else, for a
    run logged before issue 38, ``<benchmark>__<model>__<metric>`` with its benchmark's lower-is-better
    metrics (a plugin's ``mean_rank``), any other name by its words."""
    if name in directions:
        return directions[name]
    split = split_run_metric(name)
    return higher_is_better(split[2], lower_is_better.get(split[0], ())) if split else higher_is_better(name)


def compare_metrics(previous: Mapping[str, float], current: Mapping[str, float], *, threshold: float,
                    relative: bool = False, metrics: Sequence[str] | None = None,
                    lower_is_better: LowerIsBetter | None = None, directions: Mapping[str, bool] | None = None,
                    ) -> tuple[list[dict[str, Any]], list[str], int]:
    """The pure core of the check: (drops, missing, how many metrics were compared).

    ``metrics`` are names or shell-style patterns (``disc__*__uap``); None means every metric the
    baseline has (bookkeeping metrics aside). A named pattern that matches no metric of either run
    is reported missing, so a typo in the rule cannot turn the check into a silent pass.
    ``lower_is_better``: benchmark -> the metrics its spec declares lower-is-better; ``directions``:
    name -> higher is better, as the runs' own tags say (they win).
    """
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    candidates = [name for name in previous if name not in BOOKKEEPING_METRICS]
    if metrics is None:
        selected = candidates
        unmatched: list[str] = []
    else:
        selected = [name for name in candidates if any(fnmatch.fnmatchcase(name, p) for p in metrics)]
        unmatched = [p for p in metrics if not any(fnmatch.fnmatchcase(n, p) for n in [*previous, *current])]
    missing = sorted(name for name in selected if name not in current) + unmatched
    drops: list[dict[str, Any]] = []
    compared = 0
    for name in sorted(selected):
        before, higher = float(previous[name]), _higher_is_better(name, lower_is_better or {}, directions or {})
        if name not in current:
            if metrics is not None:
                drops.append({"metric": name, "previous": before, "current": None, "change": None,
                              "higher_is_better": higher})
            continue
        after = float(current[name])
        compared += 1
        if not (math.isfinite(before) and math.isfinite(after)):
            continue
        if _beyond(_worse_by(before, after, higher, relative), threshold):
            drops.append({"metric": name, "previous": before, "current": after, "change": after - before,
                          "higher_is_better": higher})
    return drops, missing, compared


def _client():
    from mlflow.tracking import MlflowClient

    return MlflowClient()


def night_metrics(client: Any, run: Any) -> tuple[dict[str, float], dict[str, bool]]:
    """A night's metrics and their directions, read from its evaluation runs (issue 38) under the
    names a parent run held before (``disc__efficientnet_lite0__Flat__none__uap``: rules written for
    them keep matching, and a night logged before compares with one logged after), plus the parent's
    own (the ABID scores, and every number of a night logged before)."""
    from vsbench.tracking.evaluations import evaluation_children
    from vsbench.tracking.names import safe_part

    metrics = {name: value for name, value in run.data.metrics.items()}
    directions: dict[str, bool] = {}
    for child in evaluation_children(client, run.info.run_id, run.info.experiment_id):
        record = evaluation_record(child)
        tags = child.data.tags
        options = tags.get(MODEL_OPTIONS_TAG, "{}")
        label = tags.get(MODEL_TAG, "-") + ("" if options in ("", "{}") else f" {options}")
        variant = [safe_part(part) for part in tags.get(VARIANT_TAG, "-").split(NAME_JOIN) if part != "-"]
        prefix = SEPARATOR.join([record.benchmark, safe_part(label), *variant])
        for metric, value in record.metrics.items():
            metrics[f"{prefix}{SEPARATOR}{metric}"] = value
            directions[f"{prefix}{SEPARATOR}{metric}"] = record.higher_is_better(metric)
    return metrics, directions


def find_baseline(client: Any, experiment: str, current: Any, pipeline: str) -> Any | None:
    """The newest FINISHED parent run of ``pipeline`` that started before ``current``."""
    runs = client.search_runs(
        [experiment_id(client, experiment)],
        filter_string=f"{parent_run_filter(pipeline)} and attributes.start_time < {int(current.info.start_time)}",
        order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0] if runs else None


def check_regression(experiment: str, current_run_id: str, *, threshold: float = 0.02,
                     metrics: list[str] | None = None, relative: bool = False,
                     pipeline: str = DEFAULT_PIPELINE, lower_is_better: LowerIsBetter | None = None,
                     ) -> RegressionReport:
    """Compare run ``current_run_id`` with the previous good night and record the outcome on it.

    A higher-is-better metric drops when it decreases by more than ``threshold`` (absolute, or a
    fraction of the previous value when ``relative``); a lower-is-better one (rmse, loss, error,
    seconds, and what ``lower_is_better`` names for a benchmark) when it increases by more. No previous night: passed, tagged ``no-baseline``.
    MLflow errors propagate: a check that cannot read or record must not pass silently.
    """
    client = _client()
    current = client.get_run(current_run_id)
    baseline = find_baseline(client, experiment, current, pipeline)
    if baseline is None:
        report = RegressionReport(current_run_id, None, threshold, [], True, relative)
    else:
        (before, before_directions), (now, now_directions) = (night_metrics(client, baseline),
                                                              night_metrics(client, current))
        drops, missing, compared = compare_metrics(before, now, threshold=threshold, relative=relative,
                                                   metrics=metrics, lower_is_better=lower_is_better,
                                                   directions={**before_directions, **now_directions})
        failed_named = bool(metrics is not None and missing)
        report = RegressionReport(current_run_id, baseline.info.run_id, threshold, drops,
                                  not drops and not failed_named, relative, compared, missing)
    _record(client, report)
    return report


def _record(client: Any, report: RegressionReport) -> None:
    client.set_tag(report.current_run_id, REGRESSION_TAG, report.status)
    client.set_tag(report.current_run_id, RULE_TAG,
                   f"{report.threshold:g} {'relative' if report.relative else 'absolute'}")
    if report.previous_run_id:
        client.set_tag(report.current_run_id, BASELINE_TAG, report.previous_run_id)
    client.log_metric(report.current_run_id, DROPS_METRIC, float(len(report.drops)))
    client.log_dict(report.current_run_id, report.as_dict(), ARTIFACT)
