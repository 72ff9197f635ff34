"""Copy-detection units (DISC, ``vsbench score copy-detection``) and the micro-AP statistic.

The contract (vsbench.stats.statistics): under any integer weights, the statistics equal the
vsbench scorer (whose parity with isc2021 is tested in tests/parity) run on the data written out
one copy per draw, each copy of a query renamed; with all weights 1 they are the record's values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from tests.unit.test_bench_copy_detection import QUERIES, _close, _hand_features, disc_root  # noqa: F401
from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.disc.adapter import load_disc
from vsbench.benchmarks.disc.metrics import copy_detection_metrics
from vsbench.benchmarks.disc.units import COPY_DETECTION_METRICS, copy_detection_units
from vsbench.stats.compare import intervals
from vsbench.stats.ranking import micro_ap
from vsbench.stats.resample import Resampling, expanded_confidence
from vsbench.stats.statistics import evaluate
from vsbench.stats.units import units_from_bytes

TOLERANCE = 1e-9
METRICS = tuple(COPY_DETECTION_METRICS)


def _case(seed: int, *, every_query_has_a_copy: bool = False) -> tuple[list, list, list, list, list]:
    """Predictions and ground truth with ties (scores in tenths), queries without ground truth,
    copies never retrieved, no-copy rows, a repeated ground-truth pair now and then."""
    rng = np.random.default_rng(seed)
    n_queries = int(rng.integers(2, 9))
    refs = [f"r{n}" for n in range(8)]
    pq, pr, ps, gq, gr = [], [], [], [], []
    for q in range(n_queries):
        query = f"q{q}"
        for ref in rng.choice(refs, int(rng.integers(0, 5)), replace=False).tolist():
            pq.append(query)
            pr.append(ref)
            ps.append(float(rng.integers(0, 6)) / 10)
        copies = int(rng.integers(1 if every_query_has_a_copy else 0, 3))
        for ref in rng.choice(refs, copies, replace=False).tolist():
            gq.append(query)
            gr.append(ref)
            if rng.random() < 0.1:
                gq.append(query)
                gr.append(ref)  # listed twice: counted twice (isc2021)
        if copies == 0 and rng.random() < 0.5:
            gq.append(query)
            gr.append("")  # no copy
    if not any(gr):  # the scorer needs one pair somewhere
        gq.append("q0")
        gr.append("r0")
    if rng.random() < 0.8 and pq:  # make sure some copies are found
        for row in rng.choice(len(pq), min(3, len(pq)), replace=False).tolist():
            gq.append(pq[row])
            gr.append(pr[row])
    return pq, pr, ps, gq, gr


def _expanded(case: tuple, ids: np.ndarray, counts: np.ndarray) -> tuple[list, list, list, list, list]:
    """The data written out with each query ``counts[i]`` times, copy c of query q named ``q#c``."""
    pq, pr, ps, gq, gr = case
    draws = dict(zip(ids.tolist(), counts.tolist()))
    out: tuple[list, list, list, list, list] = ([], [], [], [], [])
    for q, r, s in zip(pq, pr, ps):
        for c in range(draws[q]):
            out[0].append(f"{q}#{c}")
            out[1].append(r)
            out[2].append(s)
    for q, r in zip(gq, gr):
        for c in range(draws[q]):
            out[3].append(f"{q}#{c}")
            out[4].append(r)
    return out


def _scored(case: tuple, ids: np.ndarray, counts: np.ndarray, duplicates: str = "count") -> dict[str, float]:
    try:
        m = copy_detection_metrics(*_expanded(case, ids, counts), ground_truth_duplicates=duplicates)  # type: ignore[arg-type]
    except ValueError:  # no ground-truth pair drawn: undefined, NaN in a replicate
        return {metric: float("nan") for metric in METRICS}
    return {"uap": m.uap, "accuracy_at_1": m.accuracy_at_1, "recall_at_p90": m.recall_at_p90}


