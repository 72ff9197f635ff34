"""Intervals and comparisons over per-unit outcomes: what every headline number and every gap carries.

* :func:`intervals`: each metric's 95% expanded percentile bootstrap interval over the units (over
  clusters of units where the units name one), seeded, all metrics from the same draws (the percentile
  interval widened for small n as Hesterberg's expanded percentile interval does:
  :mod:`vsbench.stats.resample`); a proportion of
  independent units (an accuracy) gets Clopper-Pearson's exact interval instead, and every interval
  carries the one-line note it owes when it is weak (:mod:`vsbench.stats.proportions`).
* :func:`compare`: two evaluations of the same units (the same ids) are compared *paired*: the
  difference (second minus first) and its interval from a paired bootstrap (the same resampled units
  for both runs, each run keeping its own scores; expanded as a single interval is, on the draws the
  metric rests on). Two evaluations of different units are compared
  unpaired (two independent bootstraps) and say so.

**One decision rule** (:attr:`Difference.distinguishable`, :func:`verdict`): two runs differ exactly
when the 95% interval of their difference excludes 0. Every page that prints a verdict (the
leaderboard's ``≈``, the report, ``compare --runs``, the nightly) takes it from here, so no page says
"indistinguishable" beside an interval that says "different".

**The test beside it suits the statistic** (:func:`choose_test`):

* a mean of 0/1 outcomes per unit (an accuracy, a class's accuracy on that class's units only):
  McNemar's exact test of the discordant units;
* any other mean or ratio of per-unit values (mAP, HR@k, MRR, RMSE, accuracy at 1): a paired
  permutation test, each unit's two outcomes swapped or not (every one of the ``2**clusters`` swaps
  when there are at most :data:`EXACT_CLUSTERS` clusters, else ``resamples`` random ones), following
  ``scipy.stats.permutation_test`` (``permutation_type='samples'``): each tail's share of swaps at
  least as extreme as observed, doubled, capped at 1; ``(count + 1) / (swaps + 1)`` when drawn;
* a statistic of one pooled ranking of scores (micro-AP and recall at precision 0.9, Copydays'
  overall uAP, pooled ROC / PR AUC): the p-value of the paired bootstrap itself (each tail's share of
  replicate differences at or beyond 0, read on the expanded interval's scale:
  :func:`~vsbench.stats.resample.expanded_p_value`). Swapping a unit's scores between two runs would pool
  two models' score scales in one ranking, whose result is noise (issue 55: a real improvement was
  found 28% of the time on one scale, 0.25-1.8% once one run's scores were shifted or scaled); the
  bootstrap keeps each run's own ranking, so any monotone change of either run's scores changes
  neither its interval nor its p-value.

Identical runs give a difference of 0, the interval [0, 0] and p = 1.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from vsbench.stats.names import interval_field
from vsbench.stats.proportions import (
    BOOTSTRAP,
    CLOPPER_PEARSON,
    clopper_pearson,
    draws_behind,
    edge_note,
    proportion_counts,
    units_behind,
)
from vsbench.stats.resample import (
    CONFIDENCE,
    Resampling,
    count_blocks,
    expanded_confidence,
    expanded_p_value,
    percentile_interval,
)
from vsbench.stats.statistics import evaluate
from vsbench.stats.units import Units, UnitsError, groups_of

EXACT_CLUSTERS = 12  # at most 4,096 swaps are enumerated, not drawn
ALPHA = 0.05


@dataclass(frozen=True)
class Interval:
    """A metric's interval, how it was made, and the line it owes a reader (:attr:`note`)."""

    metric: str
    low: float
    high: float
    method: str = BOOTSTRAP  # or CLOPPER_PEARSON for a proportion of independent units
    units: int = 0  # the independent draws it rests on (0: not known)
    dropped: int = 0  # bootstrap replicates left out (the metric undefined on them)
    resamples: int = 0
    kind: str = "unit"
    level: float = CONFIDENCE  # the percentile level taken (expanded_confidence's), CONFIDENCE for the exact interval

    @property
    def note(self) -> str:
        """One line when the interval is weak (few units, zero width, replicates left out), else ""."""
        return edge_note(self.kind, self.units, self.low, self.high, self.dropped, self.resamples)


