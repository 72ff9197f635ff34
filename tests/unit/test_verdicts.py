"""One decision rule and the right test per statistic (issue 55).

* a pooled-ranking statistic (uAP, recall at P90) is compared by the paired bootstrap with each run
  keeping its own scores: rescaling, shifting or exponentiating one run's scores changes neither its
  interval nor its p-value nor its verdict (the swap test pooled two score scales into one ranking);
* an accuracy takes McNemar's exact test, a class's accuracy on that class's questions only;
* the verdict is the interval's, and a test on the other side of 0.05 is said, not obeyed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from vsbench.abid.units import counting_units
from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.stats.compare import Difference, bootstrap_p_value, choose_test, compare, verdict
from vsbench.stats.resample import Resampling, expanded_confidence, percentile_interval


def _disc_case(seed: int, n_queries: int = 60, better: float = 0.0) -> tuple[list, list, list, list, list]:
    """Queries with one copy each among 6 candidates; ``better`` raises the copy's score."""
    rng = np.random.default_rng(seed)
    pq, pr, ps, gq, gr = [], [], [], [], []
    for q in range(n_queries):
        copy = f"r{q}"
        gq.append(f"q{q}")
        gr.append(copy)
        for c in range(6):
            ref = copy if c == 0 else f"n{q}_{c}"
            pq.append(f"q{q}")
            pr.append(ref)
            ps.append(float(rng.normal(0.6 + better if c == 0 else 0.0, 1.0)))
    return pq, pr, ps, gq, gr


