"""Product-search query units against product_search_metrics on the queries written out one copy per draw.

A query drawn ``w`` times is ``w`` queries (its feature row and its candidates repeated); mAP there
must equal ``ratio(ap / has_positive)`` under the draw counts. Inputs have tied cosines (quantized
features) and queries without a fulfilling candidate (left out of the mean).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import bootstrap

from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.product_search.adapter import load_product_search
from vsbench.benchmarks.product_search.metrics import product_search_metrics
from vsbench.benchmarks.product_search.readers import read_product_queries
from vsbench.benchmarks.product_search.units import product_search_units, query_ids
from vsbench.io.features import FeatureSet
from vsbench.reporting.plots import close
from vsbench.stats.compare import intervals
from vsbench.stats.resample import Resampling, expanded_confidence
from vsbench.stats.statistics import evaluate
from vsbench.stats.units import units_from_bytes

TOL = 1e-9


def _data(rng: np.random.Generator, n_queries: int, p_no_positive: float = 0.2) -> tuple:
    """Features on a coarse grid (ties among cosines), 2-7 candidates a query, some without a positive."""
    gallery = rng.integers(-2, 3, size=(12, 4)).astype(np.float64)
    gallery[np.abs(gallery).sum(axis=1) == 0, 0] = 1.0
    queries = rng.integers(-2, 3, size=(n_queries, 4)).astype(np.float64)
    queries[np.abs(queries).sum(axis=1) == 0, 1] = 1.0
    rows, labels = [], []
    for _ in range(n_queries):
        n = int(rng.integers(2, 8))
        rows.append(rng.choice(12, size=n, replace=False))
        y = (rng.random(n) < 0.4).astype(int)
        if rng.random() < p_no_positive:
            y[:] = 0
        labels.append(y)
    return queries, gallery, rows, labels


def _expected(data: tuple, counts: np.ndarray) -> float:
    queries, gallery, rows, labels = data
    index = np.repeat(np.arange(len(rows)), counts)
    if index.size == 0:
        return np.nan
    try:
        return product_search_metrics(queries[index], gallery, [rows[i] for i in index],
                                      [labels[i] for i in index]).mean_average_precision
    except ValueError:  # no query with a fulfilling candidate
        return np.nan


@pytest.mark.parametrize("seed", range(30))
def test_map_equals_the_scorer_on_expanded_queries(seed: int) -> None:
    rng = np.random.default_rng(seed)
    data = _data(rng, int(rng.integers(1, 10)), p_no_positive=0.4)
    units = product_search_units(*data)
    weights = rng.choice([0, 1, 1, 2, 3], size=(8, len(units)))
    weights[-1] = 1
    got = evaluate(units, weights)["map"]
    for row in range(weights.shape[0]):
        expected = _expected(data, weights[row])
        if np.isnan(expected):
            assert np.isnan(got[row])
        else:
            assert abs(got[row] - expected) <= TOL


def test_all_ones_is_the_scorer_and_columns_keep_each_query() -> None:
    rng = np.random.default_rng(1)
    data = _data(rng, 9)
    units = product_search_units(*data, ids=[f"L{i}" for i in range(9)], variant="submission")
    m = product_search_metrics(*data)
    assert evaluate(units, np.ones((1, 9), dtype=np.int32))["map"][0] == pytest.approx(m.mean_average_precision,
                                                                                       abs=1e-12)
    np.testing.assert_array_equal(units.values("ap"), np.nan_to_num(m.per_query_ap, nan=0.0))
    assert units.values("has_positive").tolist() == (~np.isnan(m.per_query_ap)).astype(float).tolist()
    assert units.columns["label"][3].tolist() == list(data[3][3]) and len(units.columns["score"][3]) == len(data[2][3])
    back = units_from_bytes(units.to_parquet_bytes())
    assert back.ids.tolist() == [f"L{i}" for i in range(9)] and back.metrics == units.metrics


def test_intervals_equal_scipy_bootstrap() -> None:
    rng = np.random.default_rng(3)
    data = _data(rng, 20, p_no_positive=0.1)
    units = product_search_units(*data)
    resamples, seed = 400, 9

    def statistic(drawn: np.ndarray) -> float:
        return _expected(data, np.bincount(drawn, minlength=len(units)))

    # mAP rests on the queries with a fulfilling candidate: the expansion counts those
    level = expanded_confidence(0.95, int(np.count_nonzero(units.values("has_positive"))))
    assert level > expanded_confidence(0.95, len(units) - 1)  # not every query has one: the count matters
    res = bootstrap((np.arange(len(units)),), statistic, method="percentile", n_resamples=resamples, batch=None,
                    vectorized=False, rng=np.random.default_rng(seed), confidence_level=level)
    found = intervals(units, Resampling(resamples, seed))["map"]
    assert found.low == pytest.approx(res.confidence_interval.low, abs=1e-9)
    assert found.high == pytest.approx(res.confidence_interval.high, abs=1e-9)
    assert found.low < found.high


def test_adapter_units_align_with_records(tmp_path: Path) -> None:
    """test_bench_product_search's layout: q1 AP 5/6, q2 without a fulfilling candidate."""
    from tests.unit.test_bench_product_search import _layout, _submission

    _layout(tmp_path)
    for bench, features in (
        (load_product_search(tmp_path, submission=_submission(tmp_path)), {}),
        (load_product_search(tmp_path), {"query": FeatureSet(np.array(["g4", "g1"]), np.eye(2, 3, dtype=np.float32)),
                                         "gallery": FeatureSet(np.array(["g1", "g2", "g3"]),
                                                               np.array([[1, 0, 0], [0.5, 0.5, 0], [0, 1, 0]],
                                                                        dtype=np.float32))}),
    ):
        result = bench.evaluate(features, EvalSettings())
        for figure in result.figures.values():
            close(figure)
        (record,), (units,) = result.records, result.units
        assert units.kind == "query" and units.variant == record["mode"] and set(units.metrics) == {"map"}
        assert units.ids.tolist() == query_ids(read_product_queries(tmp_path / "queries.jsonl")) == ["1", "2"]
        assert evaluate(units, np.ones((1, 2), dtype=np.int32))["map"][0] == pytest.approx(record["map"], abs=1e-12)
        assert units.values("has_positive").tolist() == [1.0, 0.0]
    assert record["map"] == pytest.approx(5 / 6)  # g1 (1) first, g2 (0), g3 (1): (1 + 2/3) / 2
