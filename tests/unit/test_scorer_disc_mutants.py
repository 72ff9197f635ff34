"""The DISC2021 scorer's edges that mutation testing found untested (issue 49, ``make mutate``).

Why: each test here kills mutants of :mod:`vsbench.benchmarks.disc.metrics` that survived
``test_metrics_copy_detection.py``: the id columns the readers give (``Ids``) and their mixtures with
numpy columns, the integer-id fast paths at their bounds, ``shared_codes`` with one side empty, a
precision of exactly 0.9 (isc2021's own code is the oracle there), the fields of the record and of
``Matched`` that other modules read, and the error messages a user sees.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.originals import sscd_isc_metrics
from vsbench.benchmarks.disc import metrics
from vsbench.benchmarks.disc.metrics import (
    copy_detection_metrics,
    copy_detection_metrics_reference,
    match_predictions,
    rank_zero_pairs,
    shared_codes,
)
from vsbench.io.ids import Ids

BOTH = [copy_detection_metrics, copy_detection_metrics_reference]

# q1: its copy r1 on top; q2: its copy r2 tied with r3 at the top; q3: its copy r9 never predicted;
# q4: no ground truth (its prediction is a false positive).
PQ = ["q1", "q1", "q2", "q2", "q4"]
PR = ["r1", "r5", "r2", "r3", "r1"]
PS = [0.9, 0.8, 0.7, 0.7, 0.6]
GQ = ["q1", "q2", "q3"]
GR = ["r1", "r2", "r9"]


def _record(m) -> tuple:
    return (m.uap, m.accuracy_at_1, m.recall_at_p90, m.threshold_at_p90, m.num_predictions,
            m.num_ground_truth, m.num_true_positives, {k: (v.worst, v.best) for k, v in m.ties.items()}, m.notes)


def isc2021(pq, pr, ps, gq, gr) -> tuple[float, float, float]:
    """isc2021's evaluate (vendored from SSCD): uAP, accuracy at 1, recall at P90 (0 when None)."""
    gt = [sscd_isc_metrics.GroundTruthMatch(q, r) for q, r in zip(gq, gr)]
    preds = [sscd_isc_metrics.PredictedMatch(q, r, s) for q, r, s in zip(pq, pr, ps)]
    m = sscd_isc_metrics.evaluate(gt, preds)
    return float(m.average_precision), float(m.recall_at_rank1), float(m.recall_at_p90 or 0.0)


# ----------------------------------------------------------------------------- the record


def test_as_dict_names_every_field_and_the_threshold_only_when_reached() -> None:
    reached = copy_detection_metrics(["a", "b"], ["x", "y"], [0.9, 0.1], ["a", "b"], ["x", "z"])
    assert reached.threshold_at_p90 == 0.9
    assert reached.as_dict() == {"uap": 0.5, "accuracy_at_1": 0.5, "recall_at_p90": 0.5, "threshold_at_p90": 0.9,
                                 "num_predictions": 2, "num_ground_truth": 2, "num_true_positives": 1}
    never = copy_detection_metrics(["a", "b"], ["x", "y"], [0.9, 0.1], ["a", "b"], ["z", "y"])
    assert never.threshold_at_p90 is None and "threshold_at_p90" not in never.as_dict()
    assert never.as_dict()["num_true_positives"] == 1


def test_tie_range_of_accuracy_at_1_is_a_fraction_of_the_ground_truth() -> None:
    # N_gt = 3: q1 at rank 0 in every order, q2 tied at its top (rank 0 only in the best order).
    m = copy_detection_metrics(PQ, PR, PS, GQ, GR)
    assert m.accuracy_at_1 == pytest.approx(1 / 3)
    assert (m.ties["accuracy_at_1"].worst, m.ties["accuracy_at_1"].best) == pytest.approx((1 / 3, 2 / 3))
    assert isc2021(PQ, PR, PS, GQ, GR)[1] == pytest.approx(m.accuracy_at_1)


# ----------------------------------------------------------------------------- precision exactly 0.9


