"""The parts of `vsbench.stats.ranking` the scorer-equality tests do not reach (issue 56: `make mutate`
left 152 of its 694 mutants alive against test_units_copy_detection.py and test_units_copydays.py).

Those tests compare every statistic with the scorer on the data written out one copy per draw, on
small cases: one slice of predictions, one block of replicates, no exact-0.9 precision, every unit
file with its recorded tie order. Here: the predictions cut in slices and the replicates in blocks
(the paths of 1M predictions, forced on small data), the one-replicate-at-a-time path, precision
exactly at the target, ties without a recorded order, the cache of a block's parts, the refusals,
the sizes that decide the sparse index type. Each test was seen failing with its mutant planted."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import vsbench.stats.ranking as ranking
from tests.unit.test_units_copy_detection import _case, _scored
from vsbench.benchmarks.copydays.metrics import _pooled_ap
from vsbench.benchmarks.disc.metrics import copy_detection_metrics
from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.stats.ranking import RankedPositives, copydays_uap, index_type, micro_ap, rank_groups
from vsbench.stats.statistics import per_count
from vsbench.stats.units import ListColumn, Units, UnitsError

TOLERANCE = 1e-9


def _weights(units: Units, rows: int, seed: int) -> np.ndarray:
    weights = np.random.default_rng(seed).integers(0, 4, (rows, len(units)))
    weights[0] = 1
    return weights


@pytest.mark.parametrize("seed", [1, 7, 12])
def test_slices_blocks_and_one_replicate_at_a_time_give_the_scorers_values(seed: int,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Predictions looked at 3 at a time, blocks of 3 replicates (more replicates than queries),
    each taken one at a time: every replicate is the scorer's value on its expanded data."""
    case = _case(seed, every_query_has_a_copy=True)
    weights = _weights(copy_detection_units(*case), 3 * len(copy_detection_units(*case)) + 2, seed)
    monkeypatch.setattr(ranking, "_SLICE", 3)
    for few_rows in (1, 1 << 40):  # the whole block at once, then one replicate at a time
        monkeypatch.setattr(ranking, "FEW_ROWS", few_rows)
        units = copy_detection_units(*case)
        cells = 3 * max(len(units), ranking._micro_ap_ranking(units).size, ranking._micro_ap_ranking(units).before.shape[0])
        monkeypatch.setattr(ranking, "BLOCK_CELLS", cells)
        assert ranking._micro_ap_ranking(units).rows_per_block() == 3
        uap = micro_ap(units, weights)
        recall = micro_ap(units, weights, part="recall_at_p90")
        for row, counts in enumerate(weights):
            expected = _scored(case, units.ids, counts)
            assert uap[row] == pytest.approx(expected["uap"], abs=TOLERANCE, nan_ok=True), (few_rows, row)
            assert recall[row] == pytest.approx(expected["recall_at_p90"], abs=TOLERANCE, nan_ok=True), (few_rows, row)


def test_precision_exactly_at_the_target_counts_as_reached() -> None:
    """A miss on top, then nine copies: the ninth copy's precision is 9/10, which is 0.9 exactly."""
    pq, pr, ps = ["q"] * 10, [f"r{i}" for i in range(10)], [1.0] + [0.9 - i / 100 for i in range(9)]
    gq, gr = ["q"] * 9, [f"r{i}" for i in range(1, 10)]
    record = copy_detection_metrics(pq, pr, ps, gq, gr)
    units = copy_detection_units(pq, pr, ps, gq, gr)
    assert record.recall_at_p90 == 1.0
    assert micro_ap(units, np.ones((1, 1)), part="recall_at_p90")[0] == 1.0