@dataclass(frozen=True)
class Difference:
    """``second - first`` for one metric, with its interval and p-value; ``paired`` says which kind."""

    metric: str
    first: float
    second: float
    difference: float
    low: float
    high: float
    p_value: float
    paired: bool
    test: str  # how the p-value was made, in words
    mcnemar: tuple[int, int, float] | None = None  # (first right & second wrong, the reverse, exact p)
    draws: int = 0  # the independent draws the interval's expansion counted (0: not known)
    level: float = CONFIDENCE  # the percentile level the interval was taken at
    dropped: int = 0  # replicate differences left out (the metric undefined on a resample)
    resamples: int = 0
    kind: str = "unit"  # the word for a draw: the unit's (``query``), or ``group`` when drawn in groups

    @property
    def note(self) -> str:
        """One line when the difference's interval is weak, as a single interval's
        (:func:`~vsbench.stats.proportions.edge_note`): fewer than 20 draws behind it, zero width,
        resamples left out; "" otherwise."""
        return edge_note(self.kind, self.draws, self.low, self.high, self.dropped, self.resamples)

    @property
    def distinguishable(self) -> bool:
        """THE decision rule: the 95% interval of the difference excludes 0 (module docstring)."""
        return bool(math.isfinite(self.low) and math.isfinite(self.high) and (self.low > 0 or self.high < 0))

    @property
    def significant(self) -> bool:
        return self.distinguishable

    @property
    def test_disagrees(self) -> bool:
        """The test's p-value is on the other side of 0.05 than the interval's verdict (a borderline
        case: said beside the verdict, never a second verdict)."""
        return math.isfinite(self.p_value) and (self.p_value < ALPHA) != self.distinguishable

    def as_dict(self) -> dict[str, Any]:
        out = {"metric": self.metric, "first": self.first, "second": self.second, "difference": self.difference,
               "ci_low": self.low, "ci_high": self.high, "p_value": self.p_value, "paired": self.paired,
               "test": self.test}
        if self.note:
            out["interval_note"] = self.note
        if self.mcnemar is not None:
            out["mcnemar"] = {"first_only": self.mcnemar[0], "second_only": self.mcnemar[1], "p_value": self.mcnemar[2]}
        return out


def replicates(units: Units, resampling: Resampling, metrics: list[str] | None = None) -> dict[str, np.ndarray]:
    """Each metric's bootstrap replicates: units resampled (by cluster) with the seeded draws."""
    specs = _specs(units, metrics)
    cluster, n_clusters = units.cluster_index()
    parts: dict[str, list[np.ndarray]] = {m: [] for m in specs}
    for counts in count_blocks(n_clusters, resampling.resamples, resampling.seed, width=len(units)):
        # a unit its own cluster: the counts are the units' weights as drawn, no (B, units) copy (issue 54)
        values = evaluate(units, counts if units.clusters is None else counts[:, cluster], specs)
        for metric, v in values.items():
            parts[metric].append(v)
    return {m: np.concatenate(v) for m, v in parts.items()}


def intervals(units: Units, resampling: Resampling, metrics: list[str] | None = None) -> dict[str, Interval]:
    """Each metric's interval (NaN bounds when intervals are off): Clopper-Pearson for a proportion of
    independent units (:mod:`vsbench.stats.proportions` says why), else the expanded percentile bootstrap, all
    bootstrapped metrics from the same draws. Each carries what its edge note needs."""
    specs = _specs(units, metrics)
    if not resampling.enabled:
        return {m: Interval(m, math.nan, math.nan) for m in specs}
    out: dict[str, Interval] = {}
    booted = []
    for m, spec in specs.items():
        counts = proportion_counts(units, spec)
        if counts is None:
            booted.append(m)
            continue
        low, high = clopper_pearson(*counts, resampling.confidence)
        out[m] = Interval(m, low, high, CLOPPER_PEARSON, counts[1], kind=units.kind)
    if booted:
        for m, v in replicates(units, resampling, booted).items():
            level = expanded_confidence(resampling.confidence, draws_behind(units, specs[m]))
            out[m] = Interval(m, *percentile_interval(v, level), BOOTSTRAP,
                              units_behind(units, specs[m]), int(np.count_nonzero(np.isnan(v))), int(v.size),
                              _behind_word(units, specs[m]), level)
    return {m: out[m] for m in specs}


