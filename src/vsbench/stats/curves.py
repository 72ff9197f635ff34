"""Curve statistics (ROC AUC, PR AP) over reweighted units: patch pairs (HPatches) and VSD tagged pairs.

Each statistic follows the contract of :mod:`vsbench.stats.statistics`: under integer weights (how
often each unit was drawn) it equals the benchmark's own scorer run on the data written out one
copy per draw, copies of a unit next to each other where the unit stood. It sorts the units once
(cached on the :class:`Units`), then evaluates a block of replicates with weighted cumulative sums;
the only Python loops run over the largest draw count (the PR area of a positive drawn ``m`` times
is ``m`` trapezoids) and over row sub-blocks that bound memory.

Patch pairs (``vsbench.benchmarks.patch_pairs.metrics``), units = pairs, columns ``distance``
(score = -distance), ``label`` (1 positive, 0 negative), ``line`` (the pair's line in its pairs file)
and ``set`` (the grid name of its file: ``easy``, ``hard``, ``diffseq``, ``sameseq``):

* ranking: ascending distance, ties with the negatives first and then in file order (the scorer's
  stable sort of ``[negatives; positives]``); the copies of one pair tie and sit together. A pair at
  distance ``+inf`` is never retrieved: it counts in the totals, never on the curve.
* ``pair_roc_auc`` (balanced protocol): every rank is a curve point, so the trapezoid area is
  ``sum over negatives of w * (positive weight ranked before it) / (P * N)``.
* ``pair_pr_ap`` (imbalanced protocol): all negatives with the first ``(sum of positive weights) // 5``
  positives of the *expanded* positives file (file order, each pair repeated as often as drawn).
  That is what the scorer does with the expanded file, so a resample moves the 20% boundary: a pair
  drawn 3 times just before the boundary may keep 1 of its copies, and a pair beyond the original
  boundary enters when pairs before it were drawn more often than once. The area is the trapezoid
  rule under ``precision = max(tp, 1e-10) / max(tp + fp, 1e-10)`` from (recall 0, precision 1).
* ``pair_mean_pr_ap``: the mean of ``pair_pr_ap`` over the (positives x negatives) grid, the HPatches
  headline.

A resample without any positive or without any negative pair is NaN (the scorer refuses it).

VSD (``vsbench.benchmarks.vsd.metrics``), units = seeds, list columns ``score`` (cosine of each of
the seed's tagged pairs) and ``label`` (its tag): ``tagged_roc_auc`` and ``tagged_average_precision``
are sklearn's ``roc_auc_score`` and ``average_precision_score`` over all tagged pairs, each pair
weighted by its seed's draw count; tied scores form one threshold, so the order of tied pairs (and of
copies) does not matter. NaN where the resample has no positive (or, for ROC, no negative) pair.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from vsbench.stats.units import Units

SMALL = 1e-10  # patch_pairs.metrics._SMALL: the floor of its denominators
BLOCK_CELLS = 1 << 21  # float64 cells a statistic's temporaries hold at once, per array


def _row_blocks(rows: int, width: int) -> Iterator[slice]:
    """Slices of replicate rows such that ``rows x width`` temporaries stay near :data:`BLOCK_CELLS`."""
    step = max(1, BLOCK_CELLS // max(width, 1))
    for start in range(0, rows, step):
        yield slice(start, min(rows, start + step))


# ------------------------------------------------------------------------------ patch pairs


def _text(units: Units, name: str) -> np.ndarray:
    key = f"t:{name}"
    if key not in units._cache:
        units._cache[key] = np.asarray(units._column(name)).astype(str)
    return units._cache[key]


def _pair_layout(units: Units, positive: str | None, negative: str | None) -> dict[str, np.ndarray]:
    """The rows of one (positives, negatives) combination, sorted once and cached on ``units``.

    Curve order is ascending distance, negatives first on ties, then file line. Kept: the negative
    rows in curve order (and whether each is retrieved), the positive rows in file order, each
    positive's place in curve order and the number of negatives ranked before it.
    """
    key = f"pp:{positive}:{negative}"
    if key in units._cache:
        return units._cache[key]
    label = units.values("label", np.int64)
    if np.isin(label, (0, 1), invert=True).any():
        raise ValueError("patch pair labels must be 0 or 1")
    rows = np.arange(len(units))
    if positive is not None or negative is not None:
        sets = _text(units, "set")
        keep = np.ones(len(units), dtype=bool)
        if positive is not None:
            keep &= (label == 0) | (sets == positive)
        if negative is not None:
            keep &= (label == 1) | (sets == negative)
        rows = rows[keep]
    distance = units.values("distance")[rows]
    if np.isnan(distance).any() or (distance == -np.inf).any():
        raise ValueError("patch pair distances must be numbers above -inf (+inf: never retrieved)")
    line = units.values("line", np.int64)[rows]
    lab = label[rows]
    order = np.lexsort((line, lab, distance))  # distance first, then negatives, then file order
    ranked_lab = lab[order]
    negatives_before = np.cumsum(ranked_lab == 0)  # at a positive: the negatives ranked before it
    slot = np.empty(rows.size, dtype=np.int64)
    slot[order] = np.arange(rows.size)
    pos = np.flatnonzero(lab == 1)
    pos = pos[np.argsort(line[pos], kind="stable")]  # positives in file order
    neg = order[ranked_lab == 0]
    layout = {"negative_rows": rows[neg], "negative_retrieved": np.isfinite(distance[neg]).astype(np.float64),
              "positive_rows": rows[pos], "positive_slot": slot[pos],
              "positive_retrieved": np.isfinite(distance[pos]), "negatives_before": negatives_before[slot[pos]]}
    units._cache[key] = layout
    return layout


def _negatives_before(layout: dict[str, np.ndarray], w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(negative weight in all, retrieved negative weight in all, cumulative retrieved negative
    weight with a leading 0: entry ``j`` is the weight of the first ``j`` negatives in curve order)."""
    neg = w[:, layout["negative_rows"]].astype(np.float64)
    retrieved = neg * layout["negative_retrieved"]
    cumulative = np.zeros((w.shape[0], neg.shape[1] + 1))
    np.cumsum(retrieved, axis=1, out=cumulative[:, 1:])
    return neg.sum(axis=1), cumulative[:, -1], cumulative