@pytest.mark.parametrize("score", BOTH)
def test_precision_of_exactly_0_9_counts_as_reached(score) -> None:
    # Ranked: 8 copies, a false positive, a copy (P = 9/10 = 0.9 there: isc2021's ``>=`` takes it),
    # then two false positives. N_gt = 10 (one copy never predicted).
    pq = [f"q{i}" for i in range(12)]
    pr = ["r"] * 12
    ps = [float(20 - i) for i in range(12)]
    positive = [0, 1, 2, 3, 4, 5, 6, 7, 9]
    gq, gr = [pq[i] for i in positive] + ["q99"], ["r"] * 10
    m = score(pq, pr, ps, gq, gr)
    assert m.recall_at_p90 == pytest.approx(0.9) and m.threshold_at_p90 == 11.0
    assert isc2021(pq, pr, ps, gq, gr) == pytest.approx((m.uap, m.accuracy_at_1, m.recall_at_p90))


# ----------------------------------------------------------------------------- messages and refusals


def test_match_predictions_counts_repeated_ground_truth_by_default() -> None:
    matched = match_predictions(["a"], ["x"], [0.5], ["a", "a"], ["x", "x"])
    assert matched.n_gt == 2 and matched.multiplicity.tolist() == [2]


def test_refusals_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match=r"^ground_truth_duplicates must be 'count' or 'once', got 'twice'$"):
        match_predictions(["a"], ["x"], [0.5], ["a"], ["x"], ground_truth_duplicates="twice")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^prediction columns differ in length: 2, 1, 1$"):
        copy_detection_metrics(["a", "b"], ["x"], [0.5], ["a"], ["x"])
    with pytest.raises(ValueError, match=r"^ground-truth columns differ in length: 2, 1$"):
        copy_detection_metrics(["a"], ["x"], [0.5], ["a", "b"], ["x"])
    with pytest.raises(ValueError, match=r"^id columns must be 1-D$"):
        copy_detection_metrics([["a"]], [["x"]], [0.5], ["a"], ["x"])
    with pytest.raises(ValueError, match=r"^scores must be 1-D$"):
        copy_detection_metrics(["a"], ["x"], [[0.5]], ["a"], ["x"])
    with pytest.raises(ValueError, match=r"^a score is NaN$"):
        copy_detection_metrics_reference(["a"], ["x"], [float("nan")], ["a"], ["x"])


@pytest.mark.parametrize("gt_reference", [[""], []])
def test_ground_truth_without_pairs_message(gt_reference: list) -> None:
    gt_query = ["a"] * len(gt_reference)
    with pytest.raises(ValueError, match=r"^the ground truth holds no \(query, reference\) pair: uAP is undefined "
                                         r"\(isc2021 fails on it too\)$"):
        copy_detection_metrics(["a"], ["x"], [0.1], gt_query, gt_reference)
    with pytest.raises(ValueError, match=r"^the ground truth holds no \(query, reference\) pair: uAP is undefined$"):
        copy_detection_metrics_reference(["a"], ["x"], [0.1], gt_query, gt_reference)


def test_a_prediction_listed_three_times_names_its_first_two_rows() -> None:
    with pytest.raises(ValueError, match=r"^duplicate prediction pair \(query 'a', reference 'x'\) at rows 1 and 2 "):
        copy_detection_metrics(["b", "a", "a", "a"], ["x", "x", "x", "x"], [0.1, 0.2, 0.3, 0.4], ["a"], ["x"])


def test_note_names_the_repeated_pair_and_the_option() -> None:
    # The repeated pair is not the first ground-truth row: the note must name it, not row 0.
    m = copy_detection_metrics(["a", "b"], ["x", "y"], [0.9, 0.1], ["a", "b", "c", "b"], ["x", "y", "z", "y"])
    (note,) = m.notes
    assert note == ("1 ground-truth pair(s) are listed more than once (e.g. query 'b', reference 'y'); counted "
                    "each time, as isc2021 does, so recall cannot reach 1; ground_truth_duplicates='once' "
                    "(--gt-duplicates once) counts each pair once")
    slow = copy_detection_metrics_reference(["a", "b"], ["x", "y"], [0.9, 0.1], ["a", "b", "c", "b"],
                                            ["x", "y", "z", "y"])
    assert slow.notes == ("1 ground-truth pair(s) are listed more than once",)


