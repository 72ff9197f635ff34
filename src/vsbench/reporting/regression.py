"""The nightly regression check: tonight's parent run against the previous good night, in MLflow.

A night's numbers are read from its evaluation runs (one per evaluation, nested under the night's
parent, issue 38) and, for nights logged before, from the parent itself (:func:`night_metrics`);
each evaluation is named as the parent held it before (``disc__<model>__<variant>__<metric>``), so
one evaluation is compared with itself the night before (the same ``vsbench.series``), and rules
written as patterns of those names keep working. A metric's direction is its run's own
``vsbench.lower_is_better`` tag where it has one.

The baseline is the newest FINISHED parent run of the same pipeline in the experiment that started
before tonight's run. A night that failed (a regression included) is never a baseline, so a drop
cannot become tomorrow's normal by failing once.

A metric worse beyond the threshold and its spread is also tested when both nights name unit files
for it (issue 45: per-unit outcomes, :mod:`vsbench.tracking.units`): it drops only when tonight is
worse beyond chance: the 95% interval of ``tonight - baseline`` excludes 0 on the worse side (the one
decision rule of :mod:`vsbench.stats.compare`, the same as the leaderboard's, the report's and
``compare --runs``'s), its test's p-value recorded beside it (McNemar's exact test for an accuracy, a
paired permutation test for another mean, the paired bootstrap's own for a ranking statistic): paired
when both nights scored the same units of the same data (the same ``vsbench.data.digest`` and unit
ids), else unpaired (two independent bootstraps). A move that is not
beyond chance is reported (``within_noise``), not failed. Nights without unit files keep the rule
above exactly. Unit files are read only for the metrics that moved beyond the threshold, each run's
once; a file refused for its digest leaves its metric to the threshold rule (it can only fail more).

The same seed gives other digits on another CPU (issue 39: the ABID demo's counting accuracy
0.5039 here, 0.4724 on an Intel Xeon), so a metric drops only when it got worse by more than the
threshold *and* by more than its measured spread over seeds and machines (the rule's ``spread``,
docs/fidelity.md). Every run records its machine (``vsbench.machine``, see
:func:`vsbench.tracking.provenance.machine_tags`); when tonight's differs from the baseline's, the
outcome says so, so a move to another node reads as one and not as a model change. The outcome is
recorded on tonight's run, where whoever looks at the run in MLflow sees it:

* tag ``vsbench.regression`` = ``passed`` | ``machine-changed`` (passed, on another machine than the
  baseline) | ``failed`` | ``no-baseline``
* tag ``vsbench.regression.baseline`` = the baseline's run id (when there is one)
* tag ``vsbench.regression.rule`` = the threshold and whether it is absolute or relative
* tag ``vsbench.regression.machine`` = what changed in the machine (``cpu: A -> B; ...``), when it did
* tag ``vsbench.regression.message`` = the alert's one line (:meth:`RegressionReport.message`)
* tag ``vsbench.regression.test`` = which test decided each metric worse beyond the threshold, with
  its p-value (``disc__...__uap: paired permutation test (1000 random swaps, seed 0), p=0.0010``),
  or ``threshold`` when no metric needed one or none had unit files
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
    split_metrics,
)
from vsbench.reporting.significance import (
    ABID_SCORE_STEP,
    UnitsReader,
    bad_direction,
    format_p,
    split_intervals,
)
from vsbench.tracking.evaluations import MODEL_OPTIONS_TAG, MODEL_TAG, NAME_JOIN, VARIANT_TAG
from vsbench.tracking.names import SEPARATOR, is_summary_metric, split_run_metric
from vsbench.tracking.provenance import MACHINE_TAG, PARENT_TAG, PIPELINE_TAG, STEP_TAG, machine_parts
from vsbench.tracking.units import UNITS_TAG

REGRESSION_TAG = "vsbench.regression"
BASELINE_TAG = "vsbench.regression.baseline"
RULE_TAG = "vsbench.regression.rule"
MACHINE_CHANGE_TAG = "vsbench.regression.machine"
MESSAGE_TAG = "vsbench.regression.message"
TEST_TAG = "vsbench.regression.test"
DROPS_METRIC = "regression_drops"
ARTIFACT = "regression.json"
DEFAULT_PIPELINE = "vsbench-nightly"


class RegressionError(RuntimeError):
    """Raised by the caller (the nightly's regression step) when a check did not pass."""

    one_line = True  # an expected failure: its message says all (the CLI prints no traceback)


@dataclass(frozen=True)
class RegressionReport:
    """``drops``: one dict per metric that got worse by more than the threshold (``metric``,
    ``previous``, ``current``, ``change`` = current - previous, ``higher_is_better``; ``spread`` where
    the rule gives the metric one); a named metric that the baseline had and tonight lacks is a drop with ``current`` and ``change`` None.
    ``missing``: metrics the baseline had and tonight lacks (they fail the check only when named).
    ``within_spread``: metrics worse by more than the threshold but not by more than their spread
    (same keys as a drop): reported, not failing. ``machine``: the two nights' ``vsbench.machine``
    (``previous``, ``current``; None where unrecorded) and ``changed``, part -> [before, after].
    A drop or move tested on unit files also carries ``test``, ``p_value``, ``paired``, ``ci_low`` /
    ``ci_high`` (the 95% interval of current - previous) and, for an accuracy, ``mcnemar``."""

    current_run_id: str
    previous_run_id: str | None
    threshold: float
    drops: list[dict[str, Any]]
    passed: bool
    relative: bool = False
    compared: int = 0
    missing: list[str] = field(default_factory=list)
    within_spread: list[dict[str, Any]] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    # issue 45: moved beyond the threshold and spread but not beyond chance (a test on unit files said
    # so; same keys as a drop plus the test's), and the tag's line of which test decided
    within_noise: list[dict[str, Any]] = field(default_factory=list)
    test: str = "threshold"

    @property
    def machine_changed(self) -> bool:
        return bool(self.machine.get("changed"))

    @property
    def status(self) -> str:
        if self.previous_run_id is None:
            return "no-baseline"
        if not self.passed:
            return "failed"
        return "machine-changed" if self.machine_changed else "passed"

    def machine_line(self) -> str:
        """``cpu: AMD EPYC -> Intel Xeon; isa: ...`` (empty when the machine did not change)."""
        changed = self.machine.get("changed", {})
        return "; ".join(f"{part}: {before} -> {after}" for part, (before, after) in changed.items())

    def message(self) -> str:
        """The alert's one line: what dropped beyond its tolerance, what moved within its spread, and
        whether the machine changed since the baseline (then a move within the spread is the machine's)."""
        rule = f"{self.threshold:g}{' relative' if self.relative else ''}"
        if self.previous_run_id is None:
            return "no baseline: the first good night of this pipeline"
        parts = []
        if self.drops:
            parts.append(f"{len(self.drops)} metrics got worse beyond the threshold {rule} and their spread: "
                         + ", ".join(_describe(d) for d in self.drops[:5]) + (" ..." if len(self.drops) > 5 else ""))
        named_missing = [m for m in self.missing if not any(d["metric"] == m for d in self.drops)]
        if not self.passed and named_missing:
            parts.append(f"named metrics missing: {', '.join(named_missing[:5])}")
        if self.within_noise:
            parts.append(f"{len(self.within_noise)} moved beyond {rule} but not beyond chance: "
                         + ", ".join(_describe(d) for d in self.within_noise[:5]))
        if self.within_spread:
            parts.append(f"{len(self.within_spread)} moved beyond {rule} but within their measured spread: "
                         + ", ".join(_describe(d) for d in self.within_spread[:5]))
        if self.machine_changed:
            parts.append(f"machine changed since the baseline ({self.machine_line()})"
                         + ("; not a regression" if self.passed else "; the drops exceed the spread seen across machines"))
        elif self.previous_run_id and self.machine.get("previous") is None and self.machine.get("current"):
            parts.append("the baseline's machine is unrecorded")
        return "; ".join(parts) if parts else f"no metric worse by more than {rule}"

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message(), **asdict(self)}


