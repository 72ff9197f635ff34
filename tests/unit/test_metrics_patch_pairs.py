"""HPatches-style ROC / PR on hand-worked cases, ties negatives-first, and sklearn where it agrees."""

from __future__ import annotations

import re

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from tests.originals import hpatches_metrics
from vsbench.benchmarks.patch_pairs.metrics import mean_pr_ap, patch_pair_grid, patch_pair_metrics, pr_curve, roc_curve


def test_balanced_roc_by_hand_with_a_tie() -> None:
    # pos [0.1, 0.5], neg [0.3, 0.5, 0.9]; distance ascending, the 0.5 tie puts the negative first:
    #   0.1 P | 0.3 N | 0.5 N | 0.5 P | 0.9 N
    # tpr 0 .5 .5 .5 1 1, fpr 0 0 1/3 2/3 2/3 1 -> area 1/6 + 1/6 + 0 + 1/3 = 2/3.
    m = patch_pair_metrics([0.1, 0.5], [0.3, 0.5, 0.9])
    np.testing.assert_allclose(m.roc.tpr, [0, 0.5, 0.5, 0.5, 1, 1])
    np.testing.assert_allclose(m.roc.fpr, [0, 0, 1 / 3, 2 / 3, 2 / 3, 1])
    assert m.roc.auc == pytest.approx(2 / 3)
    # sklearn merges the tie into one diagonal step (counts it half): 4.5 / 6 = 0.75. They differ on ties.
    labels, scores = [0, 0, 0, 1, 1], [-0.3, -0.5, -0.9, -0.1, -0.5]
    assert roc_auc_score(labels, scores) == pytest.approx(0.75)