# ----------------------------------------------------------------------------- scores


def test_integer_scores_are_compared_as_the_floats_isc2021_reads() -> None:
    # 2**53 and 2**53 + 1 are one float64 (isc2021's reader parses scores with float()): a tie,
    # which puts the false positive first.
    pq, pr, ps, gq, gr = ["a", "b"], ["x", "y"], [2**53, 2**53 + 1], ["b"], ["y"]
    fast, slow = copy_detection_metrics(pq, pr, ps, gq, gr), copy_detection_metrics_reference(pq, pr, ps, gq, gr)
    assert fast.uap == slow.uap == 0.5
    assert isc2021(pq, pr, [float(s) for s in ps], gq, gr)[0] == 0.5


# ----------------------------------------------------------------------------- Ids (the readers' columns)


def _as_ids(*columns: list) -> tuple:
    return tuple(Ids.from_strings(c) for c in columns)


def test_is_ids_is_the_class_by_name_with_codes_and_values() -> None:
    class Named:
        codes = np.zeros(1, dtype=np.int64)
        values = None

    Named.__name__ = "Ids"

    class OnlyCodes:
        codes = np.zeros(1, dtype=np.int64)

    OnlyCodes.__name__ = "Ids"

    class OnlyValues:
        values = None

    OnlyValues.__name__ = "Ids"

    class LookAlike:
        codes = np.zeros(1, dtype=np.int64)
        values = None

    assert metrics._is_ids(Ids.from_strings(["a"]))
    assert metrics._is_ids(Named())
    assert not metrics._is_ids(OnlyCodes()) and not metrics._is_ids(OnlyValues())
    assert not metrics._is_ids(LookAlike()) and not metrics._is_ids(np.array(["a"]))


@pytest.mark.parametrize("gt_reference", [GR, [*GR, ""]], ids=["all-copies", "a-no-copy-row"])
def test_ids_columns_give_the_record_of_lists(gt_reference: list) -> None:
    gt_query = GQ + ["q5"] * (len(gt_reference) - len(GQ))
    lists = copy_detection_metrics(PQ, PR, PS, gt_query, gt_reference)
    ids = copy_detection_metrics(*_as_ids(PQ, PR), PS, *_as_ids(gt_query, gt_reference))
    assert _record(ids) == _record(lists)
    assert lists.num_ground_truth == 3 and lists.num_true_positives == 2


def test_ids_beside_numpy_text_match_as_text() -> None:
    lists = copy_detection_metrics(PQ, PR, PS, GQ, GR)
    pq, pr = _as_ids(PQ, PR)
    assert _record(copy_detection_metrics(pq, pr, PS, np.array(GQ), np.array(GR))) == _record(lists)
    gq, gr = _as_ids(GQ, GR)
    assert _record(copy_detection_metrics(np.array(PQ), np.array(PR), PS, gq, gr)) == _record(lists)


def test_ids_beside_integers_never_match_them() -> None:
    # "1" (text, as the readers give) is not 1 (isc2021 compares tuples).
    text = copy_detection_metrics(*_as_ids(["1", "2"], ["1", "2"]), [0.9, 0.8], [1, 2], [1, 2])
    assert text.num_true_positives == 0 and text.uap == 0.0
    mixed = copy_detection_metrics(*_as_ids(["1", "2"]), np.array([1, 2]), [0.9, 0.8], *_as_ids(["1", "2"]), [1, 2])
    assert mixed.num_true_positives == 2 and mixed.uap == 1.0
    reverse = copy_detection_metrics(np.array([1, 2]), *_as_ids(["1", "2"]), [0.9, 0.8], [1, 2], *_as_ids(["1", "2"]))
    assert reverse.num_true_positives == 2 and reverse.uap == 1.0


