"""VSD: unique-id filter, HR@k / MRR@k by hand, ROC-AUC and PR-AUC equal to sklearn (ties included)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from vsbench.benchmarks.ties import TieRange
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


# ------------------------------------------------- edges found by mutation testing (issue 49)


def exactly(message: str) -> str:
    """A ``match`` pattern for this message and nothing around it."""
    return "^" + re.escape(message) + "$"


@pytest.mark.parametrize(("labels", "scores", "message"), [
    ([1, 0], [0.1, 0.2, 0.3], "labels (2,) and scores (3,) must be 1-D, non-empty, of the same length"),
    ([[1, 0], [0, 1]], [[0.1, 0.2], [0.3, 0.4]],
     "labels (2, 2) and scores (2, 2) must be 1-D, non-empty, of the same length"),
    ([], [], "labels (0,) and scores (0,) must be 1-D, non-empty, of the same length"),
    ([1, 2], [0.1, 0.2], "labels must be 0 or 1"),
    ([1, 0], [0.1, np.nan], "scores must be finite"),
    ([1, 0], [np.inf, 0.2], "scores must be finite"),
])
def test_ranking_helpers_refuse_malformed_input_with_their_message(labels: list, scores: list, message: str) -> None:
    for helper in (binary_roc_auc, binary_average_precision):
        with pytest.raises(ValueError, match=exactly(message)):
            helper(labels, scores)


def test_missing_class_messages_exactly() -> None:
    with pytest.raises(ValueError, match=exactly("ROC AUC needs both positive and negative labels")):
        binary_roc_auc([0, 0], [0.1, 0.2])
    with pytest.raises(ValueError, match=exactly("average precision needs at least one positive label")):
        binary_average_precision([0, 0], [0.1, 0.2])


@pytest.mark.parametrize(("labels", "scores"), [
    ([1, 0], [0.9, 0.1]),  # one positive, ranked first: AUC 1
    ([0, 1], [0.9, 0.1]),  # one positive, ranked last: AUC 0
    ([0, 0, 1], [0.9, 0.8, 0.1]),  # two negative thresholds before the only positive
    ([1, 0, 1, 0], [0.9, 0.9, 0.2, 0.1]),  # a mixed tie at the top
])
def test_small_cases_equal_sklearn(labels: list[int], scores: list[float]) -> None:
    assert binary_roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert binary_average_precision(labels, scores) == pytest.approx(average_precision_score(labels, scores),
                                                                     abs=1e-12)


def test_unsigned_integer_scores_rank_by_value() -> None:
    # Negating a uint8 array wraps (-0 = 0, -2 = 254): scores must be floats before they are negated.
    labels, scores = [1, 0, 1, 0], np.array([0, 1, 2, 3], dtype=np.uint8)
    assert binary_roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores.astype(float)))
    assert binary_average_precision(labels, scores) == pytest.approx(
        average_precision_score(labels, scores.astype(float)))


def test_a_positive_at_rank_k_is_a_hit_at_k() -> None:
    m = vsd_metrics(["s", "s"], [1, 0], [5, 0], [0.5, 0.4], ks=(4, 5))
    h5 = 1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5
    assert m.hr_at_k == {4: 0.0, 5: pytest.approx(1 / 5)}
    assert m.mrr_at_k == {4: 0.0, 5: pytest.approx((1 / 5) / h5)}


@pytest.mark.parametrize(("seeds", "ranks", "message"), [
    (["s", "s"], [1, 0, 0], "seeds, labels, ranks and scores must have one entry per tagged pair"),
    (["s", "s", "t"], [1, 0], "seeds, labels, ranks and scores must have one entry per tagged pair"),
    (["s", "s"], [1, -1], "ranks are 1-based, with 0 for 'not retrieved'"),
])
def test_vsd_metrics_refuses_misaligned_or_negative_ranks(seeds: list[str], ranks: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        vsd_metrics(seeds, [1, 0], ranks, [0.5, 0.4])


def test_no_positive_tag_message_exactly() -> None:
    with pytest.raises(ValueError, match=exactly("no positive tag: HR and MRR are undefined")):
        vsd_metrics(["s", "s"], [0, 0], [0, 0], [0.3, 0.2])


@pytest.mark.parametrize("ranks", [[1.0, np.nan, 0.0], np.array([1.0, np.nan, 0.0]), np.array([1.0, np.inf, 0.0]),
                                   np.array([1.0, 2.5, 0.0]), np.array([1.0, 2.0, 0.0], dtype=np.float32)[::-1] * 0.5])
def test_a_nan_or_fractional_rank_is_refused_not_read_as_a_miss(ranks) -> None:
    """Checked before the cast: numpy turns a float array's NaN into INT_MIN on x86 but may give 0 (a
    silent 'not retrieved') elsewhere, and 2.5 into 2."""
    message = "ranks are whole numbers (1-based, 0 for 'not retrieved'), not NaN, inf or fractions"
    with pytest.raises(ValueError, match=exactly(message)):
        vsd_metrics(["s", "s", "s"], [1, 1, 0], ranks, [0.5, 0.4, 0.3], ks=(5,))


def test_whole_float_ranks_score_as_the_integers() -> None:
    as_floats = vsd_metrics(["s", "s", "t"], [1, 0, 1], np.array([1.0, 0.0, 3.0]), [0.5, 0.4, 0.3], ks=(5,))
    assert as_floats == vsd_metrics(["s", "s", "t"], [1, 0, 1], [1, 0, 3], [0.5, 0.4, 0.3], ks=(5,))


@pytest.mark.parametrize(("tie_ranks", "message"), [
    (([1, -1], [1, 0]), "tie_ranks are 1-based, with 0 for 'not retrieved'"),
    (([1, 0], [np.nan, 0]), "tie_ranks are whole numbers (1-based, 0 for 'not retrieved'), not NaN, inf or fractions"),
    (([1, 0, 0], [1, 0]), "tie_ranks must have one entry per tagged pair in each order"),
    (([1, 0], ["a", 0]), "tie_ranks are whole numbers (1-based, 0 for 'not retrieved'), not <U21"),
])
def test_bad_tie_ranks_are_refused_like_ranks(tie_ranks, message: str) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        vsd_metrics(["s", "s"], [1, 0], [1, 0], [0.5, 0.4], tie_ranks=tie_ranks)


def test_tie_ranks_give_the_worst_and_best_hr_and_mrr() -> None:
    # Positive ranks: as scored 2 and 5, worst tie order 3 and 6, best 1 and 5; |S| = 2, k = 5.
    seeds, labels, scores = ["s1", "s1", "s2", "s2"], [1, 0, 1, 0], [0.9, 0.1, 0.8, 0.2]
    h5 = 1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5
    m = vsd_metrics(seeds, labels, [2, 0, 5, 0], scores, ks=(5,), tie_ranks=([3, 0, 6, 0], [1, 0, 5, 0]))
    assert m.hr_at_k == {5: pytest.approx(2 / 10)}
    assert m.ties == {"hr_at_5": TieRange(pytest.approx(1 / 10), pytest.approx(2 / 10)),
                      "mrr_at_5": TieRange(pytest.approx((1 / 3) / (2 * h5)), pytest.approx((1 + 1 / 5) / (2 * h5)))}
    record = m.as_dict()
    assert (record["hr_at_5_worst"], record["hr_at_5_best"]) == (pytest.approx(0.1), pytest.approx(0.2))
    assert record["mrr_at_5_best"] == pytest.approx((1 + 1 / 5) / (2 * h5))
    assert vsd_metrics(seeds, labels, [2, 0, 5, 0], scores, ks=(5,)).ties == {}


def test_as_dict_carries_every_value() -> None:
    m = vsd_metrics(["s1", "s1", "s2"], [1, 0, 0], [1, 0, 0], [0.9, 0.5, 0.7], ks=(5,))
    h5 = 1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5
    assert m.as_dict() == {"hr_at_5": pytest.approx(1 / 5), "mrr_at_5": pytest.approx(1 / h5), "roc_auc": 1.0,
                           "pr_auc": 1.0, "num_seeds": 1, "num_positive_pairs": 1, "num_tagged_pairs": 3}
