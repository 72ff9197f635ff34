"""The ABID scorers' edges that mutation testing found untested (issue 49, ``make mutate``).

Why: each test here kills mutants of :mod:`vsbench.abid.metrics` that survived
``test_metrics_abid.py``: the class limit read from its variable and applied at exactly its bound
(ground truth, ``num_classes`` and answers), the record's keys and values, the confusion matrix's
integer counts, no warning for classes without examples, and the refusals' messages (they name the
number and the setting to change, so they are checked whole).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest

from vsbench.abid.metrics import MAX_COUNT_CLASSES, counting_metrics, verification_metrics

RAISE_IT = "(set VSBENCH_MAX_COUNT_CLASSES to raise it)"


def refusal(call: Callable[[], object]) -> str:
    with pytest.raises(ValueError) as info:
        call()
    return str(info.value)


@pytest.fixture
def cap_of_five(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("VSBENCH_MAX_COUNT_CLASSES", "5")
    return 5


def test_the_default_limit_is_a_thousand_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VSBENCH_MAX_COUNT_CLASSES", raising=False)
    assert MAX_COUNT_CLASSES == 1000
    assert counting_metrics([0], [999]).per_class_count.size == 1000
    assert refusal(lambda: counting_metrics([0], [1000])) == (
        f"ground-truth count 1000 is over the largest count scored, 999 {RAISE_IT}")
    assert counting_metrics([0], [0], num_classes=1000).confusion_matrix.shape == (1000, 1000)
    assert refusal(lambda: counting_metrics([0], [0], num_classes=1001)) == (
        f"num_classes 1001 is over the 1,000-class limit {RAISE_IT}")


def test_the_limit_is_read_from_its_variable_and_holds_at_its_bound(cap_of_five: int) -> None:
    assert counting_metrics([0], [4]).per_class_count.size == 5  # the largest count scored: cap - 1
    assert refusal(lambda: counting_metrics([0], [5])) == (
        f"ground-truth count 5 is over the largest count scored, 4 {RAISE_IT}")
    assert counting_metrics([0], [0], num_classes=5).confusion_matrix.shape == (5, 5)
    assert refusal(lambda: counting_metrics([0], [0], num_classes=6)) == (
        f"num_classes 6 is over the 5-class limit {RAISE_IT}")


def test_answers_at_or_past_the_limit_add_no_class_and_no_column(cap_of_five: int) -> None:
    m = counting_metrics([5, 10**6], [0, 1])  # both answers out of range: the classes come from the truth
    assert m.per_class_count.tolist() == [1, 1] and m.confusion_matrix.shape == (2, 2)
    assert m.confusion_matrix.sum() == 0 and m.accuracy == 0.0
    m = counting_metrics([5, 2, -3], [0, 2, 1], num_classes=5)  # 5 == the limit == the last column + 1
    assert m.confusion_matrix.shape == (5, 5) and m.confusion_matrix.sum() == 1 and m.confusion_matrix[2, 2] == 1
    assert m.accuracy == pytest.approx(1 / 3) and m.rmse == pytest.approx(np.sqrt((25 + 0 + 16) / 3))
    assert m.per_class_rmse[0] == pytest.approx(5.0) and m.per_class_rmse[1] == pytest.approx(4.0)


def test_no_answer_in_range_leaves_the_classes_to_the_truth() -> None:
    m = counting_metrics([-1, -4], [0, 0])
    assert m.per_class_count.tolist() == [2] and m.confusion_matrix.shape == (1, 1)
    assert m.confusion_matrix.sum() == 0 and m.rmse == pytest.approx(np.sqrt((1 + 16) / 2))


def test_empty_classes_are_nan_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 0/0 for a class with no example must not warn (nor raise)
        m = counting_metrics([0, 3], [0, 3], num_classes=5)
    assert np.isnan(m.per_class_accuracy[[1, 2, 4]]).all() and np.isnan(m.per_class_rmse[[1, 2, 4]]).all()
    assert m.per_class_accuracy[[0, 3]].tolist() == [1.0, 1.0]


def test_the_confusion_matrix_holds_integer_counts() -> None:
    m = counting_metrics([0, 1, 1, 2], [0, 1, 1, 1])
    assert m.confusion_matrix.dtype == np.int64
    assert m.confusion_matrix.tolist() == [[1, 0, 0], [0, 2, 1], [0, 0, 0]]


def test_counting_record_keys_and_values() -> None:
    record = counting_metrics([0, 1, 2, 2, 5], [0, 1, 1, 2, 3], num_classes=6).as_dict()
    assert record == {"accuracy": pytest.approx(0.6), "rmse": pytest.approx(1.0), "num_examples": 5,
                      "accuracy_class_0": 1.0, "rmse_class_0": 0.0,
                      "accuracy_class_1": 0.5, "rmse_class_1": pytest.approx(np.sqrt(0.5)),
                      "accuracy_class_2": 1.0, "rmse_class_2": 0.0,
                      "accuracy_class_3": 0.0, "rmse_class_3": 2.0}
    assert all(type(value) is float for key, value in record.items() if key != "num_examples")


def test_verification_record_keys_and_values() -> None:
    m = verification_metrics([1, 1, 0, 0, 1], [1, 0, 0, 1, 1])
    assert m.num_examples == 5
    assert m.as_dict() == {"accuracy": pytest.approx(0.6), "precision": pytest.approx(2 / 3),
                           "recall": pytest.approx(2 / 3), "num_examples": 5}


@pytest.mark.parametrize(
    ("pred", "gt", "message"),
    [
        ([[0, 1]], [0, 1], "predictions and ground truth must be 1-D"),
        ([0, 1], [[0, 1]], "predictions and ground truth must be 1-D"),
        ([], [], "no examples to score"),
        ([0.0, 1.0], [0, 1], "predictions must be integers, got dtype float64"),
        ([0, 1], [0.0, 1.0], "ground truth must be integers, got dtype float64"),
        ([0, 1], [0, -1], "ground-truth counts must be non-negative"),
    ],
)
def test_counting_refusals_say_what_is_wrong(pred: list, gt: list, message: str) -> None:
    assert refusal(lambda: counting_metrics(np.asarray(pred, dtype=None if pred else np.int64),
                                            np.asarray(gt, dtype=None if gt else np.int64))) == message


def test_a_count_outside_the_given_classes_names_the_range() -> None:
    assert refusal(lambda: counting_metrics([0, 1], [0, 6], 6)) == "ground-truth count 6 is outside the 6 classes 0..5"


def test_verification_refusal_says_what_is_wrong() -> None:
    assert refusal(lambda: verification_metrics([0, 1], [0, 2])) == "true verification answers must be 0 or 1"
    assert refusal(lambda: verification_metrics([[0, 1]], [0, 1])) == "predictions and ground truth must be 1-D"
