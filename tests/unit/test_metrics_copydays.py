"""Copydays trapezoidal AP (SSCD ``score_ap_from_ranks_1``) on hand-worked lists."""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest

from vsbench.benchmarks.copydays.metrics import copydays_hits, copydays_metrics, trapezoid_ap_from_ranks


@pytest.mark.parametrize(
    ("ranks", "n_pos", "expected"),
    [
        ([0], 1, 1.0),  # (1 + 1/1) / 2
        ([1], 1, 0.25),  # k=0, r=1: (0/1 + 1/2) / 2
        ([0, 2], 2, 19 / 24),  # (1 + ((1/2 + 2/3) / 2)) / 2
        ([], 1, 0.0),  # positive never retrieved
        ([0], 2, 0.5),  # one of two positives found at the top
    ],
)
def test_trapezoid_ap_by_hand(ranks: list[int], n_pos: int, expected: float) -> None:
    assert trapezoid_ap_from_ranks(ranks, n_pos) == pytest.approx(expected)


def test_trapezoid_ap_rejects_no_positives_and_unsorted_ranks() -> None:
    with pytest.raises(ValueError, match="at least one positive"):
        trapezoid_ap_from_ranks([], 0)
    with pytest.raises(ValueError, match="strictly increasing"):
        trapezoid_ap_from_ranks([3, 1], 2)


def test_copydays_metrics_by_hand() -> None:
    hits = np.array([[0, 1, 0], [1, 0, 1], [1, 0, 0]], dtype=bool)
    distances = np.array([[0.1, 0.2, 0.3], [0.1, 0.4, 0.5], [0.2, 0.3, 0.6]])
    # Per query: q0 (strong, 1 positive) ranks [1] -> 1/4; q1 (strong, 2 positives) ranks [0, 2] -> 19/24;
    # q2 (not strong) ranks [0] -> 1.  strong_map = (1/4 + 19/24) / 2 = 25/48.
    # Pooled by distance (numpy's argsort keeps this small input's order on ties, as SSCD's call does):
    # 0.1 N(q0) P(q1) | 0.2 P P | 0.3 N N | 0.4 N | 0.5 P | 0.6 N
    # -> positive ranks 1, 2, 3, 7 over 3 queries:
    #    k=0 r=1: (0 + 1/2)/2;  k=1 r=2: (1/2 + 2/3)/2;  k=2 r=3: (2/3 + 3/4)/2;  k=3 r=7: (3/7 + 4/8)/2
    pooled = sum((F(k, r) + F(k + 1, r + 1)) / 2 for k, r in enumerate([1, 2, 3, 7])) / 3
    m = copydays_metrics(hits, distances, [1, 2, 1], [True, True, False])
    assert m.strong_map == pytest.approx(25 / 48)
    assert m.overall_uap == pytest.approx(float(pooled))  # 337/504
    assert (m.num_queries, m.num_strong_queries) == (3, 2)
    # The 0.1 tie could put q1's positive first: ranks 0, 2, 3, 7.
    best = sum((F(k, r) + F(k + 1, r + 1)) / 2 if r else (1 + F(k + 1, r + 1)) / 2
               for k, r in enumerate([0, 2, 3, 7])) / 3
    assert m.ties["overall_uap"].worst == pytest.approx(float(pooled))
    assert m.ties["overall_uap"].best == pytest.approx(float(best))
    assert m.ties["strong_map"].is_point  # no tie inside a result list
    assert set(m.as_dict()) == {"strong_map", "overall_uap", "num_queries", "num_strong_queries",
                                "overall_uap_worst", "overall_uap_best"}


def test_pooled_ties_follow_numpys_argsort_and_report_the_range() -> None:
    # One query, both results at the same distance. SSCD's value is whatever np.argsort does with the
    # tie; the range is 1/4 (negative first) to 1 (positive first).
    m = copydays_metrics([[True, False]], [[0.5, 0.5]], [1], [True])
    order = np.argsort(np.array([0.5, 0.5]))
    assert m.overall_uap == pytest.approx(1.0 if order[0] == 0 else 0.25)
    assert (m.ties["overall_uap"].worst, m.ties["overall_uap"].best) == (pytest.approx(0.25), pytest.approx(1.0))
    assert m.strong_map == pytest.approx(1.0)  # per-query AP keeps the search order: rank 0
    assert (m.ties["strong_map"].worst, m.ties["strong_map"].best) == (pytest.approx(0.25), pytest.approx(1.0))


def test_copydays_hits_from_ids() -> None:
    hits = copydays_hits([[4, 2, 9], [1, 7, 3]], [{2}, {3, 1}])
    np.testing.assert_array_equal(hits, [[False, True, False], [True, False, True]])


def test_copydays_metrics_rejects_bad_shapes_and_nan() -> None:
    with pytest.raises(ValueError, match="shapes differ"):
        copydays_metrics([[True]], [[0.1, 0.2]], [1], [True])
    with pytest.raises(ValueError, match="NaN"):
        copydays_metrics([[True]], [[np.nan]], [1], [True])
    with pytest.raises(ValueError, match="no strong query"):
        copydays_metrics([[True]], [[0.1]], [1], [False])