def _behind_word(units: Units, spec: Any) -> str:
    """The word for what :func:`~vsbench.stats.proportions.units_behind` counted: ``group`` where it
    counted groups (grouped units, any metric but a ratio with a denominator, which counts units),
    else the unit's own word (``only 11 groups``, never ``only 11 queries`` for 58 queries)."""
    if grouped(units) and not (spec.get("statistic") == "ratio" and spec.get("den")):
        return "group"
    return units.kind


def interval_notes(found: dict[str, Interval]) -> dict[str, str]:
    """Each metric's edge note, for those that have one (printed, tagged ``interval_note.<metric>``,
    reported beside the interval)."""
    return {m: interval.note for m, interval in found.items() if interval.note}


def interval_fields(found: dict[str, Interval], percent: int = 95) -> dict[str, float]:
    """Record fields ``<metric>_ci95_low`` / ``_high``: the plain names MLflow shows for every model
    (read back by :func:`vsbench.stats.names.interval_name`)."""
    out: dict[str, float] = {}
    for metric, interval in found.items():
        if math.isfinite(interval.low) and math.isfinite(interval.high):
            out[interval_field(metric, percent, "low")] = interval.low
            out[interval_field(metric, percent, "high")] = interval.high
    return out


def same_units(first: Units, second: Units) -> bool:
    """Whether two evaluations scored the same units (the same set of ids, each once)."""
    a, b = np.asarray(first.ids, dtype=str), np.asarray(second.ids, dtype=str)
    return a.size == b.size and np.unique(a).size == a.size and np.array_equal(np.sort(a), np.sort(b))


def align(first: Units, second: Units) -> Units:
    """``second``'s rows in ``first``'s unit order (call only when :func:`same_units`)."""
    order_a = np.argsort(np.asarray(first.ids, dtype=str), kind="stable")
    order_b = np.argsort(np.asarray(second.ids, dtype=str), kind="stable")
    rows = np.empty_like(order_b)
    rows[order_a] = order_b
    return second.take(rows)


def paired_clusters(first: Units, second: Units) -> np.ndarray | None:
    """The groups a paired comparison draws (``second`` aligned to ``first``): either run's where only
    one declares them (a unit file written before groups were declared still pairs with a newer one),
    else the finest groups that hold both runs' groups whole (units grouped together in either run stay
    together), so that no test treats two units one run saw as correlated as independent."""
    if first.clusters is None or second.clusters is None:
        return first.clusters if second.clusters is None else second.clusters
    a, b = np.asarray(first.clusters, dtype=str), np.asarray(second.clusters, dtype=str)
    if np.array_equal(a, b):
        return a
    rows = np.arange(len(first))
    return groups_of(len(first), np.concatenate([rows, rows]), np.concatenate([np.char.add("1:", a), np.char.add("2:", b)]),
                     unit_ids=np.asarray(first.ids, dtype=str))


def grouped(units: Units) -> bool:
    """Whether some group of ``units`` holds more than one unit (its units are not independent draws)."""
    return units.clusters is not None and units.cluster_index()[1] < len(units)


