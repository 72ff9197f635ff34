"""The hash-free paths of a big copy-detection scoring (issue 54, scoring memory) against the plain ones.

Why: ``vsbench score copy-detection`` on 3M predictions held ~200 MB of Arrow hash tables to merge
and look up a million query ids, an argsort of the predictions to match them, and a COO copy of the
intervals' count matrix. Each was replaced by something leaner (binary searches over sorted
fixed-width bytes, a search of the predictions in the ground truth, a CSC matrix built directly);
these tests hold each to the result of the plain way, on inputs chosen to reach its edges (NUL
bytes and uneven lengths that must fall back, non-ASCII text, ids on one side only, unsorted
owners). The figure itself is in bench/README.md (``bench/big_tables.py --score``), not asserted.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from vsbench.benchmarks.disc.metrics import match_predictions
from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.io.ids import Ids, fixed_bytes, merged_fixed, merged_values, shared_codes
from vsbench.stats.ranking import _micro_ap_ranking, rank_groups
from vsbench.stats.units import ListColumn, Units

LETTERS = ["a", "b", "", "é", "Z", "ab", "中", "1", "10", "2"]


def _hashed(first: Ids, second: Ids) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The codes and merged values as Arrow's hash tables give them (the way before issue 54)."""
    merged = pc.unique(pa.chunked_array([ids.values.cast(pa.large_string()) for ids in (first, second)]))
    merged = merged.take(pc.array_sort_indices(merged))
    codes = [pc.index_in(ids.values.cast(pa.large_string()), value_set=merged).to_numpy(zero_copy_only=False)
             .astype(np.int64)[ids.codes] for ids in (first, second)]
    return codes[0], codes[1], merged.to_pylist()


def _words(rng: random.Random, letters: list[str], most: int) -> list[str]:
    return ["".join(rng.choice(letters) for _ in range(rng.randint(0, 3))) for _ in range(rng.randint(0, most))]


def test_shared_codes_and_merged_values_by_sorted_bytes_equal_the_hashed_ones() -> None:
    rng = random.Random(54)
    by_bytes = 0
    for trial in range(1500):
        letters = LETTERS + (["a\x00"] if trial % 5 == 0 else [])  # a NUL byte: numpy would drop it, so hashed
        first, second = Ids.from_strings(_words(rng, letters, 12)), Ids.from_strings(_words(rng, letters, 12))
        if trial % 7 == 0 and len(second):
            second = second[np.arange(len(second) - 1)]  # a value no row uses any more
        want_first, want_second, want_values = _hashed(first, second)
        got_first, got_second, size = shared_codes(first, second)
        assert size == len(want_values)
        np.testing.assert_array_equal(got_first, want_first)
        np.testing.assert_array_equal(got_second, want_second)
        assert merged_values(first, second).to_pylist() == want_values
        by_bytes += merged_fixed(first, second) is not None
    assert by_bytes > 1000  # the sorted path is the one mostly taken, not the fallback


def test_fixed_bytes_views_ids_of_one_length_and_refuses_what_it_cannot_stand_for() -> None:
    values = pa.array(["Q01", "Q02", "Q10"])
    fixed = fixed_bytes(values)
    assert fixed is not None and fixed.tolist() == [b"Q01", b"Q02", b"Q10"]
    assert fixed_bytes(pa.array(["é", "", "ab"], type=pa.large_string())).tolist() == ["é".encode(), b"", b"ab"]
    assert fixed_bytes(pa.array(["a", "a\x00"])) is None  # equal to numpy
    assert fixed_bytes(pa.array(["a", None])) is None
    assert fixed_bytes(pa.array(["x" * 300_000] + ["y"] * 10)) is None  # a width far over the text


def test_units_of_id_columns_equal_those_of_numpy_text() -> None:
    """The Arrow unit ids (sorted-bytes keys, named queries first in first-seen order, queries named
    by nobody else, then the others by code) write the same unit file as the plain Python ones."""
    rng = random.Random(7)
    for trial in range(300):
        queries_pool = ["q1", "q2", "q10", "é", "q中", "x", "q3"] + (["a\x00"] if trial % 4 == 0 else [])
        references = ["r1", "r2", "r3", "r10", "rr"]
        pairs = list(dict.fromkeys((rng.choice(queries_pool), rng.choice(references))
                                   for _ in range(rng.randint(1, 15))))
        pred_query, pred_reference = [p[0] for p in pairs], [p[1] for p in pairs]
        scores = np.array([rng.choice([0.1, 0.5, 0.9, 1.0]) for _ in pairs])
        gt_query = list(dict.fromkeys(rng.choice(queries_pool) for _ in range(rng.randint(1, 8))))
        gt_reference = [rng.choice([*references, ""]) for _ in gt_query]
        gt_reference[0] = gt_reference[0] or "r1"
        named = list(dict.fromkeys(gt_query + [rng.choice(queries_pool + ["only-named"]) for _ in range(3)]))
        rng.shuffle(named)
        plain = copy_detection_units(np.array(pred_query), np.array(pred_reference), scores, np.array(gt_query),
                                     np.array(gt_reference), queries=np.array(named))
        coded = copy_detection_units(Ids.from_strings(pred_query), Ids.from_strings(pred_reference), scores,
                                     Ids.from_strings(gt_query), Ids.from_strings(gt_reference),
                                     queries=Ids.from_strings(named))
        assert coded.ids.tolist() == plain.ids.tolist()
        assert coded.to_parquet_bytes() == plain.to_parquet_bytes()