def test_a_positive_not_drawn_on_top_warns_of_nothing() -> None:
    """q0's copy ranks first; a replicate without q0 divides 0 by 0 there, which is no warning."""
    case = (["q0", "q1", "q1"], ["a", "b", "z"], [0.9, 0.5, 0.7], ["q0", "q1"], ["a", "b"])
    units = copy_detection_units(*case)
    weights = np.array([[0, 1], [1, 1], [0, 0]]) if units.ids.tolist() == ["q0", "q1"] else np.array([[1, 0], [1, 1], [0, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uap = micro_ap(units, weights)
        recall = micro_ap(units, weights, part="recall_at_p90")
    assert uap[0] == pytest.approx(0.5) and recall[0] == 0.0 and np.isnan(uap[2]) and np.isnan(recall[2])


def test_per_count_divides_where_something_was_drawn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = per_count(np.array([3.0, 0.0, 2.0, 0.0]), np.array([2.0, 0.0, 1.0, 5.0]))
    assert out[0] == 1.5 and np.isnan(out[1]) and out[2] == 2.0 and out[3] == 0.0


def test_the_cache_gives_both_parts_from_one_pass_and_tells_blocks_and_precisions_apart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    units = copy_detection_units(*_case(7, every_query_has_a_copy=True))
    weights = _weights(units, 9, 2)
    passes = []
    real = ranking._micro_ap_parts
    monkeypatch.setattr(ranking, "_micro_ap_parts", lambda *a: passes.append(1) or real(*a))
    uap = micro_ap(units, weights)  # the default part is uAP
    assert micro_ap(units, weights, part="uap") is uap
    micro_ap(units, weights, part="recall_at_p90")
    assert len(passes) == 1
    weights[1] = 0  # the same array refilled: its content tells it apart
    assert micro_ap(units, weights)[1] != uap[1] or np.isnan(micro_ap(units, weights)[1])
    assert len(passes) == 2
    low = micro_ap(units, weights, part="recall_at_p90", precision=0.5)
    fresh = copy_detection_units(*_case(7, every_query_has_a_copy=True))
    np.testing.assert_array_equal(low, micro_ap(fresh, weights, part="recall_at_p90", precision=0.5))
    assert len(passes) == 4


def test_refusals_name_what_is_wrong() -> None:
    units = copy_detection_units(*_case(7, every_query_has_a_copy=True))
    n = len(units)
    with pytest.raises(UnitsError, match=rf"^weights of shape \(2, {n + 1}\) for {n} units$"):
        micro_ap(units, np.ones((2, n + 1)))
    with pytest.raises(UnitsError, match=rf"^weights of shape \({n},\) for {n} units$"):
        micro_ap(units, np.ones(n))
    with pytest.raises(UnitsError, match=r"^micro_ap: unknown part 'map' \(expected one of uap, recall_at_p90\)$"):
        micro_ap(units, np.ones((1, n)), part="map")
    scores = units.columns["scores"]
    nan = Units(units.kind, units.benchmark, units.ids,
                {**units.columns, "scores": ListColumn(np.full(scores.values.size, np.nan), scores.offsets)},
                units.metrics)
    with pytest.raises(UnitsError, match=r"^disc units: a NaN score has no rank$"):
        micro_ap(nan, np.ones((1, n)))


def _copydays(distances: list[list[float]], hits: list[list[bool]], pooled_rank: bool) -> Units:
    offsets = np.cumsum([0] + [len(row) for row in distances])
    columns = {"distances": ListColumn(np.concatenate(distances).astype(np.float64), offsets),
               "hits": ListColumn(np.concatenate(hits).astype(bool), offsets)}
    if pooled_rank:
        flat = np.concatenate(distances)
        place = np.empty(flat.size, dtype=np.int64)
        place[np.argsort(flat, kind="stable")] = np.arange(flat.size)
        columns["pooled_rank"] = ListColumn(place, offsets)
    return Units("query", "copydays", np.array([f"q{i}" for i in range(len(distances))]), columns,
                 {"overall_uap": {"statistic": "copydays_uap"}})


def test_copydays_ties_without_a_recorded_order_rank_in_pooled_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit file without ``pooled_rank``: tied distances keep the pooled order (a stable sort), with
    more results than numpy sorts by insertion (16); replicates in several blocks."""
    rng = np.random.default_rng(3)
    distances = [sorted(rng.integers(0, 2, 8).astype(float).tolist()) for _ in range(12)]
    hits = [(rng.random(8) < 0.4).tolist() for _ in range(12)]
    units = _copydays(distances, hits, pooled_rank=False)
    weights = _weights(units, 40, 4)
    weights[2] = 0
    monkeypatch.setattr(ranking, "BLOCK_CELLS", 3 * 96)  # 96 results: blocks of 3 replicates
    found = copydays_uap(units, weights)
    flat_d, flat_h = np.concatenate(distances), np.concatenate(hits)
    owner = np.repeat(np.arange(12), 8)
    for row, counts in enumerate(weights):
        rows = np.repeat(np.arange(12), counts)
        if rows.size == 0:
            assert np.isnan(found[row])
            continue
        picked = np.concatenate([np.flatnonzero(owner == q) for q in rows])
        order = np.lexsort((picked, flat_d[picked]))  # ties in pooled order, the copies of a result side by side
        assert found[row] == pytest.approx(_pooled_ap(flat_h[picked][order], rows.size), abs=TOLERANCE), row
    with pytest.raises(UnitsError, match=r"^copydays units: a NaN distance has no rank$"):
        copydays_uap(_copydays([[np.nan, 1.0]], [[True, False]], pooled_rank=True), np.ones((1, 1)))


def test_rank_groups_sorts_two_negatives_by_query() -> None:
    matrix = rank_groups(np.array([1, 0]), np.array([0, 1]), 2, 2).toarray()
    np.testing.assert_array_equal(matrix, [[0.0, 1.0], [1.0, 0.0]])
    kept = rank_groups(np.array([0, 1, 1]), np.array([0, 2, 1]), 2, 2).toarray()  # group 2: after every positive
    np.testing.assert_array_equal(kept, [[1.0, 0.0], [0.0, 1.0]])


def test_rows_per_block_is_bounded_by_the_widest_array(monkeypatch: pytest.MonkeyPatch) -> None:
    from scipy import sparse

    def ranked(positives: int, groups: int, units: int) -> RankedPositives:
        return RankedPositives(np.zeros(positives, dtype=np.int64), np.zeros(positives, dtype=np.int64),
                               sparse.csc_matrix((groups, units)), units)

    monkeypatch.setattr(ranking, "BLOCK_CELLS", 100)
    assert ranked(7, 5, 3).rows_per_block() == 14  # positives widest
    assert ranked(3, 7, 5).rows_per_block() == 14  # groups widest
    assert ranked(5, 3, 7).rows_per_block() == 14  # units widest
    assert ranked(0, 0, 0).rows_per_block() == 100
    assert ranked(300, 1, 1).rows_per_block() == 1  # never 0


def test_index_type_is_int32_below_2_to_the_31_minus_1() -> None:
    assert index_type(2**31 - 2) is np.int32 and index_type(2**31 - 1) is np.int64
    assert index_type(5, 2**31 - 1, 3) is np.int64 and index_type(2**31 - 1, 5, 3) is np.int64
    assert index_type(5, 3, 2**31 - 1) is np.int64 and index_type(5, 3, 7) is np.int32
