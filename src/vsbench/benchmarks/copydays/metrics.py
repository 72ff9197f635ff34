"""Copydays (CD10K) scorers as SSCD's ``copydays_eval.py`` defines them.

Every Copydays image is a query against the 157 originals plus distractors; each query gets a
ranked result list (k = 100 in SSCD). Two numbers come out:

* ``strong_map``: the mean over the "strong" queries of a *trapezoidal* per-query AP: for the
  k-th positive (0-based) at 0-based rank r, add ``(1/n_pos) * (p_left + p_right) / 2`` with
  ``p_left = k / r`` (1 when r == 0) and ``p_right = (k + 1) / (r + 1)``. Ranks are positions in
  the result list as given: ties inside one query's list keep the search's order.
* ``overall_uap``: the same trapezoidal AP over all (query, result) pairs of all queries pooled and
  sorted by distance, ascending, with the number of *queries* as the number of positives (upstream's
  choice; a query with several positives can push the recall past 1 in principle).

Ties. SSCD sorts the pooled distances with ``np.argsort``'s default, *unstable* quicksort, so where
positives and negatives share a distance its ``overall_uAP`` depends on numpy's sort implementation
(its version and the CPU's SIMD sort: differences up to 0.065 have been seen). vsbench computes
exactly that sort, on the distances' own dtype, so it gives SSCD's number on the same machine and
numpy; and it reports the range over every order of tied distances (``ties``: worst = negatives
first, best = positives first), the same for ``strong_map`` over the ties inside each result list
(SSCD keeps FAISS's order there, and so does the reported value).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from vsbench.benchmarks.ties import TieRange, tie_fields


@dataclass(frozen=True)
class CopydaysMetrics:
    """SSCD's two Copydays numbers; ``ties`` maps each to its range over the orders of tied distances."""

    strong_map: float
    overall_uap: float
    num_queries: int
    num_strong_queries: int
    ties: Mapping[str, TieRange] = field(default_factory=dict)

    def as_dict(self) -> dict[str, float | int]:
        return {"strong_map": self.strong_map, "overall_uap": self.overall_uap, "num_queries": self.num_queries,
                "num_strong_queries": self.num_strong_queries, **tie_fields(self.ties)}


def trapezoid_ap_from_ranks(positive_ranks: ArrayLike, num_positives: int) -> float:
    """Trapezoidal AP of one ranked list from the 0-based ranks of its positives (ascending)."""
    if num_positives <= 0:
        raise ValueError("a query needs at least one positive for its AP to be defined")
    ranks = np.asarray(positive_ranks, dtype=np.float64)
    if ranks.size and np.any(np.diff(ranks) <= 0):
        raise ValueError("positive ranks must be strictly increasing")
    found = np.arange(ranks.size, dtype=np.float64)  # positives seen before this one
    left = np.where(ranks == 0, 1.0, found / np.maximum(ranks, 1.0))
    right = (found + 1.0) / (ranks + 1.0)
    return float(np.sum((left + right) / 2.0) / num_positives)


def copydays_hits(result_ids: ArrayLike, positives: Sequence[Collection[int]]) -> np.ndarray:
    """Boolean (queries x k) matrix: is the database id at each rank a positive of its query."""
    ids = np.asarray(result_ids)
    if ids.ndim != 2 or ids.shape[0] != len(positives):
        raise ValueError(f"result ids of shape {ids.shape} for {len(positives)} queries")
    return np.array([np.isin(row, list(pos)) for row, pos in zip(ids, positives)], dtype=bool).reshape(ids.shape)


def _row_aps(hits: np.ndarray, num_positives: np.ndarray) -> np.ndarray:
    """Per-query trapezoidal AP for every row at once (same formula as trapezoid_ap_from_ranks)."""
    found = np.cumsum(hits, axis=1) - 1.0  # 0-based index of the positive at each hit
    ranks = np.arange(hits.shape[1], dtype=np.float64)[None, :]
    left = np.where(ranks == 0, 1.0, found / np.maximum(ranks, 1.0))
    right = (found + 1.0) / (ranks + 1.0)
    return np.where(hits, (left + right) / 2.0, 0.0).sum(axis=1) / num_positives


def copydays_metrics(hits: ArrayLike, distances: ArrayLike, num_positives: ArrayLike,
                     strong: ArrayLike) -> CopydaysMetrics:
    """strong mAP and overall uAP from the search results of every Copydays query, as SSCD computes them.

    ``hits[i, j]``: result j of query i is a positive; ``distances`` the matching search distances
    (lower = closer), in the dtype the search returned them (FAISS: float32; SSCD sorts that array,
    and a float64 copy may sort ties differently); ``num_positives[i]`` the number of positives
    query i has in the database; ``strong[i]`` marks the strong-block queries. NaN distances are
    refused (no order is defined for them).
    """
    hit = np.asarray(hits, dtype=bool)
    dist = np.asarray(distances)
    if not np.issubdtype(dist.dtype, np.floating):
        dist = dist.astype(np.float64)
    n_pos = np.asarray(num_positives, dtype=np.float64)
    is_strong = np.asarray(strong, dtype=bool)
    rows = (hit.shape[0],) if hit.ndim == 2 else None
    if rows is None or dist.shape != hit.shape or n_pos.shape != rows or is_strong.shape != rows:
        raise ValueError(f"shapes differ: hits {hit.shape}, distances {dist.shape}, "
                         f"num_positives {n_pos.shape}, strong {is_strong.shape}")
    if np.isnan(dist).any():
        raise ValueError("distances contain NaN")
    if (n_pos <= 0).any():
        raise ValueError("every query needs at least one positive (SSCD divides by zero there)")
    if not is_strong.any():
        raise ValueError("no strong query: strong mAP is undefined")
    strong_map = float(_row_aps(hit, n_pos)[is_strong].mean())
    flat_hits, flat_dist = hit.ravel(), dist.ravel()
    overall = _pooled_ap(flat_hits[np.argsort(flat_dist)], hit.shape[0])  # SSCD: np.reshape(dis, (-1)).argsort()
    return CopydaysMetrics(
        strong_map=strong_map,
        overall_uap=overall,
        num_queries=int(hit.shape[0]),
        num_strong_queries=int(is_strong.sum()),
        ties={"strong_map": TieRange(*(float(_row_aps(_rows_tie_ordered(hit, dist, first), n_pos)[is_strong].mean())
                                       for first in (False, True))),
              "overall_uap": TieRange(*(_pooled_ap(flat_hits[np.lexsort((~flat_hits if first else flat_hits,
                                                                          flat_dist))], hit.shape[0])
                                        for first in (False, True)))},
    )


def _rows_tie_ordered(hits: np.ndarray, distances: np.ndarray, positives_first: bool) -> np.ndarray:
    """Each result list re-ordered inside its groups of equal distances, positives last (worst) or first."""
    row = np.repeat(np.arange(hits.shape[0]), hits.shape[1])
    flat = hits.ravel()
    order = np.lexsort((~flat if positives_first else flat, distances.ravel(), row))
    return flat[order].reshape(hits.shape)


def _pooled_ap(ranked_hits: np.ndarray, num_positives: int) -> float:
    """The trapezoid AP of the pooled, ranked results (SSCD ``score_macro_AP``)."""
    return trapezoid_ap_from_ranks(np.flatnonzero(ranked_hits), num_positives)
