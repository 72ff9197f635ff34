"""ABID's per-question outcomes (:class:`~vsbench.stats.units.Units` of kind ``question``), beside
the scorers of :mod:`vsbench.abid.metrics`, for intervals and paired comparisons.

Every ABID metric is a ratio over questions, so the plain ``ratio`` statistic recomputes it from
reweighted questions: accuracy is the mean of ``correct`` (0/1), RMSE the square root of the mean
``squared_error``. A per-class score (the challenge's table by ground-truth count) is the same ratio
over the questions of that class only: ``ratio`` with ``where="truth", equals=class``, which selects
the rows of one class instead of storing a masked copy of each column per class (the hard task has as many classes as its
largest count; memory stays one column per outcome).

Unit ids name a question as its task file does, so that two runs over the same task files are
compared paired whatever order or subset they scored: a counting question is its image's 0-based
index (``"523"``), an object-verification question the image and the asin asked (``"523:B00X"``), a
quantity question those and the quantity asked (``"523:B00X:3"``). A task file that asks one
question twice gets ``#2``, ``#3`` ... on the later copies (file order), so ids stay unique and stable.

Metric names are the caller's (``prefix`` + the scorer's ``as_dict`` names): the score step logs
``counting_accuracy``, ``vsbench score abid-counting`` logs ``accuracy``; a unit file's metrics are
always named as the record it belongs to names them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from vsbench.stats.outcomes import Outcomes
from vsbench.stats.units import Units

KIND = "question"
BENCHMARKS = {"counting": "abid_counting", "verification": "abid_verification", "quantity": "abid_quantity"}


def unique_ids(keys: Iterable[str]) -> np.ndarray:
    """The keys, a repeated one suffixed ``#2``, ``#3`` ... in order (the first copy stays plain)."""
    seen: dict[str, int] = {}
    out = []
    for key in keys:
        n = seen.get(key, 0) + 1
        seen[key] = n
        out.append(key if n == 1 else f"{key}#{n}")
    return np.asarray(out, dtype=str)


def question_ids(entries: Sequence[Sequence[Any]], task: str) -> np.ndarray:
    """Stable ids of a task file's questions (see the module docstring); ``task`` is ``counting``,
    ``verification`` or ``quantity``."""
    if task == "counting":
        return unique_ids(str(e[0]) for e in entries)
    if task == "verification":
        return unique_ids(f"{e[0]}:{e[1]}" for e in entries)
    if task == "quantity":
        return unique_ids(f"{e[0]}:{e[1]}:{e[4]}" for e in entries)
    raise ValueError(f"ABID task {task!r}: expected counting, verification or quantity")


def _checked(pred: ArrayLike, truth: ArrayLike, ids: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p, g = np.asarray(pred, dtype=np.int64).ravel(), np.asarray(truth, dtype=np.int64).ravel()
    names = np.asarray(ids, dtype=str).ravel()
    if not p.size == g.size == names.size:
        raise ValueError(f"{p.size} answers, {g.size} true answers and {names.size} question ids: one each")
    return p, g, names


def counting_units(pred: ArrayLike, truth: ArrayLike, ids: ArrayLike, *, prefix: str = "",
                   variant: str = "") -> Units:
    """Counting questions: ``{prefix}accuracy``, ``{prefix}rmse`` and, for each ground-truth class
    with an example, ``{prefix}accuracy_class_<c>`` and ``{prefix}rmse_class_<c>``
    (:meth:`~vsbench.abid.metrics.CountingMetrics.as_dict`'s names)."""
    p, g, names = _checked(pred, truth, ids)
    correct = (p == g).astype(np.float64)
    squared = (p.astype(np.float64) - g.astype(np.float64)) ** 2  # as counting_metrics: no int64 wrap
    metrics: dict[str, dict[str, Any]] = {
        f"{prefix}accuracy": {"statistic": "ratio", "num": "correct"},
        f"{prefix}rmse": {"statistic": "ratio", "num": "squared_error", "transform": "sqrt"},
    }
    for cls in np.unique(g).tolist():
        metrics[f"{prefix}accuracy_class_{cls}"] = {"statistic": "ratio", "num": "correct", "where": "truth",
                                                    "equals": int(cls)}
        metrics[f"{prefix}rmse_class_{cls}"] = {"statistic": "ratio", "num": "squared_error", "where": "truth",
                                                "equals": int(cls), "transform": "sqrt"}
    columns = {"prediction": p, "truth": g, "correct": correct, "squared_error": squared}
    return Units(KIND, BENCHMARKS["counting"], names, columns, metrics, variant=variant)


def answer_units(pred: ArrayLike, truth: ArrayLike, ids: ArrayLike, *, task: str, prefix: str = "",
                 variant: str = "") -> Units:
    """Yes/no questions (object verification, ``task="verification"``; quantity verification,
    ``task="quantity"``): ``{prefix}accuracy``, the mean of 0/1 ``correct`` (McNemar applies)."""
    if task not in ("verification", "quantity"):
        raise ValueError(f"answer_units: task must be verification or quantity, not {task!r}")
    p, g, names = _checked(pred, truth, ids)
    columns = {"prediction": p, "truth": g, "correct": (p == g).astype(np.float64)}
    metrics = {f"{prefix}accuracy": {"statistic": "ratio", "num": "correct"}}
    return Units(KIND, BENCHMARKS[task], names, columns, metrics, variant=variant)


def abid_outcomes(units: Units) -> Outcomes:
    """Each question right or wrong (issue 47's compare sheet): right when the answer equals the truth
    (counting: the predicted count is the true count; verification and quantity: the yes/no answer).
    Severity: how far the answer is from the truth."""
    prediction = units.values("prediction", np.int64)
    truth = units.values("truth", np.int64)
    right = prediction == truth
    counting = units.benchmark == BENCHMARKS["counting"]

    def answer(row: int) -> str:
        if counting:
            return f"counted {prediction[row]} (true {truth[row]})"
        words = {0: "no", 1: "yes"}
        return (f"answered {words.get(int(prediction[row]), prediction[row])} "
                f"(true {words.get(int(truth[row]), truth[row])})")

    return Outcomes(units, right, np.ones(len(units), dtype=bool), np.abs(prediction - truth).astype(np.float64),
                    "right: the answer equals the truth", answer)
