"""`vsbench.stats.proportions` word for word and count for count (issue 56: the interval tests reach it
through whole unit files, where most edge notes and most spec shapes never occur).

Each test was seen failing with its mutant planted."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vsbench.stats.proportions import (
    FEW_UNITS,
    clopper_pearson,
    draws_behind,
    edge_note,
    proportion_counts,
    units_behind,
)
from vsbench.stats.units import Units

ROUGH = "(under 20): a rough interval"
ZERO = "zero width: every resample gave the same value, which is no certainty"


def test_edge_notes_word_for_word() -> None:
    assert FEW_UNITS == 20
    assert edge_note("query", 0, 0.1, 0.2) == ""  # no units counted: nothing to say of their number
    assert edge_note("query", 1, 0.1, 0.2) == f"only 1 query {ROUGH}"
    assert edge_note("query", 19, 0.1, 0.2) == f"only 19 queries {ROUGH}"
    assert edge_note("bin", 2, 0.1, 0.2) == f"only 2 bins {ROUGH}"  # no plural of its own: an s
    assert edge_note("pair", 20, 0.1, 0.2) == ""
    assert edge_note("pair", 50, 0.3, 0.3) == ZERO
    assert edge_note("pair", 50, math.nan, math.nan) == "" and edge_note("pair", 50, math.inf, math.inf) == ""
    assert edge_note("pair", 50, 0.3, math.nan) == ""
    assert edge_note("query", 50, 0.1, 0.2, dropped=7, resamples=1000) == (
        "7 of 1000 resamples left out (the metric is undefined on them: no positive drawn)")
    assert edge_note("query", 3, 0.5, 0.5, dropped=1, resamples=10) == (
        f"only 3 queries {ROUGH}; {ZERO}; 1 of 10 resamples left out (the metric is undefined on them: "
        "no positive drawn)")


def test_clopper_pearson_is_scipys_exact_interval_at_the_level_asked() -> None:
    low, high = clopper_pearson(5, 10, 0.95)
    assert low == pytest.approx(0.18709, abs=1e-5) and high == pytest.approx(0.81291, abs=1e-5)
    low90, high90 = clopper_pearson(5, 10, 0.9)
    assert low < low90 and high90 < high
    assert isinstance(low, float) and isinstance(high, float)


def _units(correct: list[float], *, clusters: list[str] | None = None, den: list[float] | None = None,
           label: list[str] | None = None) -> Units:
    n = len(correct)
    columns = {"correct": np.asarray(correct, dtype=np.float64), "label": np.asarray(label or ["a"] * n),
               "den": np.asarray(den if den is not None else [1.0] * n), "n_positives": np.asarray(den or [1.0] * n)}
    return Units("question", "toy", np.array([f"u{i}" for i in range(n)]), columns,
                 {"accuracy": {"statistic": "ratio", "num": "correct"}},
                 None if clusters is None else np.asarray(clusters))


def test_proportion_counts_only_for_a_plain_mean_of_zeros_and_ones() -> None:
    units = _units([1, 0, 1, 1], label=["a", "b", "a", "b"])
    assert proportion_counts(units, {"statistic": "ratio", "num": "correct"}) == (3, 4)
    assert proportion_counts(units, {"statistic": "ratio", "num": "correct", "where": "label", "equals": "b"}) == (1, 2)
    assert proportion_counts(units, {"statistic": "ratio", "num": "correct", "den": "den"}) is None
    assert proportion_counts(units, {"statistic": "ratio", "num": "correct", "transform": "sqrt"}) is None
    assert proportion_counts(units, {"statistic": "micro_ap"}) is None
    assert proportion_counts(units, {"num": "correct"}) is None
    assert proportion_counts(_units([1, 0.5]), {"statistic": "ratio", "num": "correct"}) is None
    assert proportion_counts(_units([1.0]), {"statistic": "ratio", "num": "correct"}) == (1, 1)  # one unit is a proportion
    assert proportion_counts(units, {"statistic": "ratio", "num": "correct", "where": "label", "equals": "z"}) is None
    grouped = _units([1, 0, 1, 1], clusters=["p", "p", "q", "r"])
    assert proportion_counts(grouped, {"statistic": "ratio", "num": "correct"}) is None  # correlated units
    own = _units([1, 0, 1, 1], clusters=["p", "q", "r", "s"])  # each unit its own group: independent
    assert proportion_counts(own, {"statistic": "ratio", "num": "correct"}) == (3, 4)


def test_units_behind_an_interval() -> None:
    units = _units([1, 0, 1, 1, 0], den=[1, 0, 2, 0, 1], label=["a", "b", "a", "a", "b"],
                   clusters=["p", "p", "q", "r", "r"])
    ratio = {"statistic": "ratio", "num": "correct"}
    assert units_behind(units, ratio) == 3  # the groups
    assert units_behind(units, {**ratio, "den": "den"}) == 3  # units with a nonzero denominator
    assert units_behind(units, {**ratio, "where": "label", "equals": "a"}) == 3  # groups of class a's units: p, q, r
    assert units_behind(units, {**ratio, "where": "label", "equals": "b"}) == 2  # p, r
    assert units_behind(units, {**ratio, "where": "label", "equals": "b", "den": "den"}) == 1
    assert units_behind(units, {"statistic": "micro_ap"}) == 3
    plain = _units([1, 0, 1], label=["a", "b", "a"])
    assert units_behind(plain, {**ratio, "where": "label", "equals": "a"}) == 2
    assert units_behind(plain, {"statistic": "micro_ap"}) == 3


def test_draws_behind_counts_the_groups_holding_what_the_metric_rests_on() -> None:
    units = _units([1, 0, 1, 1, 0], den=[1, 0, 2, 0, 1], label=["a", "b", "a", "a", "b"],
                   clusters=["p", "p", "q", "r", "r"])
    assert draws_behind(units, {"statistic": "ratio", "num": "correct", "den": "den"}) == 3  # p, q, r
    assert draws_behind(units, {"statistic": "ratio", "num": "correct", "where": "label", "equals": "b",
                                "den": "den"}) == 1  # r
    assert draws_behind(units, {"statistic": "micro_ap"}) == 3  # n_positives > 0: rows 0, 2, 4
    assert draws_behind(_units([1, 1, 1], den=[0, 0, 1]), {"statistic": "micro_ap"}) == 1
    assert draws_behind(units, {"statistic": "pair_roc_auc"}) == 3