def _describe(drop: Mapping[str, Any]) -> str:
    if drop["current"] is None:
        return f"{drop['metric']} missing"
    spread = f", spread {drop['spread']:g}" if drop.get("spread") else ""
    tested = ""
    if drop.get("p_value") is not None:
        kind = "paired" if drop.get("paired") else "unpaired"
        tested = f", {format_p(drop['p_value'])} {kind}"
    return f"{drop['metric']} {drop['previous']:.4g} -> {drop['current']:.4g}{spread}{tested}"


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


def spread_for(name: str, spread: Mapping[str, float] | None) -> float:
    """The measured spread (absolute, in the metric's units) for ``name``: the largest value of the
    rule's ``spread`` whose name or pattern matches it; 0 when none does."""
    return max((float(v) for p, v in (spread or {}).items() if fnmatch.fnmatchcase(name, p)), default=0.0)


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
    name -> higher is better, as the runs' own tags say (they win). The measured spread is applied
    after, by :func:`split_by_spread`.
    """
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    previous, current = split_intervals(previous)[0], split_intervals(current)[0]  # bounds are no metrics
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


def split_by_spread(drops: Sequence[dict[str, Any]], spread: Mapping[str, float] | None,
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(drops, within_spread): of the metrics worse beyond the threshold (:func:`compare_metrics`),
    those worse by no more than their measured spread (:func:`spread_for`, absolute) are what
    another seed or machine does, not a regression. Each carries its ``spread`` where it has one;
    a named metric gone missing stays a drop."""
    if any(not value >= 0 for value in (spread or {}).values()):
        raise ValueError(f"a spread must be >= 0, got {dict(spread or {})}")
    beyond: list[dict[str, Any]] = []
    within: list[dict[str, Any]] = []
    for drop in drops:
        width = spread_for(drop["metric"], spread)
        if not width or drop["current"] is None:
            beyond.append(drop)
            continue
        entry = {**drop, "spread": width}
        worse = _worse_by(drop["previous"], drop["current"], drop["higher_is_better"], relative=False)
        (beyond if _beyond(worse, width) else within).append(entry)
    return beyond, within


