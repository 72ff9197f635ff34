"""Intervals for proportions (a mean of 0/1 outcomes) and the one-line notes an interval owes its reader.

**Why not the bootstrap for a proportion.** The percentile bootstrap of a mean of 0/1 outcomes is
the binomial of the observed rate around itself: near 0 or 1 it is far too narrow (all 50 questions
right gives [1, 1]), and its coverage of the nominal 95% collapses there (issue 55: 0.385 at n = 10 and
0.795 at n = 30 for a true accuracy of 0.95). Two classical intervals were tried against the coverage
grid of ``tests/unit/test_interval_coverage.py`` (accuracy 0.5, 0.7, 0.95, 0.99 x 10, 30, 100, 300
units, every cell at least 0.93):

* Wilson's score interval is shorter but misses the corners: at p = 0.99, n = 10 it covers 0.904
  (9 of 10 right gives [0.596, 0.982], which excludes 0.99, and that happens 9.1% of the time);
* Clopper-Pearson's exact interval inverts the two one-sided binomial tests, so its coverage is at
  least 95% at *every* p and n (it is conservative: up to 0.99+ at the corners).

Only Clopper-Pearson passes every cell, so a single run's proportion gets it, computed by scipy's
own ``binomtest(k, n).proportion_ci(method="exact")``. It needs the units to be independent draws: a
proportion over *clustered* units (correlated edits of one photo) keeps the clustered bootstrap.

**Edge notes** (:func:`edge_note`): an interval over fewer than :data:`FEW_UNITS` units, one of zero
width, or one whose bootstrap left replicates out (a resample where the metric is undefined) is
printed, tagged and reported with one line saying so, so that nobody reads "[1.0000, 1.0000]" as
certainty.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vsbench.stats.resample import EXPANDED_PERCENTILE
from vsbench.stats.statistics import _rows_where
from vsbench.stats.units import Units

PLURAL = {"query": "queries", "question": "questions", "pair": "pairs", "seed": "seeds"}
FEW_UNITS = 20  # under this many units (or clusters) an interval is rough, whatever its method
CLOPPER_PEARSON = "Clopper-Pearson"
BOOTSTRAP = EXPANDED_PERCENTILE
# A pooled-ranking statistic rests on the units that hold a positive: its column counting them.
POSITIVES = {"micro_ap": "n_positives"}


def proportion_counts(units: Units, spec: Any) -> tuple[int, int] | None:
    """``(successes, trials)`` when a metric is a proportion of independent units: the plain mean
    (``ratio`` with no ``den`` and no ``transform``) of a column holding only 0 and 1, over units that
    are not clustered, on a class's rows when the spec names one. None for anything else (those keep
    the bootstrap)."""
    if spec.get("statistic") != "ratio" or spec.get("den") or spec.get("transform"):
        return None
    if units.clusters is not None and units.cluster_index()[1] != len(units):
        return None
    values = units.values(spec["num"])
    if spec.get("where") is not None:
        values = values[_rows_where(units, spec["where"], spec.get("equals"))]
    if values.size == 0 or not np.isin(values, (0.0, 1.0)).all():
        return None
    return int(np.count_nonzero(values)), int(values.size)


def clopper_pearson(successes: int, trials: int, confidence: float) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of ``successes`` out of ``trials``: scipy's own numbers."""
    from scipy.stats import binomtest

    found = binomtest(successes, trials).proportion_ci(confidence_level=confidence, method="exact")
    return float(found.low), float(found.high)


def units_behind(units: Units, spec: Any) -> int:
    """How many independent draws an interval rests on: a class's units for a per-class metric, the
    units with a nonzero denominator for a ratio with one, else the clusters (units when unclustered)."""
    if spec.get("statistic") == "ratio":
        rows = np.arange(len(units))
        if spec.get("where") is not None:
            rows = _rows_where(units, spec["where"], spec.get("equals"))
        if spec.get("den"):
            return int(np.count_nonzero(units.values(spec["den"])[rows]))
        if units.clusters is None:
            return int(rows.size)
        return int(np.unique(units.cluster_index()[0][rows]).size)
    return units.cluster_index()[1]


def draws_behind(units: Units, spec: Any) -> int:
    """The independent draws a bootstrap interval's expansion counts (:func:`vsbench.stats.resample.
    expanded_confidence`): the groups (units when ungrouped) holding a unit the metric rests on. That
    is a class's units for a per-class metric, the units with a nonzero denominator for a ratio with
    one, the units with a positive for a pooled ranking whose statistic counts them (DISC's uAP and
    recall at P90: its ``n_positives``; queries without a copy only add false positives, and a uAP
    over 10 copies among 50 queries is as rough as its 10 copies: issue 55 measured 0.919 coverage
    counting the 50, 0.9515 counting the 10), else every unit."""
    rows = np.arange(len(units))
    name = spec.get("statistic")
    if name == "ratio":
        if spec.get("where") is not None:
            rows = _rows_where(units, spec["where"], spec.get("equals"))
        if spec.get("den"):
            rows = rows[units.values(spec["den"])[rows] != 0]
    elif name in POSITIVES and POSITIVES[name] in units.columns:
        rows = np.flatnonzero(units.values(POSITIVES[name]) > 0)
    cluster, _ = units.cluster_index()
    return int(np.unique(cluster[rows]).size)


def edge_note(kind: str, units: int, low: float, high: float, dropped: int = 0, resamples: int = 0) -> str:
    """One line on what makes an interval weak, "" when nothing does: fewer than :data:`FEW_UNITS`
    units, zero width, replicates left out. ``kind``: the unit's word (``question``), for the line."""
    parts = []
    if 0 < units < FEW_UNITS:
        words = kind if units == 1 else PLURAL.get(kind, f"{kind}s")
        parts.append(f"only {units} {words} (under {FEW_UNITS}): a rough interval")
    if math.isfinite(low) and math.isfinite(high) and low == high:
        parts.append("zero width: every resample gave the same value, which is no certainty")
    if dropped:
        parts.append(f"{dropped} of {resamples} resamples left out (the metric is undefined on them: "
                     "no positive drawn)")
    return "; ".join(parts)
