"""`vsbench.stats.curves` where the unit-file tests do not look (issue 56: `make mutate` left 101 of
its 698 mutants alive): one pooled unit file asked for each (positive, negative) combination, the
replicates cut in several blocks, replicates that draw only positives or only negatives, the
defaults of the tagged statistics, and each refusal's words. Each test was seen failing with its
mutant planted."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

import vsbench.stats.curves as curves
from tests.unit.test_units_patch_pairs import NEG, POS, _files
from vsbench.benchmarks.patch_pairs.units import patch_pair_units
from vsbench.stats.curves import pair_mean_pr_ap, pair_pr_ap, pair_roc_auc, tagged_average_precision, tagged_roc_auc
from vsbench.stats.units import ListColumn, Units


def _mean_and_variants(seed: int) -> tuple[dict[str, Units], np.ndarray]:
    files = _files(np.random.default_rng(seed))
    units = patch_pair_units({p: files[p] for p in POS}, {n: files[n] for n in NEG})
    weights = np.random.default_rng(100 + seed).integers(0, 3, (9, len(units["mean"])))
    weights[0] = 1
    return units, weights


def _variant_weights(units: dict[str, Units], variant: str, weights: np.ndarray) -> np.ndarray:
    where = {unit: k for k, unit in enumerate(units["mean"].ids.tolist())}
    return weights[:, [where[unit] for unit in units[variant].ids.tolist()]]


@pytest.mark.parametrize("seed", [3, 8])
def test_the_pooled_file_asked_for_one_combination_is_that_combinations_file(seed: int,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    units, weights = _mean_and_variants(seed)
    mean = units["mean"]
    for p in POS:
        for n in NEG:
            w = _variant_weights(units, f"{p}_{n}", weights)
            own = units[f"{p}_{n}"]
            np.testing.assert_array_equal(pair_roc_auc(mean, weights, positive=p, negative=n), pair_roc_auc(own, w))
            np.testing.assert_array_equal(pair_pr_ap(mean, weights, positive=p, negative=n, fraction=3),
                                          pair_pr_ap(own, w, fraction=3))
    every = [pair_pr_ap(mean, weights, positive=p, negative=n, fraction=3) for p in POS for n in NEG]
    np.testing.assert_array_equal(pair_mean_pr_ap(mean, weights, positives=POS, negatives=NEG, fraction=3),
                                  np.mean(every, axis=0))
    whole = pair_roc_auc(mean, weights, positive="easy", negative="hard")
    monkeypatch.setattr(curves, "BLOCK_CELLS", 2 * len(mean))  # a couple of replicates a block
    mean._cache.clear()
    np.testing.assert_array_equal(pair_roc_auc(mean, weights, positive="easy", negative="hard"), whole)
    assert list(curves._row_blocks(5, len(mean))) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert list(curves._row_blocks(3, 0)) == [slice(0, 3)]


def test_patch_pairs_refuse_bad_labels_and_distances() -> None:
    def pairs(labels: list[int], distances: list[float]) -> Units:
        n = len(labels)
        return Units("pair", "patch_pairs", np.array([f"p{i}" for i in range(n)]),
                     {"label": np.array(labels), "distance": np.array(distances), "line": np.arange(n),
                      "set": np.array(["easy"] * n)}, {})

    with pytest.raises(ValueError, match=r"^patch pair labels must be 0 or 1$"):
        pair_roc_auc(pairs([1, 2], [0.1, 0.2]), np.ones((1, 2)))
    for distances in ([0.1, np.nan], [-np.inf, 0.2]):
        with pytest.raises(ValueError, match=r"^patch pair distances must be numbers above -inf \(\+inf: never "
                                             r"retrieved\)$"):
            pair_roc_auc(pairs([1, 0], distances), np.ones((1, 2)))


def _tagged(seed: int, score: str = "score", label: str = "label") -> tuple[Units, list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    scores, labels = [], []
    for _ in range(7):
        k = int(rng.integers(1, 5))
        scores.append(rng.integers(0, 4, k) / 4)  # ties within and across units
        labels.append((rng.random(k) < 0.4).astype(np.int64))
    labels[0][:] = 1  # a unit holding positives only, another negatives only
    labels[1][:] = 0
    columns = {score: ListColumn.from_lists(scores), label: ListColumn.from_lists(labels, dtype=np.int64)}
    return Units("seed", "vsd", np.array([f"s{i}" for i in range(7)]), columns, {}), scores, labels


@pytest.mark.parametrize("seed", [0, 4])
def test_tagged_statistics_are_sklearns_on_the_pairs_weighted_by_draws(seed: int,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    units, scores, labels = _tagged(seed)
    weights = np.random.default_rng(seed).integers(0, 3, (8, 7))
    weights[1] = [2, 0, 0, 0, 0, 0, 0]  # positives only: undefined
    weights[2] = [0, 1, 0, 0, 0, 0, 0]  # negatives only: undefined
    weights[3] = 0
    monkeypatch.setattr(curves, "BLOCK_CELLS", 2 * sum(s.size for s in scores))  # two replicates a block
    auc, ap = tagged_roc_auc(units, weights), tagged_average_precision(units, weights)  # default column names
    for row, w in enumerate(weights):
        y = np.concatenate([np.repeat(lab[None], c, axis=0).ravel() for lab, c in zip(labels, w)])
        s = np.concatenate([np.repeat(sc[None], c, axis=0).ravel() for sc, c in zip(scores, w)])
        if y.size and 0 < y.sum() < y.size:
            assert auc[row] == pytest.approx(roc_auc_score(y, s), abs=1e-12), row
        else:
            assert np.isnan(auc[row]), row
        if y.size and y.sum() > 0:
            assert ap[row] == pytest.approx(average_precision_score(y, s), abs=1e-12), row
        else:
            assert np.isnan(ap[row]), row


def test_tagged_pairs_refuse_lists_that_do_not_pair_or_hold_bad_values() -> None:
    units, _, _ = _tagged(1, "s", "y")
    short = Units("seed", "vsd", units.ids, {"s": units.columns["s"],
                                             "y": ListColumn.from_lists([[1]] * 7, dtype=np.int64)}, {})
    with pytest.raises(ValueError, match=r"^list columns 's' and 'y' do not pair up$"):
        tagged_roc_auc(short, np.ones((1, 7)), score="s", label="y")
    for scores, labels in (([[np.inf]], [[1]]), ([[0.5]], [[2]])):
        bad = Units("seed", "vsd", np.array(["a"]), {"score": ListColumn.from_lists(scores),
                                                     "label": ListColumn.from_lists(labels, dtype=np.int64)}, {})
        with pytest.raises(ValueError, match=r"^tagged pair scores must be finite and labels 0 or 1$"):
            tagged_average_precision(bad, np.ones((1, 1)))


def test_one_side_named_keeps_every_pair_of_the_other() -> None:
    files = _files(np.random.default_rng(5))
    every = patch_pair_units({p: files[p] for p in POS}, {n: files[n] for n in NEG})["mean"]
    weights = np.random.default_rng(6).integers(0, 3, (6, len(every)))
    where = {unit: k for k, unit in enumerate(every.ids.tolist())}
    for positives, negatives, asked in ((["easy"], list(NEG), {"positive": "easy"}),
                                        (list(POS), [NEG[1]], {"negative": NEG[1]})):
        subset = patch_pair_units({p: files[p] for p in positives}, {n: files[n] for n in negatives})["mean"]
        w = weights[:, [where[unit] for unit in subset.ids.tolist()]]
        np.testing.assert_array_equal(pair_roc_auc(every, weights, **asked), pair_roc_auc(subset, w))


def test_tagged_pairs_all_tied_are_one_threshold() -> None:
    scores = [np.full(3, 0.5), np.full(2, 0.5)]
    labels = [np.array([1, 0, 1]), np.array([0, 0])]
    units = Units("seed", "vsd", np.array(["a", "b"]), {"score": ListColumn.from_lists(scores),
                                                         "label": ListColumn.from_lists(labels, dtype=np.int64)}, {})
    y, s = np.concatenate(labels), np.concatenate(scores)
    assert tagged_roc_auc(units, np.ones((1, 2)))[0] == pytest.approx(roc_auc_score(y, s)) == pytest.approx(0.5)
    assert tagged_average_precision(units, np.ones((1, 2)))[0] == pytest.approx(average_precision_score(y, s))