def unpaired_reason(first: Units, second: Units) -> str:
    """Why two evaluations cannot be compared paired, in words ("" when they can)."""
    if same_units(first, second):
        return ""
    a, b = np.asarray(first.ids, dtype=str), np.asarray(second.ids, dtype=str)
    if np.unique(a).size != a.size or np.unique(b).size != b.size:
        return "a unit id is listed twice"
    shared = np.intersect1d(a, b).size
    return f"they scored different units ({shared:,} shared of {a.size:,} and {b.size:,})"


def compare(first: Units, second: Units, resampling: Resampling, metrics: list[str] | None = None, *,
            unpaired_because: str = "") -> dict[str, Difference]:
    """Every shared metric of two evaluations: paired when they scored the same units (the same ids),
    else unpaired, the test saying why (``unpaired_because``: a reason the caller knows, such as
    ground truths of another content under the same ids)."""
    specs = {m: spec for m, spec in first.metrics.items() if second.metrics.get(m) == spec}  # computed alike
    names = [m for m in (metrics or list(specs)) if m in specs]
    if not names:
        raise UnitsError("the two evaluations share no metric computed the same way")
    ones_a = evaluate(first, np.ones((1, len(first)), dtype=np.int32), {m: specs[m] for m in names})
    ones_b = evaluate(second, np.ones((1, len(second)), dtype=np.int32), {m: specs[m] for m in names})
    resampling = resampling if resampling.enabled else Resampling()
    if not unpaired_because and same_units(first, second):
        second = align(first, second)
        groups = paired_clusters(first, second)
        first, second = replace(first, clusters=groups), replace(second, clusters=groups)
        return _paired(first, second, names, {m: specs[m] for m in names}, resampling, ones_a, ones_b)
    return _unpaired(first, second, names, resampling, ones_a, ones_b,
                     unpaired_because or unpaired_reason(first, second))


def verdict(difference: Difference, higher_is_better: bool = True) -> str:
    """``better``, ``worse`` (the second run against the first) or ``same``: THE decision rule,
    :attr:`Difference.distinguishable`, read in the metric's direction."""
    if not difference.distinguishable:
        return "same"
    up = difference.low > 0
    return "better" if up == higher_is_better else "worse"


SCORE_FREE_STATISTICS = ("ratio",)  # a mean or ratio of per-unit values: a unit's outcomes can be swapped


def choose_test(spec: Any, first: Units | None = None, second: Units | None = None) -> str:
    """Which test a metric's comparison takes (module docstring): ``mcnemar`` for a mean of 0/1
    outcomes (both runs' values 0 or 1, when the units are given), ``permutation`` for another mean or
    ratio of per-unit values, ``bootstrap`` for a statistic of a pooled ranking of scores."""
    if spec.get("statistic") not in SCORE_FREE_STATISTICS:
        return "bootstrap"
    if spec.get("den") or spec.get("transform"):
        return "permutation"
    if first is not None and second is not None:
        if not _right_or_wrong(spec, first, second):
            return "permutation"
        if grouped(first) or grouped(second):
            return "permutation"  # McNemar's binomial assumes independent units: swap whole groups instead
    return "mcnemar"


def _right_or_wrong(spec: Any, first: Units, second: Units) -> bool:
    """Whether both runs' per-unit values of a plain mean are all 0 or 1 (right or wrong answers)."""
    return all(np.isin(_class_rows(units, spec, units.values(spec["num"])), (0, 1)).all() for units in (first, second))


