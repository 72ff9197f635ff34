"""VSD (visual similarity discovery) scorers, after vsd-benchmark/vsd ``evaluation/metrics.py``.

Human tags mark (seed image, candidate image) pairs as similar (1) or not (0). Rankings are by
cosine over the whole gallery, then reduced by the *unique-id filter*
(:func:`unique_product_topk`): keep the first image of each product id in rank order, drop the
seed's own product id, keep the top k. A positive pair counts only when its candidate *image* is
the one kept for its product. Over the seeds ``S`` with at least one positive tag and the positive
pairs ``P`` (rank = 1-based position in the filtered list):

* ``HR@k  = sum_P [rank <= k] / (k * |S|)``
* ``MRR@k = sum_P (1 / rank if rank <= k else 0) / (|S| * H_k)``, ``H_k = sum_{i=1..k} 1/i``
* ``roc_auc`` and ``pr_auc`` over all tagged pairs scored by cosine: sklearn's ``roc_auc_score``
  and ``average_precision_score`` (re-implemented in numpy here; the tests check the equality).
  Tied scores form one threshold, so the input order of tied pairs does not matter.

The same two ranking helpers, :func:`binary_roc_auc` and :func:`binary_average_precision`, serve
the product-search scorer.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from vsbench.benchmarks.ties import TieRange, tie_fields

DEFAULT_KS = (5, 9)


@dataclass(frozen=True)
class VsdMetrics:
    hr_at_k: Mapping[int, float]
    mrr_at_k: Mapping[int, float]
    roc_auc: float
    pr_auc: float
    num_seeds: int
    num_positive_pairs: int
    num_tagged_pairs: int
    ties: Mapping[str, TieRange] = field(default_factory=dict)  # "hr_at_5" -> range over tie orders

    def as_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {f"hr_at_{k}": v for k, v in self.hr_at_k.items()}
        out.update({f"mrr_at_{k}": v for k, v in self.mrr_at_k.items()})
        out.update(roc_auc=self.roc_auc, pr_auc=self.pr_auc, num_seeds=self.num_seeds,
                   num_positive_pairs=self.num_positive_pairs, num_tagged_pairs=self.num_tagged_pairs)
        out.update(tie_fields(self.ties))
        return out


# ------------------------------------------------------------------ threshold-based rankings


def _binary_inputs(labels: ArrayLike, scores: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels)
    s = np.asarray(scores, dtype=np.float64)
    if y.ndim != 1 or y.shape != s.shape or y.size == 0:
        raise ValueError(f"labels {y.shape} and scores {s.shape} must be 1-D, non-empty, of the same length")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0 or 1")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite")
    return y.astype(bool), s


def _counts_at_thresholds(labels: ArrayLike, scores: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative (tp, fp) at each distinct score, highest first: tied scores form one threshold."""
    y, s = _binary_inputs(labels, scores)
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last_of_group = np.concatenate([np.flatnonzero(np.diff(s)), [s.size - 1]])
    tp = np.cumsum(y)[last_of_group]
    return tp, last_of_group + 1 - tp


def binary_roc_auc(labels: ArrayLike, scores: ArrayLike) -> float:
    """ROC AUC as ``sklearn.metrics.roc_auc_score`` (trapezoid; a tie group is a diagonal step)."""
    tp, fp = _counts_at_thresholds(labels, scores)
    if tp[-1] == 0 or fp[-1] == 0:
        raise ValueError("ROC AUC needs both positive and negative labels")
    tpr = np.concatenate([[0.0], tp / tp[-1]])
    fpr = np.concatenate([[0.0], fp / fp[-1]])
    return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2.0))


def binary_average_precision(labels: ArrayLike, scores: ArrayLike) -> float:
    """AP as ``sklearn.metrics.average_precision_score``: ``sum_n (R_n - R_{n-1}) P_n`` per threshold."""
    tp, fp = _counts_at_thresholds(labels, scores)
    if tp[-1] == 0:
        raise ValueError("average precision needs at least one positive label")
    precision = tp / (tp + fp)
    recall = tp / tp[-1]
    return float(np.sum(np.diff(np.concatenate([[0.0], recall])) * precision))


# ------------------------------------------------------------------------------- retrieval


def unique_product_topk(ranked_gallery: ArrayLike, gallery_product_ids: ArrayLike, seed_product_id: Hashable,
                        k: int) -> np.ndarray:
    """Gallery indices after the unique-id filter: first image per product, seed's id dropped, top k.

    ``ranked_gallery`` holds gallery indices, best first; ``gallery_product_ids[i]`` is the product
    id of gallery image i.
    """
    ranked = np.asarray(ranked_gallery)
    ids = np.asarray(gallery_product_ids)[ranked]
    _, first = np.unique(ids, return_index=True)
    first.sort()
    first = first[ids[first] != seed_product_id]
    return ranked[first[:k]]