def pair_roc_auc(units: Units, weights: np.ndarray, *, positive: str | None = None,
                 negative: str | None = None) -> np.ndarray:
    """Balanced-protocol ROC AUC of the pairs (of the ``positive`` and ``negative`` sets when named).

    ``sum over negatives of w * (positive weight before it)`` is summed the other way round, over the
    positives: ``w * (retrieved negative weight after it)``; both are sums of whole numbers, exact."""
    layout = _pair_layout(units, positive, negative)
    w_all = np.asarray(weights)
    out = np.empty(w_all.shape[0])
    for block in _row_blocks(w_all.shape[0], len(layout["negative_rows"]) + len(layout["positive_rows"])):
        w = w_all[block]
        n, n_retrieved, cumulative = _negatives_before(layout, w)
        pos = w[:, layout["positive_rows"]].astype(np.float64)
        p = pos.sum(axis=1)
        after = n_retrieved[:, None] - cumulative[:, layout["negatives_before"]]
        area = np.einsum("ij,ij->i", pos, after)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[block] = np.where((p > 0) & (n > 0), area / (np.maximum(p, SMALL) * np.maximum(n, SMALL)), np.nan)
    return out


def _precision(tp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    return np.maximum(tp, SMALL) / np.maximum(tp + fp, SMALL)


def pair_pr_ap(units: Units, weights: np.ndarray, *, positive: str | None = None, negative: str | None = None,
               fraction: int = 5) -> np.ndarray:
    """Imbalanced-protocol PR AP: all negatives and the first ``1/fraction`` of the expanded positives
    file (see the module docstring for what that means under resampling). Only the positives that
    some replicate of the block keeps are looked at: a prefix of the file, about a fifth of it."""
    layout = _pair_layout(units, positive, negative)
    w_all = np.asarray(weights)
    out = np.empty(w_all.shape[0])
    for block in _row_blocks(w_all.shape[0], len(layout["negative_rows"]) + len(layout["positive_rows"])):
        w = w_all[block]
        wp = w[:, layout["positive_rows"]].astype(np.int64)  # positives in file order
        total_pos = wp.sum(axis=1)
        kept = total_pos // fraction  # n_imb of the expanded positives file
        before = np.cumsum(wp, axis=1) - wp
        prefix = int(np.count_nonzero(before < kept[:, None], axis=1).max(initial=0))
        v = np.clip(kept[:, None] - before[:, :prefix], 0, wp[:, :prefix])  # copies inside the first 20%
        by_rank = np.argsort(layout["positive_slot"][:prefix], kind="stable")
        v = v[:, by_rank]
        tp0 = np.cumsum(v, axis=1) - v  # kept positives ranked before it
        n, _, cumulative = _negatives_before(layout, w)
        fp = cumulative[:, layout["negatives_before"][:prefix][by_rank]]  # negatives before it (ties: first)
        v = np.where(layout["positive_retrieved"][:prefix][by_rank], v, 0)
        area = np.zeros(w.shape[0])
        previous = _precision(tp0.astype(np.float64), fp)
        for m in range(1, int(v.max(initial=0)) + 1):
            current = _precision(tp0 + float(m), fp)
            area += np.where(v >= m, (previous + current) / 2.0, 0.0).sum(axis=1)
            previous = current
        out[block] = np.where((total_pos > 0) & (n > 0), area / np.maximum(kept, SMALL), np.nan)
    return out


def pair_mean_pr_ap(units: Units, weights: np.ndarray, *, positives: Sequence[str],
                    negatives: Sequence[str], fraction: int = 5) -> np.ndarray:
    """Mean imbalanced PR AP over every (positive set, negative set) combination: HPatches' headline."""
    values = [pair_pr_ap(units, weights, positive=p, negative=n, fraction=fraction)
              for p in positives for n in negatives]
    return np.mean(values, axis=0)


# -------------------------------------------------------------------------- VSD tagged pairs


def _tagged_layout(units: Units, score: str, label: str) -> dict[str, np.ndarray]:
    """Tagged pairs by descending score (cached): their owner seed, label, and where tie groups end."""
    key = f"tp:{score}:{label}"
    if key in units._cache:
        return units._cache[key]
    s, owner = units.lists(score)
    y, owner_y = units.lists(label, np.int64)
    if s.shape != y.shape or not np.array_equal(owner, owner_y):
        raise ValueError(f"list columns {score!r} and {label!r} do not pair up")
    if not np.isfinite(s).all() or np.isin(y, (0, 1), invert=True).any():
        raise ValueError("tagged pair scores must be finite and labels 0 or 1")
    order = np.argsort(-s, kind="stable")
    ends = np.concatenate([np.flatnonzero(np.diff(s[order])), [s.size - 1]]) if s.size else np.zeros(0, np.int64)
    layout = {"owner": owner[order], "positive": y[order] == 1, "ends": ends}
    units._cache[key] = layout
    return layout


def _tagged_counts(units: Units, weights: np.ndarray, score: str, label: str
                   ) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """Per row block: cumulative weighted (tp, fp) at the end of each tie group, highest score first."""
    layout = _tagged_layout(units, score, label)
    w_all = np.asarray(weights)
    for block in _row_blocks(w_all.shape[0], layout["owner"].size):
        w = w_all[block][:, layout["owner"]].astype(np.float64)
        pos_w = np.where(layout["positive"], w, 0.0)
        tp = np.cumsum(pos_w, axis=1)[:, layout["ends"]]
        fp = np.cumsum(w - pos_w, axis=1)[:, layout["ends"]]
        yield block, tp, fp


def tagged_roc_auc(units: Units, weights: np.ndarray, *, score: str = "score", label: str = "label") -> np.ndarray:
    """sklearn's ROC AUC over every unit's tagged pairs, each pair weighted by its unit's draw count."""
    out = np.full(np.asarray(weights).shape[0], np.nan)
    for block, tp, fp in _tagged_counts(units, weights, score, label):
        if tp.shape[1] == 0:
            continue
        p, n = tp[:, -1:], fp[:, -1:]
        with np.errstate(invalid="ignore", divide="ignore"):
            tpr = np.concatenate([np.zeros_like(p), tp / p], axis=1)
            fpr = np.concatenate([np.zeros_like(n), fp / n], axis=1)
            area = np.sum(np.diff(fpr, axis=1) * (tpr[:, 1:] + tpr[:, :-1]) / 2.0, axis=1)
        out[block] = np.where((p[:, 0] > 0) & (n[:, 0] > 0), area, np.nan)
    return out


def tagged_average_precision(units: Units, weights: np.ndarray, *, score: str = "score",
                             label: str = "label") -> np.ndarray:
    """sklearn's average precision over every unit's tagged pairs, weighted by draw counts (tie
    groups whose pairs were all left out add a repeated point, which adds nothing)."""
    out = np.full(np.asarray(weights).shape[0], np.nan)
    for block, tp, fp in _tagged_counts(units, weights, score, label):
        if tp.shape[1] == 0:
            continue
        p = tp[:, -1:]
        with np.errstate(invalid="ignore", divide="ignore"):
            recall = tp / p
            gain = np.diff(np.concatenate([np.zeros_like(p), recall], axis=1), axis=1)
            precision = tp / (tp + fp)
            ap = np.sum(np.where(gain > 0, gain * precision, 0.0), axis=1)
        out[block] = np.where(p[:, 0] > 0, ap, np.nan)
    return out


STATISTICS: dict[str, Any] = {
    "pair_roc_auc": pair_roc_auc,
    "pair_pr_ap": pair_pr_ap,
    "pair_mean_pr_ap": pair_mean_pr_ap,
    "tagged_roc_auc": tagged_roc_auc,
    "tagged_average_precision": tagged_average_precision,
}
