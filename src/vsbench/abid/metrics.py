"""ABID challenge scorers: counting, object verification and quantity verification.

The definitions are those of silverbottlep/abid_challenge (``counting/evaluate.py`` and
``verification_siamese/evaluate.py``): accuracy ``mean(p == g)``, RMSE ``sqrt(mean((p - g)^2))``,
and both again per ground-truth class. Differences from upstream, on purpose:

* Upstream fixes six classes and crashes on a ground truth of 6 or more (the hard task); here the
  number of classes is given or inferred from the data.
* Predictions are any integers, as upstream scores them: a count of 7 or -1, or a verification
  answer of 2, is simply wrong. (Upstream also scores the prefix of a short result file: the reader
  ``read_abid_result`` does the same, with a note; these functions take arrays of equal length.)
* A class with no ground-truth example has no per-class accuracy or RMSE: upstream prints ``nan``
  (0/0); here the arrays hold NaN too, ``as_dict`` leaves those classes out (MLflow keeps only
  real numbers) and JSON writers should emit ``null`` for them.
* The classes, and so the per-class tables and the confusion matrix, are bounded by
  :func:`max_count_classes` (``VSBENCH_MAX_COUNT_CLASSES``, 1,000): a ground-truth count or a
  ``num_classes`` past it is refused, and an answer past it (upstream scores a count of 20000 or
  10^9 as wrong, and so does this) adds no class and no column, so memory does not depend on the
  answers' values. (Before, an answer of 20000 built a 20001 x 20001 confusion matrix: 4.6 GB.)
* The squared error is computed in floating point: where ``|pred - gt|`` is over
  :data:`WRAP_FREE_ERROR` upstream's ``np.power`` on 64-bit integers wraps around (a meaningless
  RMSE); up to it, both give the same number.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from vsbench.io.inputs import _env_int

MAX_COUNT_CLASSES = 1000
WRAP_FREE_ERROR = 3_037_000_499  # the largest |pred - gt| whose square fits in a signed 64-bit integer


def max_count_classes() -> int:
    """Most counting classes (0..N-1) a score holds tables for: ``VSBENCH_MAX_COUNT_CLASSES``."""
    return _env_int("VSBENCH_MAX_COUNT_CLASSES", MAX_COUNT_CLASSES)


@dataclass(frozen=True)
class CountingMetrics:
    """Counting scores. Per-class arrays are indexed by ground-truth class; NaN = no example."""

    accuracy: float
    rmse: float
    per_class_accuracy: np.ndarray
    per_class_rmse: np.ndarray
    per_class_count: np.ndarray
    confusion_matrix: np.ndarray  # rows = ground truth, columns = prediction
    num_examples: int

    def as_dict(self) -> dict[str, float | int]:
        """Flat MLflow-safe keys; classes without examples are left out (they have no value)."""
        out: dict[str, float | int] = {"accuracy": self.accuracy, "rmse": self.rmse,
                                       "num_examples": self.num_examples}
        for cls, count in enumerate(self.per_class_count.tolist()):
            if count:
                out[f"accuracy_class_{cls}"] = float(self.per_class_accuracy[cls])
                out[f"rmse_class_{cls}"] = float(self.per_class_rmse[cls])
        return out


@dataclass(frozen=True)
class VerificationMetrics:
    """Yes/no question scores; precision and recall follow sklearn's ``zero_division=0``."""

    accuracy: float
    precision: float
    recall: float
    num_examples: int

    def as_dict(self) -> dict[str, float | int]:
        return {"accuracy": self.accuracy, "precision": self.precision, "recall": self.recall,
                "num_examples": self.num_examples}