def test_comparable_turns_a_text_column_into_ids_and_ids_beside_numbers_into_text() -> None:
    ids = Ids.from_strings(["b", "a"])
    text = np.array(["a", "c"])
    for first, second in ((ids, text), (text, ids)):
        a, b = metrics._comparable(first, second)
        assert metrics._is_ids(a) and metrics._is_ids(b)
        assert (a.tolist(), b.tolist()) == (first.tolist(), second.tolist())
    numbers = np.array([1, 2])
    a, b = metrics._comparable(ids, numbers)
    assert a.dtype.kind == "U" and a.tolist() == ["b", "a"] and b is numbers
    a, b = metrics._comparable(numbers, ids)
    assert a is numbers and b.dtype.kind == "U" and b.tolist() == ["b", "a"]
    assert metrics._comparable(ids, ids) == (ids, ids)


def test_rank_zero_pairs_is_isc2021s_rank_zero_per_distinct_pair() -> None:
    # Distinct ground-truth pairs in key order: (q1, r1) alone on top, (q2, r2) tied at its top,
    # (q3, r9) never predicted.
    for columns in ((PQ, PR, PS, GQ, GR), (*_as_ids(PQ, PR), PS, *_as_ids(GQ, GR))):
        matched = match_predictions(*columns)
        assert rank_zero_pairs(matched).tolist() == [True, False, False]


def test_ids_stay_ids_in_the_matching() -> None:
    # The readers' columns are codes, no Python object a row (issue 48's memory bound): kept as they are.
    matched = match_predictions(*_as_ids(PQ, PR), PS, *_as_ids([*GQ, "q4"], [*GR, ""]))
    assert all(metrics._is_ids(ids) for ids in (matched.pred_query, matched.pred_reference, matched.gt_query))
    assert matched.gt_query.tolist() == GQ


def test_matched_keeps_the_compared_ids_and_codes() -> None:
    matched = match_predictions(PQ, PR, PS, [*GQ, "q4"], [*GR, ""])  # the no-copy row is dropped
    assert matched.pred_query.tolist() == PQ and matched.pred_reference.tolist() == PR
    assert matched.gt_query.tolist() == GQ
    code = dict(zip(PQ, matched.q_codes.tolist()))
    assert matched.gt_codes.tolist()[:2] == [code["q1"], code["q2"]]
    assert matched.gt_codes[2] not in code.values()
    assert matched.is_tp.tolist() == [True, False, True, False, False]
    assert matched.n_queries == 4 and matched.n_gt == 3


# ----------------------------------------------------------------------------- integer fast paths


def test_integer_span_is_taken_only_within_int62() -> None:
    span = metrics._integer_span
    assert span(np.array([3, 5]), np.array([7])) == 5
    assert span(np.array([-(2**62)]), np.array([0])) == 2**62 + 1
    assert span(np.array([-(2**62) - 1]), np.array([0])) is None
    assert span(np.array([0]), np.array([2**62 - 1])) == 2**62
    assert span(np.array([0]), np.array([2**62])) is None
    assert span(np.array([0], dtype=np.uint64), np.array([2**64 - 1], dtype=np.uint64)) is None
    assert span(np.array([0]), np.array([1], dtype=np.uint8)) is None  # kinds differ
    assert span(np.array([0.0]), np.array([1.0])) is None
    assert span(np.array([], dtype=np.int64), np.array([1])) is None


def test_query_codes_shift_dense_integers_and_factorize_sparse_ones() -> None:
    # Two ids: the shift is taken while the span is at most 4 * 2 + 1024 = 1032.
    dense = metrics._query_codes(np.array([5]), np.array([5 + 1031]))
    assert [c.tolist() for c in dense] == [[0], [1031]]
    sparse = metrics._query_codes(np.array([5]), np.array([5 + 1032]))
    assert [c.tolist() for c in sparse] == [[0], [1]]
    negative = metrics._query_codes(np.array([-300, -200]), np.array([-250]))
    assert [c.tolist() for c in negative] == [[0, 100], [50]]