def _client():
    from vsbench.io.store import store_client

    return store_client()  # every call bounded by VSBENCH_TRACKING_TIMEOUT (issue 54)


def night_metrics(client: Any, run: Any) -> tuple[dict[str, float], dict[str, bool]]:
    """A night's metrics and their directions, read from its evaluation runs (issue 38) under the
    names a parent run held before (``disc__efficientnet_lite0__Flat__none__uap``: rules written for
    them keep matching, and a night logged before compares with one logged after), plus the parent's
    own (the ABID scores, and every number of a night logged before)."""
    metrics, directions, _ = night(client, run)
    return metrics, directions


def night(client: Any, run: Any) -> tuple[dict[str, float], dict[str, bool], dict[str, tuple[str, str]]]:
    """:func:`night_metrics` and, per name, where its unit files are: (the run naming them, the
    metric's name there). An evaluation run names its own; the parent's ABID scores are its one
    ``abid-score`` step's when the parent holds one ABID model's scores."""
    from vsbench.tracking.evaluations import evaluation_children
    from vsbench.tracking.names import safe_part

    metrics = {name: value for name, value in run.data.metrics.items() if not is_summary_metric(name)}
    directions: dict[str, bool] = {}
    sources: dict[str, tuple[str, str]] = {}
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
            if record.units_run_id:
                sources[f"{prefix}{SEPARATOR}{metric}"] = (record.units_run_id, metric)
    sources.update(_abid_sources(client, run))
    return metrics, directions, sources


def _abid_sources(client: Any, run: Any) -> dict[str, tuple[str, str]]:
    """The parent's ABID scores (``counting_accuracy``, or ``abid__<model>__counting_accuracy`` on a
    night) -> its one ``abid-score`` step naming unit files; nothing when the parent holds no ABID
    score, several ABID models' scores, or not exactly one such step."""
    pairs = split_metrics(run.data.metrics, dict(run.data.params), run.data.tags.get(PIPELINE_TAG, ""))
    abid = [model for model, benchmark in pairs if benchmark == "abid"]
    if len(abid) != 1:
        return {}
    steps = [r for r in client.search_runs([run.info.experiment_id], filter_string=(
        f"tags.`{PARENT_TAG}` = '{run.info.run_id}' and tags.`{STEP_TAG}` = '{ABID_SCORE_STEP}'"), max_results=10)
        if r.data.tags.get(UNITS_TAG)]
    if len(steps) != 1:
        return {}
    sources = {}
    for name in run.data.metrics:
        split = split_run_metric(name)
        metric = split[2] if split else name
        if (split is None or split[0] == "abid") and metric in pairs[(abid[0], "abid")]:
            sources[name] = (steps[0].info.run_id, metric)
    return sources


