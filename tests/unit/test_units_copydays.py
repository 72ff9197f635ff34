"""Copydays units and the pooled trapezoidal uAP statistic.

The contract (vsbench.stats.statistics): under any integer weights, each statistic equals the
vsbench scorer (parity with SSCD's copydays_eval in tests/parity) on the queries written out one copy
per draw; with all weights 1 it is the record's value, ties included (the pooled sort's order is kept).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from tests.unit.test_bench_copydays import _close, _features, copydays_root  # noqa: F401
from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.copydays.adapter import load_copydays
from vsbench.benchmarks.copydays.metrics import _pooled_ap, copydays_metrics, trapezoid_ap_from_ranks
from vsbench.benchmarks.copydays.units import copydays_units
from vsbench.stats.compare import intervals
from vsbench.stats.resample import Resampling, expanded_confidence
from vsbench.stats.statistics import evaluate
from vsbench.stats.units import units_from_bytes

TOLERANCE = 1e-9
BLOCKS = ("original", "strong", "crops/50")
BLOCK_METRICS = {"map_original": "original", "map_crops_50": "crops/50"}


def _case(seed: int, *, tied: bool = False, n: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    n, k = n or int(rng.integers(3, 10)), int(rng.integers(1, 7))
    hits = rng.random((n, k)) < 0.3
    num_positives = np.maximum(hits.sum(axis=1), rng.integers(1, 3, n))
    blocks = np.asarray(BLOCKS)[rng.integers(0, 3, n)]
    blocks[0] = "strong"
    if tied:
        distances = np.sort(rng.integers(0, 4, (n, k)), axis=1).astype(np.float32) / 4
    else:
        distances = np.sort(rng.random((n, k)), axis=1).astype(np.float32)  # distinct: only copies tie
    if rng.random() < 0.3:
        distances[0, -1] = np.inf  # a list FAISS could not fill
        hits[0, -1] = False
    return {"ids": [f"{b}/{i}" for i, b in enumerate(blocks)], "hits": hits, "distances": distances,
            "num_positives": num_positives, "blocks": blocks}


def _units(case: dict):
    return copydays_units(case["ids"], case["hits"], case["distances"], case["num_positives"], case["blocks"],
                          block_metrics=BLOCK_METRICS)


def _scored(case: dict, counts: np.ndarray) -> dict[str, float]:
    """The scorer on the queries written out ``counts[i]`` times each (rows repeated)."""
    rows = np.repeat(np.arange(counts.size), counts)
    nan = float("nan")
    if rows.size == 0:
        return {"strong_map": nan, "overall_uap": nan, **{m: nan for m in BLOCK_METRICS}}
    hits, distances = case["hits"][rows], case["distances"][rows]
    num_positives, blocks = case["num_positives"][rows], case["blocks"][rows]
    strong = blocks == "strong"
    out = {"overall_uap": copydays_metrics(hits, distances, num_positives, np.ones(rows.size, bool)).overall_uap,
           "strong_map": copydays_metrics(hits, distances, num_positives, strong).strong_map if strong.any() else nan}
    aps = np.asarray([trapezoid_ap_from_ranks(np.flatnonzero(row), p) for row, p in zip(hits, num_positives)])
    for metric, block in BLOCK_METRICS.items():
        out[metric] = float(aps[blocks == block].mean()) if (blocks == block).any() else nan
    return out


@pytest.mark.parametrize("seed", range(40))
def test_statistics_equal_the_scorer_on_the_expanded_data(seed: int) -> None:
    case = _case(seed)
    units = _units(case)
    weights = np.random.default_rng(500 + seed).integers(0, 4, (10, len(units)))
    weights[0] = 1
    weights[1] = 3
    weights[2, 1:] = 0
    found = evaluate(units, weights)
    for row, counts in enumerate(weights):
        expected = _scored(case, counts)
        for metric, value in expected.items():
            np.testing.assert_allclose(found[metric][row], value, rtol=0, atol=TOLERANCE,
                                       err_msg=f"{metric}, weights {counts.tolist()}")


@pytest.mark.parametrize("seed", range(20))
def test_ties_keep_the_recorded_order(seed: int) -> None:
    """Tied distances: all weights 1 give the record (numpy's own tie order, whatever it is); other
    weights give the expansion ranked by distance, then the recorded place, copies side by side."""
    case = _case(seed, tied=True)
    units = _units(case)
    record = copydays_metrics(case["hits"], case["distances"], case["num_positives"], case["blocks"] == "strong")
    ones = evaluate(units, np.ones((1, len(units)), dtype=np.int64))
    assert ones["overall_uap"][0] == pytest.approx(record.overall_uap, abs=TOLERANCE)
    assert ones["strong_map"][0] == pytest.approx(record.strong_map, abs=TOLERANCE)
    place = np.empty(case["hits"].size, dtype=np.int64)
    place[np.argsort(case["distances"].ravel())] = np.arange(case["hits"].size)
    place = place.reshape(case["hits"].shape)
    weights = np.random.default_rng(seed).integers(0, 4, (6, len(units)))
    found = evaluate(units, weights, {"overall_uap": units.metrics["overall_uap"]})["overall_uap"]
    for row, counts in enumerate(weights):
        rows = np.repeat(np.arange(counts.size), counts)
        if rows.size == 0:
            assert np.isnan(found[row])
            continue
        order = np.lexsort((place[rows].ravel(), case["distances"][rows].ravel()))  # stable: copies in draw order
        assert found[row] == pytest.approx(_pooled_ap(case["hits"][rows].ravel()[order], rows.size), abs=TOLERANCE)


def test_hand_example() -> None:
    # q0: hit at rank 0 (distance 0.1); q1: miss 0.2 then hit 0.3. Pooled: hit, miss, hit.
    case = {"ids": ["strong/0", "original/1"], "hits": np.array([[True, False], [False, True]]),
            "distances": np.array([[0.1, 0.5], [0.2, 0.3]], dtype=np.float32), "num_positives": np.array([1, 1]),
            "blocks": np.array(["strong", "original"])}
    units = _units(case)
    values = evaluate(units, np.array([[1, 1], [2, 0], [0, 1]]))
    # all: k=0 r=0 -> (1 + 1) / 2; k=1 r=2 -> (1/2 + 2/3) / 2; over 2 queries
    assert values["overall_uap"].tolist() == pytest.approx([(1 + (1 / 2 + 2 / 3) / 2) / 2, 1.0, (0 + 1 / 2) / 2 / 1])
    assert values["strong_map"].tolist() == pytest.approx([1.0, 1.0, float("nan")], nan_ok=True)
    assert values["map_original"].tolist() == pytest.approx([0.25, float("nan"), 0.25], nan_ok=True)
    back = units_from_bytes(units.to_parquet_bytes())
    assert back.columns["distances"].values.dtype == np.float32
    for metric, found in evaluate(back, np.array([[1, 1], [2, 0]])).items():
        np.testing.assert_array_equal(found, values[metric][:2])


@pytest.mark.parametrize("metric", ["strong_map", "overall_uap", "map_original"])
def test_interval_equals_scipy_bootstrap(metric: str) -> None:
    case = _case(7, n=16)
    case["blocks"][:] = "strong"
    case["blocks"][1::2] = "original"
    units = _units(case)
    resamples, seed = 60, 2

    def statistic(rows: np.ndarray) -> float:
        return _scored(case, np.bincount(rows, minlength=len(units)))[metric]

    # the queries behind each metric (no two share an original here): strong ones, all, the originals
    behind = {"strong_map": "strong", "overall_uap": None, "map_original": "original"}[metric]
    level = expanded_confidence(0.95, len(units) if behind is None else int(np.count_nonzero(case["blocks"] == behind)))
    assert units.clusters is None or np.unique(units.clusters).size == len(units)
    expected = scipy_stats.bootstrap((np.arange(len(units)),), statistic, method="percentile", n_resamples=resamples,
                                     rng=np.random.default_rng(seed), batch=None, vectorized=False,
                                     confidence_level=level).confidence_interval
    assert np.isfinite(expected.low) and expected.low < expected.high  # every replicate defined, not degenerate
    found = intervals(units, Resampling(resamples, seed), [metric])[metric]
    assert found.low == pytest.approx(expected.low, abs=TOLERANCE)
    assert found.high == pytest.approx(expected.high, abs=TOLERANCE)


def test_adapter_returns_units_aligned_with_records(copydays_root: Path) -> None:  # noqa: F811
    near_distractor = np.array([0.5, 0, 0, 1, 0, 0], dtype=np.float32)
    bench = load_copydays(copydays_root, distractors=copydays_root.parent / "distractors", k=3)
    result = bench.evaluate(_features(bench, {"strong/200002": near_distractor}), EvalSettings(codecs="Flat"))
    assert len(result.units) == len(result.records) == 1
    (record,), (units,) = result.records, result.units
    assert units is not None and units.kind == "query" and units.benchmark == "copydays" and units.variant == "Flat"
    assert units.ids.tolist() == list(bench.queries.ids)
    assert set(units.metrics) == {"strong_map", "overall_uap", "map_original", "map_jpegqual_30", "map_crops_50"}
    values = evaluate(units, np.ones((1, len(units)), dtype=np.int64))
    for metric in units.metrics:
        assert values[metric][0] == pytest.approx(record[metric], abs=TOLERANCE)
    assert units.columns["references"][bench.queries.ids.index("strong/200002")].tolist()[:2] == ["d0", "original/200000"]
    # each image is drawn with its original's group: the original, its attacks, re-encodings and crops
    originals = bench.queries.ids[:bench.num_originals]
    assert units.clusters is not None
    assert units.clusters.tolist() == [f"original:{originals[min(p)]}" for p in bench.positives]
    assert units.cluster_index()[1] == bench.num_originals < len(units)
    assert units_from_bytes(units.to_parquet_bytes()).clusters.tolist() == units.clusters.tolist()
    _close(result.figures)