def test_reference_codes_shift_while_the_pair_key_fits_int62() -> None:
    codes = metrics._reference_codes
    first, second, n = codes(np.array([10, 400]), np.array([11]), 3)
    assert (first.tolist(), second.tolist(), n) == ([0, 390], [1], 391)
    first, second, n = codes(np.array([0]), np.array([2**61 - 2]), 2)  # 2 * (2**61 - 1) < 2**62
    assert (first.tolist(), second.tolist(), n) == ([0], [2**61 - 2], 2**61 - 1)
    first, second, n = codes(np.array([0]), np.array([2**61 - 1]), 2)  # 2 * 2**61 = 2**62: factorized
    assert (first.tolist(), second.tolist(), n) == ([0], [1], 2)


def test_large_integer_references_stay_apart() -> None:
    # 2**60 and 2**60 + 1 are one float64: the codes must stay integers.
    big = 2**60
    m = copy_detection_metrics(np.array([7, 7]), np.array([big, big + 1]), [0.9, 0.1],
                               np.array([7]), np.array([big + 1]))
    assert m.uap == 0.5 and m.accuracy_at_1 == 0.0
    assert m.uap == copy_detection_metrics_reference([7, 7], [big, big + 1], [0.9, 0.1], [7], [big + 1]).uap


def test_huge_unsigned_ids_are_factorized() -> None:
    ids = np.array([2**64 - 3, 2**64 - 1], dtype=np.uint64)
    m = copy_detection_metrics(ids, ids, [0.9, 0.8], ids[1:], ids[1:])
    assert m.num_true_positives == 1 and m.uap == 0.5


# ----------------------------------------------------------------------------- shared_codes


def test_shared_codes_with_one_side_empty() -> None:
    text, none = np.array(["b", "a", "b"]), np.array([], dtype=str)
    for first, second in ((text, none), (none, text), (text, np.array([])), (np.array([]), text)):
        a, b = shared_codes(first, second)
        assert a.size == first.size and b.size == second.size and a.dtype == b.dtype == np.int64
        filled = a if a.size else b
        assert filled.tolist() == [1, 0, 1]
    a, b = shared_codes(np.array([]), np.array([3, 1, 3]))  # no prediction beside integer ids
    assert a.size == 0 and b.tolist() == [1, 0, 1]
    for empty in (none, np.array([], dtype=object)):
        a, b = shared_codes(empty, empty)
        assert a.size == b.size == 0 and a.dtype == b.dtype == np.int64


def test_shared_codes_of_one_kind_follow_the_ids_order() -> None:
    a, b = shared_codes(np.array(["q2", "q1"]), np.array(["q3", "q1"]))
    assert (a.tolist(), b.tolist()) == ([1, 0], [2, 0])


def test_shared_codes_keep_text_apart_from_numbers() -> None:
    # Each family is factorized by numpy, so its codes follow its ids' order (the per-query units
    # list queries in code order) and no text code is a number's code.
    for numbers in (np.array([2, 1, 2]), np.array([2.0, 1.0, 2.0])):
        a, b = shared_codes(numbers, np.array(["y", "1", "x"]))
        assert a.tolist() == [1, 0, 1] and b.size == 3 and b[1] < b[2] < b[0]
        assert not set(a.tolist()) & set(b.tolist())
    a, b = shared_codes(np.array([1.0]), np.array(["1.0"]))
    assert a[0] != b[0]


def test_mixed_object_ids_beside_no_prediction() -> None:
    # Empty predictions and ground-truth ids numpy cannot sort (1 and "1"): no code to share, no crash.
    a, b = shared_codes(np.array([]), np.array(["1", 1, "1"], dtype=object))
    assert a.size == 0 and b[0] == b[2] != b[1]
    m = copy_detection_metrics([], [], [], np.array(["1", 1], dtype=object), [7, 7])
    assert (m.uap, m.accuracy_at_1, m.num_ground_truth) == (0.0, 0.0, 2)