def judge_drops(drops: Sequence[dict[str, Any]], before: Mapping[str, tuple[str, str]],
               now: Mapping[str, tuple[str, str]], reader: Any,
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(drops, within_noise): each drop whose metric both nights hold unit files for, tested
    (:meth:`~vsbench.reporting.significance.UnitsReader.difference`, ``tonight - baseline``): a drop
    stays one only when worse beyond chance (:func:`~vsbench.reporting.significance.bad_direction`);
    the rest moved within the noise of their units. Drops without unit files (or whose files were
    refused) stay drops, untested: the rule before issue 45."""
    kept: list[dict[str, Any]] = []
    noise: list[dict[str, Any]] = []
    for drop in drops:
        name = drop["metric"]
        if drop["current"] is None or name not in before or name not in now or before[name][1] != now[name][1]:
            kept.append(drop)
            continue
        difference = reader.difference(before[name][0], now[name][0], before[name][1])
        if difference is None:
            kept.append(drop)
            continue
        tested = {**drop, "test": difference.test, "p_value": difference.p_value, "paired": difference.paired,
                  "ci_low": difference.low, "ci_high": difference.high}
        if difference.mcnemar is not None:
            first_only, second_only, p = difference.mcnemar
            tested["mcnemar"] = {"previous_only": first_only, "current_only": second_only, "p_value": p}
        (kept if bad_direction(difference, drop["higher_is_better"]) else noise).append(tested)
    return kept, noise


def deciding_tests(drops: Sequence[dict[str, Any]], noise: Sequence[dict[str, Any]]) -> str:
    """The ``vsbench.regression.test`` tag: per tested metric the test that decided and its p-value;
    ``threshold`` when none was tested."""
    tested = [d for d in [*drops, *noise] if d.get("test")]
    if not tested:
        return "threshold"
    return "; ".join(f"{d['metric']}: {d['test']}, p={d['p_value']:.4g}" for d in tested)


def night_machines(client: Any, run: Any) -> tuple[str | None, dict[str, str]]:
    """The machines a night ran on: its parent run's and every step's (a step may run on another
    node, a training or embedding step on a GPU node), as (the ``vsbench.machine`` lines, part ->
    its values), several values joined by `` | `` in sorted order. Nothing for a night logged before
    machine tags."""
    from vsbench.tracking.provenance import PARENT_TAG

    runs, token = [run], None
    while True:
        page = client.search_runs([run.info.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{run.info.run_id}'",
                                  max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    lines = sorted({r.data.tags[MACHINE_TAG] for r in runs if r.data.tags.get(MACHINE_TAG)})
    values: dict[str, set[str]] = {}
    for r in runs:
        for part, value in machine_parts(r.data.tags).items():
            values.setdefault(part, set()).add(value)
    return (" | ".join(lines) or None), {part: " | ".join(sorted(found)) for part, found in values.items()}


def compare_machines(client: Any, previous: Any, current: Any) -> dict[str, Any]:
    """The two nights' machines (:func:`night_machines`) and the parts that differ (part -> [before,
    after]); nothing is "changed" when either night predates machine tags: unknown is not a change."""
    (before, parts_before), (after, parts_after) = night_machines(client, previous), night_machines(client, current)
    changed: dict[str, list[str]] = {}
    if parts_before and parts_after:
        for part in sorted({*parts_before, *parts_after}):
            was, now = parts_before.get(part, "none"), parts_after.get(part, "none")
            if was != now:
                changed[part] = [was, now]
    return {"previous": before, "current": after, "changed": changed}


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
                     spread: Mapping[str, float] | None = None) -> RegressionReport:
    """Compare run ``current_run_id`` with the previous good night and record the outcome on it.

    A higher-is-better metric drops when it decreases by more than ``threshold`` (absolute, or a
    fraction of the previous value when ``relative``) and by more than its ``spread`` (name or
    pattern -> the measured spread over seeds and machines, absolute); a lower-is-better one (rmse,
    loss, error, seconds, and what ``lower_is_better`` names for a benchmark) when it increases by
    more. No previous night: passed, tagged ``no-baseline``. Another machine than the baseline's:
    said in the outcome (status ``machine-changed`` when it passed).
    MLflow errors propagate: a check that cannot read or record must not pass silently.
    """
    client = _client()
    current = client.get_run(current_run_id)
    baseline = find_baseline(client, experiment, current, pipeline)
    if baseline is None:
        report = RegressionReport(current_run_id, None, threshold, [], True, relative)
    else:
        (before, before_directions, before_units), (now, now_directions, now_units) = (night(client, baseline),
                                                                                       night(client, current))
        drops, missing, compared = compare_metrics(before, now, threshold=threshold, relative=relative,
                                                   metrics=metrics, lower_is_better=lower_is_better,
                                                   directions={**before_directions, **now_directions})
        drops, tolerated = split_by_spread(drops, spread)
        drops, noise = judge_drops(drops, before_units, now_units, UnitsReader(client)) if drops else ([], [])
        failed_named = bool(metrics is not None and missing)
        report = RegressionReport(current_run_id, baseline.info.run_id, threshold, drops,
                                  not drops and not failed_named, relative, compared, missing, tolerated,
                                  compare_machines(client, baseline, current), noise, deciding_tests(drops, noise))
    _record(client, report)
    return report


def _record(client: Any, report: RegressionReport) -> None:
    client.set_tag(report.current_run_id, REGRESSION_TAG, report.status)
    client.set_tag(report.current_run_id, RULE_TAG,
                   f"{report.threshold:g} {'relative' if report.relative else 'absolute'}")
    if report.previous_run_id:
        client.set_tag(report.current_run_id, BASELINE_TAG, report.previous_run_id)
    if report.machine_changed:
        client.set_tag(report.current_run_id, MACHINE_CHANGE_TAG, report.machine_line()[:5000])
    client.set_tag(report.current_run_id, MESSAGE_TAG, report.message()[:5000])
    client.set_tag(report.current_run_id, TEST_TAG, report.test[:5000])
    client.log_metric(report.current_run_id, DROPS_METRIC, float(len(report.drops)))
    client.log_dict(report.current_run_id, report.as_dict(), ARTIFACT)
