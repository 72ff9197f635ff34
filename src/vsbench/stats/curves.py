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

    ``rank``: the rows in curve order (ascending distance, negatives first on ties, then file
    line); ``label``/``retrieved`` along it; ``positive_file``: the positive rows in file order,
    and ``positive_slot``: where each of those sits in ``rank``.
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
    rank = rows[order]
    slot = np.empty(rows.size, dtype=np.int64)
    slot[order] = np.arange(rows.size)
    pos = np.flatnonzero(lab == 1)
    pos = pos[np.argsort(line[pos], kind="stable")]
    layout = {"rank": rank, "label": lab[order], "retrieved": np.isfinite(distance[order]),
              "positive_file": rows[pos], "positive_slot": slot[pos]}
    units._cache[key] = layout
    return layout


def pair_roc_auc(units: Units, weights: np.ndarray, *, positive: str | None = None,
                 negative: str | None = None) -> np.ndarray:
    """Balanced-protocol ROC AUC of the pairs (of the ``positive`` and ``negative`` sets when named)."""
    layout = _pair_layout(units, positive, negative)
    w_all = np.asarray(weights)
    out = np.empty(w_all.shape[0])
    is_pos = layout["label"] == 1
    for block in _row_blocks(w_all.shape[0], layout["rank"].size):
        w = w_all[block][:, layout["rank"]].astype(np.float64)
        pos_w = np.where(is_pos, w, 0.0)
        neg_w = w - pos_w
        p, n = pos_w.sum(axis=1), neg_w.sum(axis=1)
        above = np.cumsum(pos_w, axis=1)  # at a negative: the positive weight ranked before it
        area = (neg_w * above * layout["retrieved"]).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[block] = np.where((p > 0) & (n > 0), area / (np.maximum(p, SMALL) * np.maximum(n, SMALL)), np.nan)
    return out


def _precision(tp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    return np.maximum(tp, SMALL) / np.maximum(tp + fp, SMALL)


def pair_pr_ap(units: Units, weights: np.ndarray, *, positive: str | None = None, negative: str | None = None,
               fraction: int = 5) -> np.ndarray:
    """Imbalanced-protocol PR AP: all negatives and the first ``1/fraction`` of the expanded positives
    file (see the module docstring for what that means under resampling)."""
    layout = _pair_layout(units, positive, negative)
    w_all = np.asarray(weights)
    out = np.empty(w_all.shape[0])
    is_pos = layout["label"] == 1
    retrieved_pos = layout["retrieved"][layout["positive_slot"]]
    for block in _row_blocks(w_all.shape[0], layout["rank"].size):
        w = w_all[block][:, layout["rank"]].astype(np.float64)
        wp = w_all[block][:, layout["positive_file"]].astype(np.int64)  # positives in file order
        total_pos = wp.sum(axis=1)
        kept = total_pos // fraction  # n_imb of the expanded positives file
        before = np.cumsum(wp, axis=1) - wp
        v = np.clip(kept[:, None] - before, 0, wp)  # copies of each positive inside the first 20%
        kept_w = np.zeros_like(w)
        kept_w[:, layout["positive_slot"]] = v
        neg_w = np.where(is_pos, 0.0, w)
        tp0 = (np.cumsum(kept_w, axis=1) - kept_w)[:, layout["positive_slot"]]  # kept positives before it
        fp = np.cumsum(neg_w, axis=1)[:, layout["positive_slot"]]  # negatives before it (ties: first)
        v = np.where(retrieved_pos, v, 0)
        area = np.zeros(w.shape[0])
        for m in range(1, int(v.max(initial=0)) + 1):
            step = (_precision(tp0 + m - 1, fp) + _precision(tp0 + m, fp)) / 2.0
            area += np.where(v >= m, step, 0.0).sum(axis=1)
        has_neg = neg_w.sum(axis=1) > 0
        out[block] = np.where((total_pos > 0) & has_neg, area / np.maximum(kept, SMALL), np.nan)
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
