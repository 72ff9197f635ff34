"""DISC2021 metrics: hand-worked values, ties, edge cases, and the fast version against the slow loop."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from vsbench.benchmarks.disc.metrics import copy_detection_metrics, copy_detection_metrics_reference

BOTH = [copy_detection_metrics, copy_detection_metrics_reference]

# Ground truth: q1 -> r1, q2 -> r2, q3 has no copy (empty reference), q4 -> r4 (never predicted).
GT_Q = ["q1", "q2", "q3", "q4"]
GT_R = ["r1", "r2", "", "r4"]
# Predictions (q9 is unknown to the ground truth: a false positive, like q3's).
PRED = [("q1", "r1", 0.9), ("q1", "r5", 0.8), ("q2", "r2", 0.8), ("q3", "r3", 0.7), ("q9", "r1", 0.6)]


def _cols(rows: list[tuple]) -> tuple[list, list, list]:
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


@pytest.mark.parametrize("score", BOTH)
def test_hand_example(score) -> None:
    # N_gt = 3 (q1, q2, q4). Worst-case order: 0.9 TP | 0.8 FP, 0.8 TP (negative first on the tie)
    # | 0.7 FP | 0.6 FP.  TPs at i = 1 (P = 1) and i = 3 (P = 2/3), each adding R step 1/3:
    # uAP = 1/3 * 1 + 1/3 * 2/3 = 5/9.  (Positive-first on the tie would give 2/3.)
    # P >= 0.9 only at i = 1 (R = 1/3, score 0.9).
    # acc@1: q1's r1 beats r5 (rank 0), q2's r2 is alone (rank 0), q4 unpredicted: 2/3.
    m = score(*_cols(PRED), GT_Q, GT_R)
    assert m.uap == pytest.approx(5 / 9)
    assert m.recall_at_p90 == pytest.approx(1 / 3)
    assert m.threshold_at_p90 == pytest.approx(0.9)
    assert m.accuracy_at_1 == pytest.approx(2 / 3)
    assert (m.num_predictions, m.num_ground_truth, m.num_true_positives) == (5, 3, 2)


@pytest.mark.parametrize("score", BOTH)
def test_constant_scores_earn_the_worst_ap(score) -> None:
    # Three predictions at the same score, one true: ranked FP, FP, TP -> P = 1/3, uAP = 1/3.
    m = score(["a", "a", "b"], ["x", "y", "z"], [0.5, 0.5, 0.5], ["a"], ["y"])
    assert m.uap == pytest.approx(1 / 3)
    assert m.recall_at_p90 == 0.0 and m.threshold_at_p90 is None
    assert m.accuracy_at_1 == 0.0  # "a" has two predictions >= 0.5: rank 1


@pytest.mark.parametrize("score", BOTH)
def test_tie_at_the_top_of_a_query_is_not_rank_zero(score) -> None:
    m = score(["q", "q", "p"], ["r", "s", "t"], [0.9, 0.9, 0.1], ["q", "p"], ["r", "t"])
    assert m.accuracy_at_1 == pytest.approx(0.5)  # q: rank 1 (tie counts against); p: rank 0


@pytest.mark.parametrize("score", BOTH)
def test_positives_never_retrieved_cap_recall(score) -> None:
    # Two GT pairs, only one predicted (first, P = 1): uAP = 1/2, recall at P90 = 1/2.
    m = score(["a"], ["x"], [1.0], ["a", "b"], ["x", "y"])
    assert m.uap == pytest.approx(0.5) and m.recall_at_p90 == pytest.approx(0.5)
    assert m.accuracy_at_1 == pytest.approx(0.5)


@pytest.mark.parametrize("score", BOTH)
def test_no_predictions(score) -> None:
    m = score([], [], [], ["a"], ["x"])
    assert (m.uap, m.accuracy_at_1, m.recall_at_p90) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("score", BOTH)
def test_duplicate_prediction_is_an_error(score) -> None:
    with pytest.raises(ValueError, match="duplicate prediction"):
        score(["a", "b", "a"], ["x", "y", "x"], [0.1, 0.2, 0.3], ["a"], ["x"])


@pytest.mark.parametrize("score", BOTH)
def test_duplicate_ground_truth_counts_twice_as_isc2021(score) -> None:
    # isc2021: N_gt = len(gt_matches) = 3, and both copies of (a, x) are at rank 0.
    m = score(["a", "b"], ["x", "y"], [0.9, 0.1], ["a", "a", "b"], ["x", "x", "y"])
    assert m.num_ground_truth == 3
    assert m.uap == pytest.approx((1 + 1) / 3) and m.recall_at_p90 == pytest.approx(2 / 3)
    assert m.accuracy_at_1 == pytest.approx(1.0)
    assert len(m.notes) == 1 and "more than once" in m.notes[0]
    once = score(["a", "b"], ["x", "y"], [0.9, 0.1], ["a", "a", "b"], ["x", "x", "y"], ground_truth_duplicates="once")
    assert once.num_ground_truth == 2 and once.uap == pytest.approx(1.0) and not once.notes


@pytest.mark.parametrize("score", BOTH)
def test_ground_truth_without_pairs_is_an_error(score) -> None:
    with pytest.raises(ValueError, match="no \\(query, reference\\) pair"):
        score(["a"], ["x"], [0.1], ["a"], [""])


def test_duplicate_message_names_rows() -> None:
    with pytest.raises(ValueError, match="rows 0 and 2"):
        copy_detection_metrics(["a", "b", "a"], ["x", "y", "x"], [0.1, 0.2, 0.3], ["a"], ["x"])


def test_nan_score_is_an_error() -> None:
    with pytest.raises(ValueError, match="row 1 is NaN"):
        copy_detection_metrics(["a", "b"], ["x", "y"], [0.1, np.nan], ["a"], ["x"])


@pytest.mark.parametrize("score", BOTH)
def test_infinite_scores_rank_as_isc2021(score) -> None:
    # +inf ranks first, -inf last; two +inf in one query tie at the top (rank 1 for both).
    m = score(["a", "a", "b", "c"], ["x", "z", "y", "w"], [np.inf, np.inf, -np.inf, 0.5], ["a", "b"], ["x", "y"])
    # Worst order: inf FP, inf TP (P 1/2) | 0.5 FP | -inf TP (P 2/4).
    assert m.uap == pytest.approx((1 / 2 + 2 / 4) / 2)
    assert m.accuracy_at_1 == 0.5  # a: tie at the top counts against; b: its only prediction
    assert m.recall_at_p90 == 0.0


def test_integer_ids_match_integer_ids() -> None:
    as_int = copy_detection_metrics([1, 1, 2, 3, 9], [1, 5, 2, 3, 1], [0.9, 0.8, 0.8, 0.7, 0.6],
                                    [1, 2, 4], [1, 2, 4])
    assert as_int.uap == pytest.approx(5 / 9) and as_int.accuracy_at_1 == pytest.approx(2 / 3)


@pytest.mark.parametrize("score", BOTH)
def test_integer_ids_never_match_string_ids(score) -> None:
    # isc2021 compares (query, db) tuples: 1 != "1", so nothing is a true positive.
    m = score([1, 2], [1, 2], [0.9, 0.8], ["1", "2"], ["1", "2"])
    assert m.uap == 0.0 and m.accuracy_at_1 == 0.0 and m.num_true_positives == 0


def test_ids_compare_as_python_does() -> None:
    # 1 == 1.0 == True in Python, so these match; mixed object arrays take the same path.
    m = copy_detection_metrics(np.array([1.0, 2.0]), np.array([1, 2], dtype=np.uint8), [0.9, 0.8],
                               np.array([1, 2], dtype=np.int64), np.array([1.0, 2.0]))
    assert m.uap == 1.0
    mixed = copy_detection_metrics(np.array(["1", 1], dtype=object), [7, 7], [0.9, 0.8], [1], [7])
    assert mixed.num_true_positives == 1 and mixed.uap == pytest.approx(1 / 2)


def test_tie_ranges() -> None:
    # One query, a true pair tied with a false one at the top: isc2021 takes the worst order.
    m = copy_detection_metrics(["a", "a"], ["x", "y"], [0.5, 0.5], ["a"], ["x"])
    assert (m.uap, m.accuracy_at_1, m.recall_at_p90) == (0.5, 0.0, 0.0)
    assert m.ties["uap"].best == 1.0 and m.ties["accuracy_at_1"].best == 1.0 and m.ties["recall_at_p90"].best == 1.0
    record = m.as_dict()
    assert record["uap_worst"] == 0.5 and record["uap_best"] == 1.0
    untied = copy_detection_metrics(["a", "a"], ["x", "y"], [0.6, 0.5], ["a"], ["x"])
    assert all(span.is_point for span in untied.ties.values()) and "uap_best" not in untied.as_dict()


def test_equals_sklearn_ap_scaled_by_retrieved_fraction_without_ties() -> None:
    # Without tied scores, worst-case ordering is moot and uAP is sklearn's AP over the predictions
    # times (positives retrieved / N_gt): sklearn's recall is relative to retrieved positives only.
    # With ties they differ: sklearn scores a tied group at its end point, isc2021 takes the worst order.
    rng = np.random.default_rng(3)
    n = 400
    queries = np.arange(n) // 4
    refs = np.arange(n)
    labels = rng.random(n) < 0.3
    scores = rng.random(n) + labels * 0.3
    gt_q = np.concatenate([queries[labels], [10_000, 10_001]])  # two GT pairs never retrieved
    gt_r = np.concatenate([refs[labels], [-1, -2]])
    m = copy_detection_metrics(queries, refs, scores, gt_q, gt_r)
    expected = average_precision_score(labels, scores) * labels.sum() / gt_q.size
    assert m.uap == pytest.approx(expected, abs=1e-12)


def _random_case(seed: int, n_queries: int, per_query: int, n_refs: int) -> tuple:
    rng = np.random.default_rng(seed)
    q = np.repeat(np.arange(n_queries), per_query)
    r = np.concatenate([rng.choice(n_refs, per_query, replace=False) for _ in range(n_queries)])
    gt_queries = rng.choice(n_queries + 5, n_queries // 2, replace=False)  # some unknown to predictions
    gt_refs = rng.integers(0, n_refs, gt_queries.size)
    for i, gq in enumerate(gt_queries[: gt_queries.size // 2]):  # make half of them retrievable
        if gq < n_queries:
            gt_refs[i] = r[gq * per_query + rng.integers(per_query)]
    scores = np.round(rng.random(q.size), 1)  # ten distinct values: many ties
    return q, r, scores, gt_queries, gt_refs


@pytest.mark.parametrize("seed", range(6))
def test_vectorized_equals_reference_with_many_ties(seed: int) -> None:
    case = _random_case(seed, n_queries=60, per_query=12, n_refs=40)
    fast, slow = copy_detection_metrics(*case), copy_detection_metrics_reference(*case)
    assert fast.uap == pytest.approx(slow.uap, abs=1e-9)
    assert fast.accuracy_at_1 == pytest.approx(slow.accuracy_at_1, abs=1e-9)
    assert fast.recall_at_p90 == pytest.approx(slow.recall_at_p90, abs=1e-9)
    assert fast.threshold_at_p90 == slow.threshold_at_p90
    assert fast.num_true_positives == slow.num_true_positives > 0


def test_vectorized_equals_reference_when_p90_is_reached() -> None:
    rng = np.random.default_rng(11)
    n = 300
    q, r = np.arange(n), np.zeros(n, dtype=int)
    labels = rng.random(n) < 0.5
    scores = np.round(rng.random(n) * 0.5 + labels * 0.6, 2)  # positives mostly above negatives
    gq, gr = q[labels], r[labels]
    fast = copy_detection_metrics(q, r, scores, gq, gr)
    slow = copy_detection_metrics_reference(q, r, scores, gq, gr)
    assert slow.recall_at_p90 > 0.5
    assert fast.recall_at_p90 == pytest.approx(slow.recall_at_p90, abs=1e-12)
    assert fast.threshold_at_p90 == slow.threshold_at_p90
    assert fast.uap == pytest.approx(slow.uap, abs=1e-12)


def test_as_dict_is_mlflow_safe() -> None:
    record = copy_detection_metrics(*_cols(PRED), GT_Q, GT_R).as_dict()
    assert {"uap", "accuracy_at_1", "recall_at_p90"} <= record.keys()
    assert all(key.replace("_", "").isalnum() for key in record)


def test_vectorized_equals_reference_with_string_ids() -> None:
    q, r, scores, gq, gr = _random_case(7, n_queries=40, per_query=10, n_refs=30)
    case = (q.astype(str), np.char.add("ref", r.astype(str)), scores,
            gq.astype(str), np.char.add("ref", gr.astype(str)))
    fast, slow = copy_detection_metrics(*case), copy_detection_metrics_reference(*case)
    assert (fast.uap, fast.accuracy_at_1, fast.recall_at_p90) == pytest.approx(
        (slow.uap, slow.accuracy_at_1, slow.recall_at_p90), abs=1e-9)
    assert fast.num_true_positives == slow.num_true_positives > 0


@pytest.mark.parametrize("offset, stride", [(0, 1), (-50, 1), (10**12, 1), (0, 10**9), (2**62 + 5, 1)])
def test_integer_ids_give_the_same_record_as_their_strings(offset: int, stride: int) -> None:
    """Dense integer ids take the shift path, sparse or huge ones the factorizing path: same record.

    The strings of the same ids always go through the factorizing path, so any path gives one record.
    """
    q, r, scores, gq, gr = _random_case(3, n_queries=50, per_query=8, n_refs=30)
    dtype = np.uint64 if offset >= 2**62 else np.int64
    ints = tuple(np.asarray(a, dtype=np.int64).astype(dtype) * dtype(stride) + dtype(offset) if i != 2 else a
                 for i, a in enumerate((q, r, scores, gq, gr)))
    strings = tuple(np.asarray(a).astype(str) if i != 2 else a for i, a in enumerate(ints))
    as_ints, as_strings = copy_detection_metrics(*ints), copy_detection_metrics(*strings)
    assert as_ints.as_dict() == as_strings.as_dict()
    assert as_ints.num_true_positives > 0
    slow = copy_detection_metrics_reference(*ints)
    assert as_ints.uap == pytest.approx(slow.uap, abs=1e-12)
    assert as_ints.accuracy_at_1 == pytest.approx(slow.accuracy_at_1, abs=1e-12)


def test_duplicate_message_is_the_same_on_the_shift_path() -> None:
    with pytest.raises(ValueError, match=r"query 7, reference 3\) at rows 1 and 2"):
        copy_detection_metrics(np.array([5, 7, 7]), np.array([3, 3, 3]), [0.1, 0.2, 0.3], [5], [3])