def _paired_int_arrays(pred: ArrayLike, gt: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Both as 1-D int64 of the same, non-zero length (a silent prefix would hide a broken file)."""
    p = np.asarray(pred)
    g = np.asarray(gt)
    if p.ndim != 1 or g.ndim != 1:
        raise ValueError("predictions and ground truth must be 1-D")
    if p.shape != g.shape:
        raise ValueError(f"{p.size} predictions for {g.size} ground-truth entries")
    if p.size == 0:
        raise ValueError("no examples to score")
    for name, arr in (("predictions", p), ("ground truth", g)):
        if not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name} must be integers, got dtype {arr.dtype}")
    return p.astype(np.int64), g.astype(np.int64)


def counting_metrics(pred: ArrayLike, gt: ArrayLike, num_classes: int | None = None) -> CountingMetrics:
    """Accuracy, RMSE, per-ground-truth-class accuracy and RMSE, and the confusion matrix.

    ``num_classes`` sets the ground-truth class range ``0..num_classes-1`` (6 for the moderate task);
    by default it is ``max(pred, gt) + 1``, leaving out predictions past :func:`max_count_classes`.
    Ground-truth counts must be in that range; predictions may be any integer (upstream:
    ``int(pred == gt)`` and ``(pred - gt)^2``, whatever ``pred`` is). The confusion matrix has a
    column per count ``0..max(num_classes, max(pred) + 1) - 1``, again up to that limit; a negative
    prediction, or one past the limit, has no column (it still counts in accuracy and RMSE).
    Per class ``c`` the scores use only examples with ``gt == c``; with none they are NaN.
    """
    p, g = _paired_int_arrays(pred, gt)
    cap = max_count_classes()
    if g.min() < 0:
        raise ValueError("ground-truth counts must be non-negative")
    if g.max() >= cap:
        raise ValueError(f"ground-truth count {int(g.max())} is over the largest count scored, {cap - 1} "
                         "(set VSBENCH_MAX_COUNT_CLASSES to raise it)")
    if num_classes is not None and num_classes > cap:
        raise ValueError(f"num_classes {num_classes} is over the {cap:,}-class limit "
                         "(set VSBENCH_MAX_COUNT_CLASSES to raise it)")
    in_range = p[(p >= 0) & (p < cap)]
    largest_answer = int(in_range.max()) if in_range.size else -1
    if num_classes is None:
        num_classes = max(largest_answer, int(g.max())) + 1
    elif g.max() >= num_classes:
        raise ValueError(f"ground-truth count {int(g.max())} is outside the {num_classes} classes 0..{num_classes - 1}")
    correct = (p == g).astype(np.float64)
    squared = (p.astype(np.float64) - g.astype(np.float64)) ** 2  # no int64 wrap-around (see the module doc)
    count = np.bincount(g, minlength=num_classes)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        per_acc = np.bincount(g, weights=correct, minlength=num_classes) / count
        per_rmse = np.sqrt(np.bincount(g, weights=squared, minlength=num_classes) / count)
    columns = max(num_classes, largest_answer + 1)
    confusion = np.zeros((num_classes, columns), dtype=np.int64)
    counted = (p >= 0) & (p < columns)
    np.add.at(confusion, (g[counted], p[counted]), 1)
    return CountingMetrics(
        accuracy=float(correct.mean()),
        rmse=float(np.sqrt(squared.mean())),
        per_class_accuracy=per_acc,
        per_class_rmse=per_rmse,
        per_class_count=count,
        confusion_matrix=confusion,
        num_examples=int(p.size),
    )


def _ratio_or_zero(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def verification_metrics(pred: ArrayLike, gt: ArrayLike) -> VerificationMetrics:
    """Accuracy (the challenge metric), plus precision and recall of the "yes" answer.

    True answers are 0 (no) or 1 (yes); predictions may be any integer, as upstream's ``pred == gt``
    scores them (anything but the true answer is wrong; only 1 is a "yes"). Precision with no
    predicted "yes", and recall with no true "yes", are 0.0 (sklearn's ``zero_division=0``) so that
    the record stays numeric. Quantity verification uses the same function (only its accuracy is reported).
    """
    p, g = _paired_int_arrays(pred, gt)
    if not np.isin(g, (0, 1)).all():
        raise ValueError("true verification answers must be 0 or 1")
    true_pos = int(np.count_nonzero((p == 1) & (g == 1)))
    return VerificationMetrics(
        accuracy=float(np.mean(p == g)),
        precision=_ratio_or_zero(true_pos, int(np.count_nonzero(p == 1))),
        recall=_ratio_or_zero(true_pos, int(np.count_nonzero(g == 1))),
        num_examples=int(p.size),
    )