def test_predictions_matched_by_searching_the_ground_truth_find_each_pair_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice of the predictions at a time (``_SLICE`` smaller than them here): each ground-truth pair
    predicted is found with its own prediction's score."""
    import vsbench.benchmarks.disc.metrics as metrics

    monkeypatch.setattr(metrics, "_SLICE", 16)
    rng = np.random.default_rng(3)
    queries, references = rng.integers(0, 40, 300), rng.integers(0, 30, 300)
    keep = np.unique(queries * 30 + references, return_index=True)[1]  # no duplicate prediction
    queries, references = queries[keep], references[keep]
    scores = rng.random(queries.size)
    gt_query, gt_reference = np.arange(40), rng.integers(0, 30, 40)
    matched = match_predictions(queries, references, scores, gt_query, gt_reference)
    pairs = set(zip(gt_query.tolist(), gt_reference.tolist()))
    want = np.array([(q, r) in pairs for q, r in zip(queries.tolist(), references.tolist())])
    np.testing.assert_array_equal(matched.is_tp, want)
    predicted_pairs = {(q, r) for q, r, tp in zip(queries.tolist(), references.tolist(), want.tolist()) if tp}
    assert int(matched.predicted.sum()) == len(predicted_pairs)
    score_of = {(q, r): s for q, r, s in zip(queries.tolist(), references.tolist(), scores.tolist())}
    distinct_pairs = sorted(pairs)  # the matching's order of distinct pairs: by (query code, reference code)
    want_scores = [score_of.get(p, 0.0) for p in distinct_pairs]
    np.testing.assert_array_equal(matched.gt_scores, want_scores)


def _dense(owner: np.ndarray, first: np.ndarray, groups: int, units: int) -> np.ndarray:
    counts = np.zeros((groups, units))
    for q, g in zip(owner.tolist(), first.tolist()):
        if g < groups:
            counts[g, q] += 1
    return counts


@pytest.mark.parametrize("sorted_owners", [True, False])
def test_rank_groups_built_as_csc_hold_the_counts(sorted_owners: bool) -> None:
    rng = np.random.default_rng(11)
    owner = rng.integers(0, 9, 200)
    if sorted_owners:
        owner = np.sort(owner)
    first = rng.integers(0, 8, 200)  # 7 groups: those at 7 come after every positive
    matrix = rank_groups(owner, first, 7, 10)
    np.testing.assert_array_equal(matrix.toarray(), _dense(owner, first, 7, 10))
    weights = rng.integers(0, 4, (10, 3)).astype(np.float64)
    np.testing.assert_array_equal(matrix @ weights, _dense(owner, first, 7, 10) @ weights)


def test_micro_ap_ranking_counts_each_negative_before_the_first_group_it_precedes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice at a time (``_SLICE`` smaller than the predictions here) gives the counts a loop over
    the negatives gives: a negative scoring ``>=`` a group's score is before it (isc2021's ties)."""
    import vsbench.stats.ranking as ranking

    rng = np.random.default_rng(5)
    lists = [rng.choice([0.1, 0.3, 0.5, 0.7, 0.9], rng.integers(0, 6)) for _ in range(40)]
    labels = [rng.random(len(s)) < 0.4 for s in lists]
    units = Units("query", "copy_detection", np.array([f"q{i}" for i in range(40)]),
                  {"scores": ListColumn.from_lists(lists), "positive": ListColumn.from_lists(labels, bool),
                   "n_positives": np.ones(40, dtype=np.int64)}, {})
    monkeypatch.setattr(ranking, "_SLICE", 16)
    ranked = _micro_ap_ranking(units)
    scores, owner = np.concatenate(lists), np.repeat(np.arange(40), [len(s) for s in lists])
    positive = np.concatenate(labels)
    distinct = np.unique(scores[positive])[::-1]  # group g: the g-th highest positive score
    first = np.array([int(np.count_nonzero(distinct > s)) for s in scores[~positive]], dtype=np.int64)
    np.testing.assert_array_equal(ranked.before.toarray(), _dense(owner[~positive], first, distinct.size, 40))
