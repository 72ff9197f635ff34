"""ABID scorers on hand-worked examples, and against sklearn where the definitions coincide."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, precision_score, recall_score

from vsbench.abid.metrics import counting_metrics, verification_metrics

SAFE_KEY = re.compile(r"^[A-Za-z0-9_]+$")

# pred vs gt, by hand:
#   gt    0 1 1 2 3
#   pred  0 1 2 2 5   -> correct T T F T F (3/5); squared errors 0 0 1 0 4 (mean 1, RMSE 1)
#   class 0: 1 example, right           -> acc 1,   rmse 0
#   class 1: 2 examples, errors 0 and 1 -> acc 1/2, rmse sqrt(1/2)
#   class 2: 1 example, right           -> acc 1,   rmse 0
#   class 3: 1 example, error 2         -> acc 0,   rmse 2
#   classes 4 and 5: no example         -> NaN
PRED = [0, 1, 2, 2, 5]
GT = [0, 1, 1, 2, 3]


def test_counting_hand_example() -> None:
    m = counting_metrics(PRED, GT, num_classes=6)
    assert m.accuracy == pytest.approx(0.6)
    assert m.rmse == pytest.approx(1.0)
    np.testing.assert_allclose(m.per_class_accuracy[:4], [1, 0.5, 1, 0])
    np.testing.assert_allclose(m.per_class_rmse[:4], [0, np.sqrt(0.5), 0, 2])
    assert np.isnan(m.per_class_accuracy[4:]).all() and np.isnan(m.per_class_rmse[4:]).all()
    assert m.per_class_count.tolist() == [1, 2, 1, 1, 0, 0]
    expected = np.zeros((6, 6), dtype=int)
    for g, p in zip(GT, PRED):
        expected[g, p] += 1  # rows = ground truth, columns = prediction
    np.testing.assert_array_equal(m.confusion_matrix, expected)
    assert m.num_examples == 5


def test_counting_as_dict_leaves_out_empty_classes() -> None:
    record = counting_metrics(PRED, GT, num_classes=6).as_dict()
    assert "accuracy_class_3" in record and "rmse_class_3" in record
    assert "accuracy_class_4" not in record and "rmse_class_5" not in record
    assert all(SAFE_KEY.match(key) for key in record)
    assert not any(isinstance(v, float) and np.isnan(v) for v in record.values())


def test_counting_infers_classes_from_data() -> None:
    assert counting_metrics(PRED, GT).confusion_matrix.shape == (6, 6)  # max(pred, gt) = 5


def test_counting_hard_task_counts_above_five() -> None:
    m = counting_metrics([7, 12], [7, 10])
    assert m.accuracy == 0.5
    assert m.rmse == pytest.approx(np.sqrt(2.0))  # errors 0 and 2 -> mean square 2
    assert m.per_class_rmse[10] == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("pred", "gt", "num_classes", "message"),
    [
        ([0, 1], [0], None, "2 predictions for 1"),
        ([0, 1], [0, -1], None, "non-negative"),
        ([0, 1], [0, 6], 6, "outside the 6 classes"),
        ([], [], None, "no examples"),
        ([0.5], [1], None, "integers"),
    ],
)
def test_counting_rejects_bad_input(pred: list, gt: list, num_classes: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        counting_metrics(np.asarray(pred), np.asarray(gt, dtype=np.int64), num_classes)


def test_verification_hand_example_and_sklearn() -> None:
    # pred 1 1 0 0 1 / gt 1 0 0 1 1: TP = 2 (first, last), FP = 1, FN = 1, TN = 1.
    pred, gt = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    m = verification_metrics(pred, gt)
    assert (m.accuracy, m.precision, m.recall) == pytest.approx((3 / 5, 2 / 3, 2 / 3))
    assert m.accuracy == pytest.approx(accuracy_score(gt, pred))
    assert m.precision == pytest.approx(precision_score(gt, pred))
    assert m.recall == pytest.approx(recall_score(gt, pred))


def test_verification_without_positives_is_zero_like_sklearn() -> None:
    # No predicted "yes": precision 0/0 -> 0.0; no true "yes": recall 0/0 -> 0.0 (zero_division=0).
    m = verification_metrics([0, 0, 0], [1, 0, 1])
    assert m.precision == 0.0 == precision_score([1, 0, 1], [0, 0, 0], zero_division=0)
    m = verification_metrics([1, 0, 0], [0, 0, 0])
    assert m.recall == 0.0 == recall_score([0, 0, 0], [1, 0, 0], zero_division=0)
    assert m.accuracy == pytest.approx(2 / 3)


def test_verification_rejects_non_binary_truth_and_scores_any_prediction() -> None:
    with pytest.raises(ValueError, match="0 or 1"):
        verification_metrics([0, 1], [0, 2])
    m = verification_metrics([0, 2, 1], [0, 1, 1])  # upstream: pred == gt, so 2 is a wrong answer
    assert m.accuracy == pytest.approx(2 / 3) and m.recall == pytest.approx(1 / 2) and m.precision == 1.0


def test_counting_scores_predictions_outside_the_classes_as_upstream() -> None:
    # counting/evaluate.py: correct += pred == gt, dist += (pred - gt)^2, per ground-truth class.
    m = counting_metrics(np.array([7, -1, 2]), np.array([5, 0, 2]), 6)
    assert m.accuracy == pytest.approx(1 / 3)
    assert m.rmse == pytest.approx(np.sqrt((4 + 1 + 0) / 3))
    assert m.per_class_rmse[5] == pytest.approx(2.0) and m.per_class_accuracy[2] == 1.0
    assert m.confusion_matrix.shape == (6, 8) and m.confusion_matrix[5, 7] == 1
    assert m.confusion_matrix.sum() == 2  # the -1 prediction has no column