def test_imbalanced_pr_by_hand() -> None:
    # 10 positives -> the first 10 // 5 = 2 (0.2, 0.6) join all negatives [0.4, 0.6, 0.8]:
    #   0.2 P | 0.4 N | 0.6 N | 0.6 P | 0.8 N      (tie: negative first)
    # recall    0  .5  .5  .5   1   1
    # precision 1   1  1/2 1/3 1/2 2/5  (first point: max(0, 1e-10) / max(0, 1e-10) = 1)
    # area = (1 + 1)/2 * .5 + (1/3 + 1/2)/2 * .5 = 1/2 + 5/24 = 17/24
    pos = [0.2, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    m = patch_pair_metrics(pos, [0.4, 0.6, 0.8])
    assert m.num_imbalanced_positives == 2
    np.testing.assert_allclose(m.pr.recall, [0, 0.5, 0.5, 0.5, 1, 1])
    np.testing.assert_allclose(m.pr.precision, [1, 1, 1 / 2, 1 / 3, 1 / 2, 2 / 5])
    assert m.pr.ap == pytest.approx(17 / 24)


def test_pr_curve_starts_at_recall_zero_precision_one() -> None:
    curve = pr_curve([0.3, 0.9, 0.1], [1, 0, 1])  # ranked: N, P, P
    assert (curve.recall[0], curve.precision[0]) == (0.0, 1.0)
    assert curve.precision[1] == pytest.approx(1e-10)  # max(0, 1e-10) / 1 after a negative
    np.testing.assert_allclose(curve.precision[2:], [1 / 2, 2 / 3])


def test_ties_keep_input_order() -> None:
    assert roc_curve([0.5, 0.5], [0, 1]).auc == 0.0  # negative listed first: accepted first
    assert roc_curve([0.5, 0.5], [1, 0]).auc == 1.0


@pytest.mark.parametrize("seed", range(3))
def test_roc_auc_equals_sklearn_without_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pos, neg = rng.normal(1.0, 1.0, 300), rng.normal(2.0, 1.0, 500)
    m = patch_pair_metrics(pos, neg)
    labels = np.r_[np.zeros(neg.size), np.ones(pos.size)]
    assert m.roc.auc == pytest.approx(roc_auc_score(labels, -np.r_[neg, pos]), abs=1e-12)


def test_grid_keys_and_mean() -> None:
    rng = np.random.default_rng(0)
    grid = patch_pair_grid({"easy": rng.random(50), "hard": rng.random(50) + 0.3},
                           {"diffseq": rng.random(60) + 0.5, "sameseq": rng.random(60) + 0.2})
    assert list(grid) == ["easy_diffseq", "easy_sameseq", "hard_diffseq", "hard_sameseq"]
    assert mean_pr_ap(grid) == pytest.approx(np.mean([m.pr.ap for m in grid.values()]))
    assert set(grid["easy_diffseq"].as_dict()) >= {"roc_auc", "pr_ap"}


def test_rejects_empty_and_non_finite() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        patch_pair_metrics([], [1.0])
    with pytest.raises(ValueError, match="below \\+inf"):
        patch_pair_metrics([np.nan], [1.0])
    with pytest.raises(ValueError, match="below \\+inf"):
        patch_pair_metrics([-np.inf], [1.0])
    # An infinite distance is never retrieved (upstream tpfp): the curve stops short of tpr 1.
    m = patch_pair_metrics([np.inf, 1.0], [2.0, 3.0])
    assert m.roc.tpr[-1] == 0.5 and m.roc.auc == pytest.approx(0.5)


# ------------------------------------------------- edges found by mutation testing (issue 49)


def exactly(message: str) -> str:
    """A ``match`` pattern for this message and nothing around it."""
    return "^" + re.escape(message) + "$"


@pytest.mark.parametrize(("scores", "labels", "message"), [
    ([0.1, 0.2], [1], "scores (2,) and labels (1,) must be 1-D of the same length"),
    ([[0.1, 0.2]], [[1, 0]], "scores (1, 2) and labels (1, 2) must be 1-D of the same length"),
    ([0.1, np.inf], [1, 0], "scores must be numbers below +inf (-inf means never retrieved)"),
    ([0.1, 0.2], [1, 2], "labels must be 0 or 1"),
])
def test_curves_refuse_malformed_input_with_their_message(scores: list, labels: list, message: str) -> None:
    for curve in (roc_curve, pr_curve):
        with pytest.raises(ValueError, match=exactly(message)):
            curve(scores, labels)


@pytest.mark.parametrize(("pos", "neg"), [([[0.1, 0.2]], [0.3]), ([0.1], [[0.3]]), ([0.1], [])])
def test_patch_pair_metrics_refuses_other_shapes_with_its_message(pos: list, neg: list) -> None:
    with pytest.raises(ValueError, match=exactly("need a non-empty 1-D array of positive and of negative distances")):
        patch_pair_metrics(pos, neg)


def test_mean_of_nothing_message_exactly() -> None:
    with pytest.raises(ValueError, match=exactly("no results to average")):
        mean_pr_ap({})


def test_unsigned_integer_scores_rank_by_value() -> None:
    # Negating a uint8 array wraps (-0 = 0 ranks first): scores must be floats before they are negated.
    scores, labels = np.array([0, 1, 2], dtype=np.uint8), [1, 0, 0]
    assert roc_curve(scores, labels).auc == 0.0
    np.testing.assert_array_equal(pr_curve(scores, labels).recall, [0, 0, 0, 1])


def test_tied_curves_equal_hpatches_point_by_point(monkeypatch: pytest.MonkeyPatch) -> None:
    # 300 scores on 3 values: an unstable sort (numpy's default) reorders the ties and moves the curve.
    monkeypatch.setattr(np, "trapz", np.trapezoid, raising=False)  # upstream's np.trapz left numpy 2.4
    rng = np.random.default_rng(0)
    scores, labels = rng.integers(0, 3, 300).astype(float), rng.integers(0, 2, 300)
    fpr, tpr, _ = hpatches_metrics.roc(scores, labels)
    precision, recall, _ = hpatches_metrics.pr(scores, labels)
    roc, pr = roc_curve(scores, labels), pr_curve(scores, labels)
    np.testing.assert_array_equal(roc.fpr, fpr)
    np.testing.assert_array_equal(roc.tpr, tpr)
    np.testing.assert_array_equal(pr.precision, precision)
    np.testing.assert_array_equal(pr.recall, recall)


def test_as_dict_carries_every_value() -> None:
    m = patch_pair_metrics([0.1, 0.2, 0.3, 0.4, 0.5], [0.6, 0.7])
    assert m.as_dict() == {"roc_auc": 1.0, "pr_ap": 1.0, "num_positives": 5, "num_negatives": 2,
                           "num_imbalanced_positives": 1}