TRANSFORMS = {
    "scaled": lambda s: [3.5 * x for x in s],
    "shifted": lambda s: [x - 40.0 for x in s],
    "x1000 + 7": lambda s: [1000.0 * x + 7.0 for x in s],
    "exponentiated": lambda s: [math.exp(x) for x in s],
    "negated L2-like": lambda s: [-(10.0 - x) ** 3 for x in s],  # monotone increasing on the data's range
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_a_ranking_statistics_comparison_ignores_any_monotone_change_of_one_runs_scores(name: str) -> None:
    first_case = _disc_case(1)
    second_case = _disc_case(2, better=0.8)
    resampling = Resampling(400, 3)
    first = copy_detection_units(*first_case)
    second = copy_detection_units(*second_case)
    pq, pr, ps, gq, gr = second_case
    moved = copy_detection_units(pq, pr, TRANSFORMS[name](ps), gq, gr)
    plain = compare(first, second, resampling, ["uap", "recall_at_p90"])
    changed = compare(first, moved, resampling, ["uap", "recall_at_p90"])
    for metric in ("uap", "recall_at_p90"):
        a, b = plain[metric], changed[metric]
        assert a.paired and a.test.startswith("paired bootstrap of the difference"), a.test
        assert (b.difference, b.low, b.high, b.p_value) == pytest.approx((a.difference, a.low, a.high, a.p_value),
                                                                         abs=1e-12), metric
        assert verdict(a) == verdict(b)
    # and the improvement is seen: its interval excludes 0, the p-value agrees
    assert plain["uap"].distinguishable and plain["uap"].low > 0 and plain["uap"].p_value < 0.05
    assert verdict(plain["uap"]) == "better" and verdict(plain["uap"], higher_is_better=False) == "worse"


def test_identical_ranking_runs_differ_by_exactly_zero_with_p_one() -> None:
    case = _disc_case(4)
    found = compare(copy_detection_units(*case), copy_detection_units(*case), Resampling(200, 0))
    for difference in found.values():
        assert (difference.difference, difference.low, difference.high, difference.p_value) == (0, 0, 0, 1)
        assert difference.paired and verdict(difference) == "same"


def test_the_bootstrap_p_value_counts_each_tail_with_one_added() -> None:
    """Over very many draws the expansion vanishes: the plain doubled share of the smaller tail."""
    huge = 10**9
    assert bootstrap_p_value(np.zeros(99), huge) == 1.0
    assert bootstrap_p_value(np.full(99, 0.1), huge) == pytest.approx(2 / 100, rel=1e-6)
    assert bootstrap_p_value(np.r_[np.full(95, 0.1), np.full(4, -0.1)], huge) == pytest.approx(2 * 5 / 100, rel=1e-6)
    assert bootstrap_p_value(np.array([np.nan, 0.2, 0.3]), huge) == pytest.approx(2 / 3, rel=1e-6)
    assert math.isnan(bootstrap_p_value(np.array([np.nan]), huge))


@pytest.mark.parametrize("draws", [5, 20, 60])
def test_the_bootstrap_p_value_is_read_on_the_expanded_intervals_scale(draws: int) -> None:
    """Hesterberg's expansion by hand (scipy's t and normal): p = 2 t_{n-1}.sf(z_q / sqrt(n / (n - 1)))
    for a tail share q; and p < 0.05 exactly when the expanded 95% interval of the same replicates
    excludes 0 (k of 999 replicates below 0, k = 0..60; the interval's linear interpolation and the
    p-value's (k + 1) / (B + 1) may part only on the two replicates at the cut)."""
    from scipy.stats import norm, t

    d = np.r_[np.full(95, 0.1), np.full(4, -0.1)]
    q = 5 / 100
    assert bootstrap_p_value(d, draws) == pytest.approx(2 * t.sf(norm.isf(q) / math.sqrt(draws / (draws - 1)), draws - 1),
                                                        rel=1e-12)
    assert bootstrap_p_value(d, draws) > 2 * q  # wider than the plain percentile reading
    level = expanded_confidence(0.95, draws)
    parted = 0
    for k in range(61):
        replicates = np.r_[-np.linspace(0.5, 1.0, k), np.linspace(0.1, 1.0, 999 - k)]
        low, high = percentile_interval(replicates, level)
        if (bootstrap_p_value(replicates, draws) < 0.05) != (low > 0 or high < 0):
            parted += 1
            assert abs(k - (1 - level) / 2 * 999) < 2, k
    assert parted <= 2


def test_each_statistic_gets_its_test() -> None:
    truth = np.array([0, 1, 1, 2, 2, 2])
    units = counting_units(truth, truth, [str(i) for i in range(6)])
    kinds = {metric: choose_test(spec, units, units) for metric, spec in units.metrics.items()}
    assert kinds["accuracy"] == "mcnemar" and kinds["accuracy_class_2"] == "mcnemar"
    assert kinds["rmse"] == "permutation" and kinds["rmse_class_1"] == "permutation"
    disc = copy_detection_units(*_disc_case(0, 5))
    assert {m: choose_test(spec, disc, disc) for m, spec in disc.metrics.items()} == {
        "uap": "bootstrap", "accuracy_at_1": "permutation", "recall_at_p90": "bootstrap"}


def test_a_class_accuracy_is_tested_on_that_class_questions_only() -> None:
    """Issue 55: accuracy_class_0 was reported 18/7, p = 0.043 (every question); on class 0's
    questions it was 0/3, p = 0.25, the other way."""
    rng = np.random.default_rng(5)
    truth = np.r_[np.zeros(10, int), np.ones(40, int)]
    pred_a = truth.copy()
    pred_b = truth.copy()
    pred_b[:3] = 1  # class 0: the second run wrong on 3 questions the first got right
    wrong_a = rng.choice(np.arange(10, 50), 18, replace=False)
    pred_a[wrong_a] = 0  # class 1: the first wrong on 18
    ids = [f"b{i:02d}" for i in range(50)]
    found = compare(counting_units(pred_a, truth, ids), counting_units(pred_b, truth, ids), Resampling(200, 0),
                    ["accuracy_class_0", "accuracy"])
    class_0 = found["accuracy_class_0"]
    assert class_0.mcnemar == (3, 0, pytest.approx(sps.binomtest(3, 3).pvalue))
    assert class_0.p_value == pytest.approx(0.25) and "truth is 0" in class_0.test
    assert found["accuracy"].mcnemar == (3, 18, pytest.approx(sps.binomtest(3, 21).pvalue))


def _difference(low: float, high: float, p: float) -> Difference:
    return Difference("m", 0.5, 0.6, 0.1, low, high, p, True, "hand-built")


@pytest.mark.parametrize(("low", "high", "p", "expected", "disagrees"), [
    (0.01, 0.2, 0.01, "better", False),
    (-0.2, -0.01, 0.01, "worse", False),
    (-0.01, 0.2, 0.2, "same", False),
    (0.01, 0.2, 0.07, "better", True),   # the test says "not at 0.05": said beside the verdict, not obeyed
    (-0.01, 0.2, 0.04, "same", True),
    (0.0, 0.2, 0.01, "same", True),      # an interval ending at 0 holds it
    (math.nan, math.nan, 0.01, "same", True),
])
def test_the_verdict_is_the_intervals_and_a_disagreeing_test_is_flagged(low: float, high: float, p: float,
                                                                       expected: str, disagrees: bool) -> None:
    difference = _difference(low, high, p)
    assert verdict(difference) == expected
    assert difference.test_disagrees is disagrees
    assert difference.significant is difference.distinguishable
