"""VSD seed units against vsd_metrics on the seeds written out one copy per draw.

A seed drawn ``w`` times becomes ``w`` seeds (renamed ``seed#c``), each with the seed's tagged pairs:
HR@k and MRR@k (ratios over the seeds with a positive tag), ROC-AUC and PR-AUC (sklearn's, over all
tagged pairs) must equal :func:`vsd_metrics` there. Inputs have tied scores and seeds without any
positive tag.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import bootstrap

from tests.statistics_contract import assert_metrics_close
from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.vsd.adapter import load_vsd
from vsbench.benchmarks.vsd.metrics import binary_average_precision, binary_roc_auc, vsd_metrics
from vsbench.benchmarks.vsd.units import vsd_units
from vsbench.stats.compare import intervals
from vsbench.stats.resample import Resampling, expanded_confidence
from vsbench.stats.statistics import evaluate
from vsbench.stats.units import units_from_bytes

METRICS = ("hr_at_5", "hr_at_9", "mrr_at_5", "mrr_at_9", "roc_auc", "pr_auc")


def _tags(rng: np.random.Generator, n_seeds: int, p_positive: float = 0.6) -> tuple[list, np.ndarray, np.ndarray, np.ndarray]:
    """Tagged pairs, seed by seed (seeds interleaved in the list); scores from a few values: ties."""
    seeds, labels, ranks, scores = [], [], [], []
    for s in range(n_seeds):
        n = int(rng.integers(1, 6))
        y = (rng.random(n) < (p_positive if rng.random() < 0.75 else 0.0)).astype(int)
        seeds += [f"img/s{s}.jpg"] * n
        labels += y.tolist()
        ranks += rng.integers(0, 12, n).tolist()
        scores += rng.choice([0.2, 0.5, 0.7, 0.9], n).tolist()
    order = rng.permutation(len(seeds))
    return ([seeds[i] for i in order], np.array(labels)[order], np.array(ranks)[order], np.array(scores)[order])


def _expected(seeds: list, labels: np.ndarray, ranks: np.ndarray, scores: np.ndarray,
              count: dict[str, int]) -> dict[str, float]:
    """vsd_metrics on the expansion; NaN where the scorer refuses it."""
    rows = [(f"{s}#{c}", y, r, x) for s, y, r, x in zip(seeds, labels, ranks, scores) for c in range(count[s])]
    out = dict.fromkeys(METRICS, np.nan)
    if not rows:
        return out
    s, y, r, x = (list(v) for v in zip(*rows))
    y, r, x = np.array(y), np.array(r), np.array(x)
    if y.any():
        for k in (5, 9):  # HR and MRR do not need a negative; vsd_metrics wants one for its AUC
            m = vsd_metrics(s + ["extra"], np.r_[y, 0], np.r_[r, 0], np.r_[x, 0.0], (k,))
            out[f"hr_at_{k}"], out[f"mrr_at_{k}"] = m.hr_at_k[k], m.mrr_at_k[k]
        out["pr_auc"] = binary_average_precision(y, x)
        if not y.all():
            full = vsd_metrics(s, y, r, x)
            assert full.roc_auc == binary_roc_auc(y, x) and full.pr_auc == out["pr_auc"]
            assert full.hr_at_k[5] == out["hr_at_5"] and full.mrr_at_k[9] == out["mrr_at_9"]
            out["roc_auc"] = full.roc_auc
    return out


@pytest.mark.parametrize("seed", range(40))
def test_statistics_equal_vsd_metrics_on_expanded_seeds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tags = _tags(rng, int(rng.integers(1, 9)))
    units = vsd_units(*tags)
    assert set(units.metrics) == set(METRICS)
    weights = rng.choice([0, 1, 1, 2, 3], size=(8, len(units)))
    weights[-1] = 1
    values = evaluate(units, weights)
    for row in range(weights.shape[0]):
        count = dict(zip(units.ids, weights[row].tolist()))
        assert_metrics_close({m: float(values[m][row]) for m in METRICS}, _expected(*tags, count))


def test_all_ones_are_the_record_and_seeds_keep_first_appearance_order() -> None:
    rng = np.random.default_rng(5)
    tags = _tags(rng, 10)
    seeds = tags[0]
    units = vsd_units(*tags)
    assert list(units.ids) == list(dict.fromkeys(seeds))
    record = vsd_metrics(*tags).as_dict()
    ones = evaluate(units, np.ones((1, len(units)), dtype=np.int32))
    for metric in METRICS:
        assert ones[metric][0] == pytest.approx(record[metric], abs=1e-12)
    assert int(units.values("has_positive").sum()) == record["num_seeds"]
    back = units_from_bytes(units.to_parquet_bytes())
    w = rng.integers(0, 3, size=(5, len(units)))
    for metric, v in evaluate(back, w).items():
        np.testing.assert_allclose(v, evaluate(units, w)[metric], atol=1e-12)


def test_intervals_equal_scipy_bootstrap() -> None:
    rng = np.random.default_rng(2)
    tags = _tags(rng, 14, p_positive=0.7)
    units = vsd_units(*tags)
    resamples, seed = 300, 4
    found = intervals(units, Resampling(resamples, seed))
    for metric in METRICS:
        def statistic(drawn: np.ndarray, m: str = metric) -> float:
            count = dict(zip(units.ids, np.bincount(drawn, minlength=len(units)).tolist()))
            return _expected(*tags, count)[m]

        # HR and MRR rest on the seeds with a positive tag, the AUCs on every seed
        seeds = int(np.count_nonzero(units.values("has_positive"))) if metric[:2] in ("hr", "mr") else len(units)
        res = bootstrap((np.arange(len(units)),), statistic, method="percentile", n_resamples=resamples, batch=None,
                        vectorized=False, rng=np.random.default_rng(seed), confidence_level=expanded_confidence(0.95, seeds))
        assert found[metric].low == pytest.approx(res.confidence_interval.low, abs=1e-9)
        assert found[metric].high == pytest.approx(res.confidence_interval.high, abs=1e-9)
        assert found[metric].low < found[metric].high


def test_adapter_units_align_with_records(tmp_path: Path) -> None:
    """The hand-made catalog of test_bench_vsd (ties included), plus a seed with only a negative tag."""
    from tests.unit.test_bench_vsd import _layout

    features = _layout(tmp_path)
    closed = tmp_path / "gt_tagging" / "closed_catalog.json"
    tags = json.loads(closed.read_text()) + [{"key": ["img/b1.jpg", "img/d1.jpg"], "value": 0}]
    closed.write_text(json.dumps(tags))
    result = load_vsd(tmp_path).evaluate({"images": features}, EvalSettings())
    assert len(result.units) == len(result.records) == 2
    for record, units in zip(result.records, result.units):
        assert units.kind == "seed" and units.variant == record["protocol"]
        assert set(units.metrics) == set(METRICS) <= set(record)
        ones = evaluate(units, np.ones((1, len(units)), dtype=np.int32))
        for metric in METRICS:
            assert ones[metric][0] == pytest.approx(record[metric], abs=1e-12)
        assert int(units.values("has_positive").sum()) == record["num_seeds"]
        assert len(units.lists("score")[0]) == record["num_tagged_pairs"]
    closed_units = result.units[0]
    assert list(closed_units.ids) == ["img/a1.jpg", "img/b1.jpg"]
    assert closed_units.values("has_positive").tolist() == [1.0, 0.0]
    assert not math.isnan(result.records[0]["roc_auc"])