@pytest.mark.parametrize("duplicates", ["count", "once"])
@pytest.mark.parametrize("seed", range(40))
def test_statistics_equal_the_scorer_on_the_expanded_data(seed: int, duplicates: str) -> None:
    case = _case(seed)
    units = copy_detection_units(*case, ground_truth_duplicates=duplicates)  # type: ignore[arg-type]
    rng = np.random.default_rng(1000 + seed)
    weights = rng.integers(0, 4, (12, len(units)))
    weights[0] = 1
    weights[1] = 3
    weights[2, : len(units) // 2] = 0
    found = evaluate(units, weights)
    for row, counts in enumerate(weights):
        expected = _scored(case, units.ids, counts, duplicates)
        for metric in METRICS:
            np.testing.assert_allclose(found[metric][row], expected[metric], rtol=0, atol=TOLERANCE,
                                       err_msg=f"{metric}, weights {counts.tolist()}")


def test_all_ones_give_the_record_and_units_cover_every_query() -> None:
    case = _case(3)
    units = copy_detection_units(*case, queries=["q9", "q0"])
    record = copy_detection_metrics(*case)
    values = evaluate(units, np.ones((1, len(units)), dtype=np.int64))
    assert values["uap"][0] == pytest.approx(record.uap, abs=TOLERANCE)
    assert values["accuracy_at_1"][0] == pytest.approx(record.accuracy_at_1, abs=TOLERANCE)
    assert values["recall_at_p90"][0] == pytest.approx(record.recall_at_p90, abs=TOLERANCE)
    pq, _, _, gq, _ = case
    assert units.ids[:2].tolist() == ["q9", "q0"]  # the named order first; q9 has neither predictions nor truth
    assert set(units.ids.tolist()) == {"q9", "q0", *pq, *gq}
    assert len(set(units.ids.tolist())) == len(units)
    assert units.metrics == COPY_DETECTION_METRICS


def test_hand_example_columns() -> None:
    # a: x (0.9, copy), y (0.5); b: x (0.9), its copy y never retrieved; c: two tied misses; d: copy never retrieved;
    # e: no copy (empty reference). Pooled, negatives first: b-x 0.9 ahead of a-x 0.9 -> precision 1/2.
    case = (["a", "a", "b", "c", "c"], ["x", "y", "x", "z", "y"], [0.9, 0.5, 0.9, 0.3, 0.3],
            ["a", "b", "d", "e"], ["x", "y", "w", ""])
    units = copy_detection_units(*case)
    assert units.ids.tolist() == ["e", "a", "b", "c", "d"]
    assert units.columns["n_positives"].tolist() == [0, 1, 1, 0, 1]
    assert units.columns["correct_at_1"].tolist() == [0, 1, 0, 0, 0]
    assert units.columns["references"][1].tolist() == ["x", "y"]
    assert units.columns["positive"][1].tolist() == [True, False]
    assert units.columns["scores"][3].tolist() == [0.3, 0.3]
    values = evaluate(units, np.array([[1, 1, 1, 1, 1], [0, 2, 0, 0, 0], [5, 0, 0, 1, 0]]))
    assert values["uap"].tolist() == pytest.approx([0.5 / 3, 1.0, float("nan")], nan_ok=True)
    assert values["recall_at_p90"].tolist() == pytest.approx([0.0, 1.0, float("nan")], nan_ok=True)
    assert values["accuracy_at_1"].tolist() == pytest.approx([1 / 3, 1.0, float("nan")], nan_ok=True)


def test_integer_ids_and_parquet_round_trip() -> None:
    pq, pr, ps = np.array([1, 1, 2, 3]), np.array([10, 11, 10, 12]), np.array([0.5, 0.7, 0.5, 0.1])
    gq, gr = np.array([1, 2, 4]), np.array([10, 10, 13])
    units = copy_detection_units(pq, pr, ps, gq, gr)
    assert units.ids.tolist() == ["1", "2", "3", "4"]
    assert units.columns["references"][0].tolist() == ["10", "11"]
    back = units_from_bytes(units.to_parquet_bytes())
    weights = np.random.default_rng(0).integers(0, 3, (7, len(units)))
    for metric, values in evaluate(units, weights).items():
        np.testing.assert_array_equal(evaluate(back, weights)[metric], values)


def test_recall_at_p90_reached_under_weights() -> None:
    # q0's three copies score above everything; q1 adds a miss at the top and a copy below.
    case = (["q0", "q0", "q0", "q1", "q1"], ["a", "b", "c", "z", "d"], [0.9, 0.8, 0.7, 0.95, 0.1],
            ["q0", "q0", "q0", "q1"], ["a", "b", "c", "d"])
    units = copy_detection_units(*case)
    weights = np.array([[1, 1], [1, 0], [2, 0], [0, 1], [3, 1]])
    found = evaluate(units, weights)
    for row, counts in enumerate(weights):
        expected = _scored(case, units.ids, counts)
        for metric in METRICS:
            assert found[metric][row] == pytest.approx(expected[metric], abs=TOLERANCE, nan_ok=True)
    assert found["recall_at_p90"][1] == 1.0 and found["recall_at_p90"][2] == 1.0


def test_blocks_and_parts_agree() -> None:
    """Replicates cut in small blocks, or asked one part at a time, give the same numbers."""
    case = _case(7, every_query_has_a_copy=True)
    units = copy_detection_units(*case)
    weights = np.random.default_rng(3).integers(0, 4, (25, len(units)))
    fresh = copy_detection_units(*case)
    import vsbench.stats.ranking as ranking

    original = ranking.BLOCK_CELLS
    try:
        ranking.BLOCK_CELLS = 1  # one replicate a block
        small = micro_ap(fresh, weights, part="recall_at_p90")
    finally:
        ranking.BLOCK_CELLS = original
    np.testing.assert_allclose(small, micro_ap(units, weights.copy(), part="recall_at_p90"), atol=TOLERANCE)
    with pytest.raises(Exception, match="unknown part"):
        micro_ap(units, weights, part="map")


def _own_references(case: tuple[list, list, list, list, list]) -> tuple[list, list, list, list, list]:
    """The case with each query's references renamed its own (``q1/r3``): the same matches, and no
    two queries copy one reference, so every query is its own group."""
    pq, pr, ps, gq, gr = case
    return (pq, [f"{q}/{r}" for q, r in zip(pq, pr)], ps, gq, [f"{q}/{r}" if r else "" for q, r in zip(gq, gr)])


@pytest.mark.parametrize("grouped", [False, True], ids=["each query its own group", "queries grouped by reference"])
@pytest.mark.parametrize("metric", METRICS)
def test_interval_equals_scipy_bootstrap(metric: str, grouped: bool) -> None:
    case = _case(20, every_query_has_a_copy=True) if grouped else _own_references(_case(11, every_query_has_a_copy=True))
    units = copy_detection_units(*case)
    resamples, seed = 60, 5
    # queries copying one reference are one group, drawn whole: scipy draws the groups (issue 55)
    cluster, groups = units.cluster_index()
    assert (units.clusters is not None and 1 < groups < len(units)) if grouped else units.clusters is None

    def statistic(rows: np.ndarray) -> float:
        return _scored(case, units.ids, np.bincount(rows, minlength=groups)[cluster])[metric]

    # every query has a copy: every group is behind both metrics, the level the expansion takes for them
    level = expanded_confidence(0.95, groups)
    expected = scipy_stats.bootstrap((np.arange(groups),), statistic, method="percentile", n_resamples=resamples,
                                     rng=np.random.default_rng(seed), batch=None, vectorized=False,
                                     confidence_level=level).confidence_interval
    found = intervals(units, Resampling(resamples, seed), [metric])[metric]
    assert found.level == level
    assert found.low == pytest.approx(expected.low, abs=TOLERANCE)
    assert found.high == pytest.approx(expected.high, abs=TOLERANCE)


def test_adapter_returns_units_aligned_with_records(disc_root: Path) -> None:  # noqa: F811
    result = load_disc(disc_root).evaluate(_hand_features(), EvalSettings(codecs="Flat", k=2))
    assert len(result.units) == len(result.records) == 2
    for record, units in zip(result.records, result.units):
        assert units is not None and units.kind == "query" and units.benchmark == "disc"
        assert units.ids.tolist() == list(QUERIES)  # Q00002 (no copy) is a unit too
        assert set(units.metrics) == {"uap", "accuracy_at_1", "recall_at_p90"} <= set(record)
        assert units.variant == f"{record['codec']} {record['score_norm']}"
        values = evaluate(units, np.ones((1, len(units)), dtype=np.int64))
        for metric in units.metrics:
            assert values[metric][0] == pytest.approx(record[metric], abs=TOLERANCE)
        assert units.columns["references"][1].tolist() == ["R000002", "R000000"]
    _close(result.figures)


def test_reader_ids_give_the_same_units() -> None:
    """The file scorer's readers give ``Ids`` (codes into distinct text), not arrays: same units."""
    from vsbench.io.ids import Ids

    case = _case(5)
    pq, pr, ps, gq, gr = case
    plain = copy_detection_units(*case)
    coded = copy_detection_units(Ids.from_strings(pq), Ids.from_strings(pr), ps, Ids.from_strings(gq),
                                 Ids.from_strings(gr))
    assert coded.ids.tolist() == plain.ids.tolist()
    for name in ("scores", "positive", "references"):
        assert coded.columns[name].values.tolist() == plain.columns[name].values.tolist()
        assert coded.columns[name].offsets.tolist() == plain.columns[name].offsets.tolist()
    weights = np.random.default_rng(1).integers(0, 3, (5, len(plain)))
    for metric, values in evaluate(plain, weights).items():
        np.testing.assert_allclose(evaluate(coded, weights)[metric], values, atol=TOLERANCE)


@pytest.mark.parametrize("predictions", [([], [], []), (["q1"], ["x"], [0.5])])
def test_no_true_positive_or_no_prediction_at_all(predictions: tuple) -> None:
    case = (*predictions, ["q0", "q2"], ["a", ""])
    units = copy_detection_units(*case)
    found = evaluate(units, np.array([[1] * len(units), [0] * len(units)]))
    assert found["uap"][0] == found["recall_at_p90"][0] == found["accuracy_at_1"][0] == 0.0
    assert np.isnan(found["uap"][1]) and np.isnan(found["accuracy_at_1"][1])
    assert copy_detection_metrics(*case).uap == 0.0


def test_one_unit_file_under_a_sequence_of_weight_blocks_gives_each_its_own_values() -> None:
    """A paired comparison evaluates the same units under block after block of same-shaped weights
    (and a caller may refill one array in place): every block must be scored on its own weights.
    With the block cache comparing shapes only, a uAP drop of 0.449 got p = 1.0 (issue 56)."""
    case = _case(21, every_query_has_a_copy=True)
    units = copy_detection_units(*case)
    rng = np.random.default_rng(8)
    buffer = np.empty((4, len(units)), dtype=np.int64)
    for step in range(6):
        fresh = rng.integers(0, 4, (4, len(units)))
        buffer[...] = fresh  # the same object as the block before, new content
        for weights in ((fresh, buffer) if step < 3 else (buffer,)):
            found = evaluate(units, weights)
            for row, counts in enumerate(fresh):
                expected = _scored(case, units.ids, counts)
                for metric in METRICS:
                    assert found[metric][row] == pytest.approx(expected[metric], abs=TOLERANCE, nan_ok=True), metric