def candidate_rank(top_list: ArrayLike, candidate: int) -> int:
    """1-based position of ``candidate`` in a filtered top list, 0 when it is not there."""
    where = np.flatnonzero(np.asarray(top_list) == candidate)
    return int(where[0]) + 1 if where.size else 0


def _hit_rates(pos_ranks: np.ndarray, num_seeds: int, ks: Sequence[int]) -> tuple[dict[int, float], dict[int, float]]:
    hr: dict[int, float] = {}
    mrr: dict[int, float] = {}
    for k in ks:
        inside = (pos_ranks >= 1) & (pos_ranks <= k)
        harmonic = float(np.sum(1.0 / np.arange(1, k + 1)))
        hr[k] = float(np.count_nonzero(inside) / (k * num_seeds))
        mrr[k] = float(np.sum(1.0 / pos_ranks[inside]) / (num_seeds * harmonic))
    return hr, mrr


def _ranks(values: ArrayLike, name: str) -> np.ndarray:
    """1-based ranks as int64, 0 for 'not retrieved'. Checked before the cast: numpy turns a NaN or a
    fraction into some integer (which one depends on the CPU), so a bad rank is refused, not scored."""
    raw = np.asarray(values)
    if raw.dtype.kind == "f" and not (np.isfinite(raw).all() and (raw == np.floor(raw)).all()):
        raise ValueError(f"{name} are whole numbers (1-based, 0 for 'not retrieved'), not NaN, inf or fractions")
    if raw.dtype.kind not in "iuf" and raw.size:
        raise ValueError(f"{name} are whole numbers (1-based, 0 for 'not retrieved'), not {raw.dtype}")
    ranks = raw.astype(np.int64)
    if (ranks < 0).any():
        raise ValueError(f"{name} are 1-based, with 0 for 'not retrieved'")
    return ranks


def vsd_metrics(seeds: Sequence[Hashable], labels: ArrayLike, ranks: ArrayLike, scores: ArrayLike,
                ks: Sequence[int] = DEFAULT_KS, *, tie_ranks: tuple[ArrayLike, ArrayLike] | None = None) -> VsdMetrics:
    """HR@k, MRR@k, ROC-AUC and PR-AUC over the tagged pairs, one entry per pair.

    ``seeds[i]`` is pair i's seed image, ``labels[i]`` its tag, ``ranks[i]`` the 1-based rank of
    its candidate in the seed's filtered list (0 = not in it; read for positive pairs only),
    ``scores[i]`` the pair's cosine similarity. Each pair should appear once (upstream keeps tags
    in a set, so exact duplicates collapse there). ``tie_ranks`` = (ranks in the worst, ranks in the
    best order of tied scores) fills ``ties`` for HR and MRR (ROC and PR AUC do not depend on tie order).
    """
    y, s = _binary_inputs(labels, scores)
    r = _ranks(ranks, "ranks")
    if r.shape != y.shape or len(seeds) != y.size:
        raise ValueError("seeds, labels, ranks and scores must have one entry per tagged pair")
    positive_seeds = {seed for seed, label in zip(seeds, y.tolist()) if label}
    if not positive_seeds:
        raise ValueError("no positive tag: HR and MRR are undefined")
    hr, mrr = _hit_rates(r[y], len(positive_seeds), ks)
    ties: dict[str, TieRange] = {}
    if tie_ranks is not None:
        worst, best = (_ranks(t, "tie_ranks") for t in tie_ranks)
        if worst.shape != y.shape or best.shape != y.shape:
            raise ValueError("tie_ranks must have one entry per tagged pair in each order")
        (hr_w, mrr_w), (hr_b, mrr_b) = (_hit_rates(t[y], len(positive_seeds), ks) for t in (worst, best))
        for k in ks:
            ties[f"hr_at_{k}"] = TieRange(hr_w[k], hr_b[k])
            ties[f"mrr_at_{k}"] = TieRange(mrr_w[k], mrr_b[k])
    return VsdMetrics(
        hr_at_k=hr,
        mrr_at_k=mrr,
        roc_auc=binary_roc_auc(y, s),
        pr_auc=binary_average_precision(y, s),
        num_seeds=len(positive_seeds),
        num_positive_pairs=int(np.count_nonzero(y)),
        num_tagged_pairs=int(y.size),
        ties=ties,
    )