def bootstrap_p_value(differences: np.ndarray, draws: int) -> float:
    """Two-sided p-value of a paired bootstrap over ``draws`` independent draws: the smaller tail's
    share of replicate differences at or beyond 0, counted ``(count + 1) / (replicates + 1)``, read on
    the expanded interval's scale (:func:`~vsbench.stats.resample.expanded_p_value`; the plain reading
    doubles it), capped at 1 (undefined replicates left out). It is under 0.05 about when the expanded
    interval excludes 0, from the same draws."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[~np.isnan(d)]
    if d.size == 0:
        return math.nan
    tails = min(int(np.count_nonzero(d <= 0)), int(np.count_nonzero(d >= 0)))
    return expanded_p_value((tails + 1) / (d.size + 1), draws)


def _paired(first: Units, second: Units, names: list[str], specs: dict[str, Any], resampling: Resampling,
            ones_a: dict[str, np.ndarray], ones_b: dict[str, np.ndarray]) -> dict[str, Difference]:
    cluster, n_clusters = first.cluster_index()
    diffs: dict[str, list[np.ndarray]] = {m: [] for m in names}
    for counts in count_blocks(n_clusters, resampling.resamples, resampling.seed, width=len(first)):
        weights = counts[:, cluster]
        a, b = evaluate(first, weights, specs), evaluate(second, weights, specs)
        for m in names:
            diffs[m].append(b[m] - a[m])
    tests = {m: choose_test(specs[m], first, second) for m in names}
    swapped = {m: specs[m] for m in names if tests[m] == "permutation"}
    p_values, permutation = permutation_p_values(first, second, swapped, resampling) if swapped else ({}, "")
    out = {}
    for m in names:
        replicate_differences = np.concatenate(diffs[m])
        draws = draws_behind(first, specs[m])
        level = expanded_confidence(resampling.confidence, draws)
        low, high = percentile_interval(replicate_differences, level)
        diff = float(ones_b[m][0] - ones_a[m][0])
        counts = None
        if tests[m] == "mcnemar":
            counts = mcnemar(_class_rows(first, specs[m], first.values(specs[m]["num"])),
                             _class_rows(second, specs[m], second.values(specs[m]["num"])))
            p, test = counts[2], (f"exact McNemar test on {_class_words(specs[m])}: {counts[0]} right only in the "
                                  f"first, {counts[1]} only in the second")
        elif tests[m] == "permutation":
            p, test = p_values[m], permutation
            if choose_test(specs[m]) == "mcnemar" and _right_or_wrong(specs[m], first, second):
                test += "; not McNemar's exact test, which counts the units of one group as independent draws"
        else:
            p = bootstrap_p_value(replicate_differences, draws)
            whole = f", drawing {n_clusters} groups whole" if n_clusters < len(first) else ""
            test = (f"paired bootstrap of the difference ({resampling.resamples} resamples, seed {resampling.seed}{whole}; "
                    "each run ranked by its own scores)")
        out[m] = Difference(m, float(ones_a[m][0]), float(ones_b[m][0]), diff, low, high, p, True, test, counts,
                            draws, level, int(np.count_nonzero(np.isnan(replicate_differences))),
                            int(replicate_differences.size), "group" if grouped(first) else first.kind)
    return out


def _class_rows(units: Units, spec: Any, values: np.ndarray) -> np.ndarray:
    """``values`` on the units a metric is computed over: a class's (``where``/``equals``) or all."""
    if spec.get("where") is None:
        return values
    from vsbench.stats.statistics import _rows_where

    return values[_rows_where(units, spec["where"], spec.get("equals"))]


def _class_words(spec: Any) -> str:
    return f"the units whose {spec['where']} is {spec.get('equals')!r}" if spec.get("where") is not None else "every unit"


def _unpaired(first: Units, second: Units, names: list[str], resampling: Resampling,
              ones_a: dict[str, np.ndarray], ones_b: dict[str, np.ndarray], why: str) -> dict[str, Difference]:
    a = replicates(first, resampling, names)
    b = replicates(second, Resampling(resampling.resamples, resampling.seed + 1, resampling.confidence), names)
    out = {}
    for m in names:
        d = b[m] - a[m]
        dropped = int(np.count_nonzero(np.isnan(d)))
        d = d[~np.isnan(d)]
        # two independent samples: expanded by the smaller one's draws (the rougher of the two)
        draws = min(draws_behind(first, first.metrics[m]), draws_behind(second, second.metrics[m]))
        level = expanded_confidence(resampling.confidence, draws)
        low, high = percentile_interval(d, level)
        p = expanded_p_value(min(float(np.mean(d <= 0)), float(np.mean(d >= 0))), draws) if d.size else math.nan
        out[m] = Difference(m, float(ones_a[m][0]), float(ones_b[m][0]), float(ones_b[m][0] - ones_a[m][0]), low, high,
                            p, False, f"unpaired bootstrap ({resampling.resamples} resamples each): {why}", None,
                            draws, level, dropped, int(d.size) + dropped,
                            "group" if grouped(first) or grouped(second) else first.kind)
    return out


