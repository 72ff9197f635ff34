"""VSD: unique-id filter, HR@k / MRR@k by hand, ROC-AUC and PR-AUC equal to sklearn (ties included)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from vsbench.benchmarks.vsd.metrics import (
    binary_average_precision,
    binary_roc_auc,
    candidate_rank,
    unique_product_topk,
    vsd_metrics,
)

#                         0    1    2    3    4    5    6    7    8
GALLERY_PRODUCTS = np.array(["A", "B", "C", "A", "D", "S", "E", "F", "B"])


def test_unique_product_topk_keeps_first_image_per_product_and_drops_seed_product() -> None:
    ranked = [5, 3, 8, 1, 0, 2, 4]  # products S A B B A C D
    top = unique_product_topk(ranked, GALLERY_PRODUCTS, "S", k=3)
    assert top.tolist() == [3, 8, 2]  # S dropped, image 1 (second B) and 0 (second A) dropped
    assert candidate_rank(top, 8) == 2
    assert candidate_rank(top, 1) == 0  # B's other image is filtered out: not a hit


def test_hr_and_mrr_by_hand() -> None:
    # Seeds with a positive tag: s1, s2 (s3 only has a negative) -> |S| = 2. Positive ranks 1, 7, 3.
    # HR@5 = 2 / (5 * 2) = 0.2,  HR@9 = 3 / (9 * 2) = 1/6
    # MRR@5 = (1 + 1/3) / (2 * H5),  MRR@9 = (1 + 1/7 + 1/3) / (2 * H9)
    seeds = ["s1", "s1", "s1", "s2", "s3"]
    labels = [1, 1, 0, 1, 0]
    ranks = [1, 7, 0, 3, 0]
    scores = [0.9, 0.4, 0.5, 0.7, 0.1]
    m = vsd_metrics(seeds, labels, ranks, scores)
    h5 = 1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5
    h9 = h5 + 1 / 6 + 1 / 7 + 1 / 8 + 1 / 9
    assert m.hr_at_k == pytest.approx({5: 0.2, 9: 1 / 6})
    assert m.mrr_at_k[5] == pytest.approx((1 + 1 / 3) / (2 * h5))  # = 40/137
    assert m.mrr_at_k[9] == pytest.approx((1 + 1 / 7 + 1 / 3) / (2 * h9))
    assert m.roc_auc == pytest.approx(roc_auc_score(labels, scores))
    assert m.pr_auc == pytest.approx(average_precision_score(labels, scores))
    assert (m.num_seeds, m.num_positive_pairs, m.num_tagged_pairs) == (2, 3, 5)
    assert set(m.as_dict()) == {"hr_at_5", "hr_at_9", "mrr_at_5", "mrr_at_9", "roc_auc", "pr_auc", "num_seeds",
                                "num_positive_pairs", "num_tagged_pairs"}


@pytest.mark.parametrize("seed", range(8))
def test_auc_and_ap_equal_sklearn_with_many_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = (rng.random(200) < 0.3).astype(int)
    scores = np.round(rng.random(200) + 0.3 * labels, 1)  # few distinct values: ties everywhere
    assert binary_roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert binary_average_precision(labels, scores) == pytest.approx(average_precision_score(labels, scores),
                                                                     abs=1e-12)


def test_tie_order_does_not_matter() -> None:
    assert binary_average_precision([0, 1], [0.5, 0.5]) == binary_average_precision([1, 0], [0.5, 0.5]) == 0.5


def test_rejects_missing_classes() -> None:
    with pytest.raises(ValueError, match="both positive and negative"):
        binary_roc_auc([1, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match="at least one positive"):
        binary_average_precision([0, 0], [0.1, 0.2])
    with pytest.raises(ValueError, match="no positive tag"):
        vsd_metrics(["s"], [0], [0], [0.3])
