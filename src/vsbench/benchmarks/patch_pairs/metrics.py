"""Patch-pair classification scorers, HPatches style (hpatches-benchmark ``python/utils/metrics.py``).

A pair's score is minus its descriptor distance. Predictions are ranked by score, descending,
with a *stable* sort: pairs with equal scores keep their input order, and
:func:`patch_pair_metrics` lists the negatives before the positives (as HPatches stacks them), so
on ties the negatives come first. The curves start at the origin (no pair accepted).

* **Balanced protocol**: all positives against all negatives; ROC curve (fpr, tpr) and its area by
  the trapezoid rule.
* **Imbalanced protocol**: all negatives with the first 20% (``n_pos // 5``, the same count as
  upstream's ``int(0.2 * n_pos)``) of the positives in file order; precision-recall curve with
  ``precision = max(tp, 1e-10) / max(tp + fp, 1e-10)``, so it starts at (recall 0, precision 1);
  AP = trapezoidal area under it. This is *not* sklearn's step-wise average precision.

Deliberate difference: upstream takes ``n_pos + int(0.2 * n_pos)`` rows from the stacked
[negatives; positives] array, which means "all negatives + 20% of positives" only when both files
have the same length; here that subset is taken explicitly, whatever the lengths. An infinite
distance (score ``-inf``) is "never retrieved", as upstream's ``tpfp`` has it: it counts in the
number of positives or negatives but never enters the curve. NaN is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

_SMALL = 1e-10


@dataclass(frozen=True)
class RocCurve:
    fpr: np.ndarray
    tpr: np.ndarray
    auc: float


@dataclass(frozen=True)
class PrCurve:
    precision: np.ndarray
    recall: np.ndarray
    ap: float


@dataclass(frozen=True)
class PatchPairMetrics:
    """Balanced ROC and imbalanced PR for one (positives, negatives) file combination."""

    roc: RocCurve
    pr: PrCurve
    num_positives: int
    num_negatives: int
    num_imbalanced_positives: int

    def as_dict(self) -> dict[str, float | int]:
        return {"roc_auc": self.roc.auc, "pr_ap": self.pr.ap, "num_positives": self.num_positives,
                "num_negatives": self.num_negatives, "num_imbalanced_positives": self.num_imbalanced_positives}


def _trapezoid(y: np.ndarray, x: np.ndarray) -> float:
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0))


def _cumulative_tp_fp(scores: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Cumulative true/false positives along the ranking, starting with (0, 0)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels)
    if s.ndim != 1 or s.shape != y.shape:
        raise ValueError(f"scores {s.shape} and labels {y.shape} must be 1-D of the same length")
    if np.isnan(s).any() or (s == np.inf).any():
        raise ValueError("scores must be numbers below +inf (-inf means never retrieved)")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0 or 1")
    order = np.argsort(-s, kind="stable")  # upstream: np.argsort(-scores, kind='mergesort')
    ranked = (y[order] == 1)[: int(np.count_nonzero(s > -np.inf))]  # -inf: never retrieved
    tp = np.concatenate([[0], np.cumsum(ranked)])
    fp = np.concatenate([[0], np.cumsum(~ranked)])
    n_pos = int(np.count_nonzero(y == 1))
    return tp, fp, n_pos, int(s.size - n_pos)


def roc_curve(scores: ArrayLike, labels: ArrayLike) -> RocCurve:
    """ROC curve over every rank (no point merging) and its trapezoidal area; ties keep input order."""
    tp, fp, n_pos, n_neg = _cumulative_tp_fp(scores, labels)
    tpr = tp / max(n_pos, _SMALL)
    fpr = fp / max(n_neg, _SMALL)
    return RocCurve(fpr=fpr, tpr=tpr, auc=_trapezoid(tpr, fpr))


def pr_curve(scores: ArrayLike, labels: ArrayLike) -> PrCurve:
    """Precision-recall curve from (0, 1) and its trapezoidal area; ties keep input order."""
    tp, fp, n_pos, _ = _cumulative_tp_fp(scores, labels)
    recall = tp / max(n_pos, _SMALL)
    precision = np.maximum(tp, _SMALL) / np.maximum(tp + fp, _SMALL)
    return PrCurve(precision=precision, recall=recall, ap=_trapezoid(precision, recall))


def patch_pair_metrics(pos_distances: ArrayLike, neg_distances: ArrayLike) -> PatchPairMetrics:
    """Both protocols for one positives file and one negatives file (distances in file order)."""
    pos = np.asarray(pos_distances, dtype=np.float64)
    neg = np.asarray(neg_distances, dtype=np.float64)
    if pos.ndim != 1 or neg.ndim != 1 or pos.size == 0 or neg.size == 0:
        raise ValueError("need a non-empty 1-D array of positive and of negative distances")
    n_imb = pos.size // 5
    balanced_labels = np.concatenate([np.zeros(neg.size, dtype=np.int8), np.ones(pos.size, dtype=np.int8)])
    imbalanced_labels = balanced_labels[: neg.size + n_imb]
    return PatchPairMetrics(
        roc=roc_curve(-np.concatenate([neg, pos]), balanced_labels),
        pr=pr_curve(-np.concatenate([neg, pos[:n_imb]]), imbalanced_labels),
        num_positives=int(pos.size),
        num_negatives=int(neg.size),
        num_imbalanced_positives=int(n_imb),
    )


def patch_pair_grid(positives: Mapping[str, ArrayLike],
                    negatives: Mapping[str, ArrayLike]) -> dict[str, PatchPairMetrics]:
    """Every (positives, negatives) combination, keyed ``<positive name>_<negative name>``.

    With HPatches' files, ``{"easy", "hard"} x {"diffseq", "sameseq"}`` gives ``easy_diffseq``,
    ``easy_sameseq``, ``hard_diffseq`` and ``hard_sameseq``.
    """
    return {f"{p_name}_{n_name}": patch_pair_metrics(pos, neg)
            for p_name, pos in positives.items() for n_name, neg in negatives.items()}


def mean_pr_ap(results: Mapping[str, PatchPairMetrics]) -> float:
    """The HPatches paper's single verification figure (as a fraction, not x100)."""
    if not results:
        raise ValueError("no results to average")
    return float(np.mean([r.pr.ap for r in results.values()]))