def permutation_p_values(first: Units, second: Units, specs: dict[str, Any],
                         resampling: Resampling) -> tuple[dict[str, float], str]:
    """Two-sided paired permutation p-values (see the module docstring) of ``second - first``."""
    cluster, n_clusters = first.cluster_index()
    pool = first.concat(second)
    observed = {m: float(v[0]) for m, v in _swapped(pool, np.zeros((1, n_clusters), np.int32), cluster, specs).items()}
    exact = n_clusters <= EXACT_CLUSTERS
    whole = f" of {n_clusters} groups, each swapped whole" if n_clusters < len(first) else ""
    if exact:
        blocks = [np.array(list(itertools.product((0, 1), repeat=n_clusters)), dtype=np.int32)]
        total = 1 << n_clusters
        test = f"exact paired permutation test ({total} swaps{whole})"
    else:
        rng = np.random.default_rng(resampling.seed)
        total = resampling.resamples
        rows = max(1, min(total, (1 << 20) // max(2 * len(pool), 1)))
        blocks = [rng.integers(0, 2, (min(rows, total - start), n_clusters), dtype=np.int32)
                  for start in range(0, total, rows)]
        test = f"paired permutation test ({total} random swaps{whole}, seed {resampling.seed})"
    less = {m: 0 for m in specs}
    greater = {m: 0 for m in specs}
    for swaps in blocks:
        for m, t in _swapped(pool, swaps, cluster, specs).items():
            gamma = abs(observed[m]) * 100 * np.finfo(np.float64).eps
            less[m] += int(np.count_nonzero(t <= observed[m] + gamma))
            greater[m] += int(np.count_nonzero(t >= observed[m] - gamma))
    extra = 0 if exact else 1
    p = {m: min(1.0, 2 * min((less[m] + extra) / (total + extra), (greater[m] + extra) / (total + extra)))
         for m in specs}
    return p, test


def _swapped(pool: Units, swaps: np.ndarray, cluster: np.ndarray, specs: dict[str, Any]) -> dict[str, np.ndarray]:
    """``M(second') - M(first')`` where ``first'`` takes the second run's outcome for swapped clusters."""
    s = swaps[:, cluster]
    first_w = np.concatenate([1 - s, s], axis=1)
    second_w = np.concatenate([s, 1 - s], axis=1)
    a, b = evaluate(pool, first_w, specs), evaluate(pool, second_w, specs)
    return {m: b[m] - a[m] for m in specs}


def mcnemar(first_correct: np.ndarray, second_correct: np.ndarray) -> tuple[int, int, float]:
    """McNemar's exact test: (units only the first got right, only the second, two-sided p), the
    binomial test of the discordant units at 1/2."""
    a = np.asarray(first_correct, dtype=bool)
    b = np.asarray(second_correct, dtype=bool)
    only_first, only_second = int(np.count_nonzero(a & ~b)), int(np.count_nonzero(~a & b))
    n = only_first + only_second
    if n == 0:
        return only_first, only_second, 1.0
    from scipy.stats import binom

    return only_first, only_second, float(min(1.0, 2 * binom.cdf(min(only_first, only_second), n, 0.5)))


def _specs(units: Units, metrics: list[str] | None) -> dict[str, Any]:
    if metrics is None:
        return dict(units.metrics)
    unknown = [m for m in metrics if m not in units.metrics]
    if unknown:
        raise UnitsError(f"{units.benchmark} units carry no statistic for {', '.join(unknown)}")
    return {m: units.metrics[m] for m in metrics}
