"""Patch-pair units and their statistics (vsbench.stats.curves) against the patch_pairs scorer.

The contract: under any integer weights, ``pair_roc_auc``, ``pair_pr_ap`` and ``pair_mean_pr_ap``
equal :func:`patch_pair_grid` / :func:`mean_pr_ap` run on the files written out one copy per draw
(each pair repeated in place, so copies tie with each other and keep file order), including ties
between positives and negatives (negatives first), pairs around the imbalanced 20% boundary and
pairs at distance +inf (never retrieved).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import bootstrap

from tests.statistics_contract import TOL, assert_metrics_close
from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.patch_pairs.adapter import load_patch_pairs
from vsbench.benchmarks.patch_pairs.metrics import mean_pr_ap, patch_pair_grid, patch_pair_metrics
from vsbench.benchmarks.patch_pairs.synth import generate_patch_pairs
from vsbench.benchmarks.patch_pairs.units import pair_sequences, patch_pair_units, sequence_of
from vsbench.io.features import FeatureSet
from vsbench.reporting.plots import close
from vsbench.stats.compare import intervals
from vsbench.stats.resample import Resampling, expanded_confidence
from vsbench.stats.statistics import evaluate
from vsbench.stats.units import units_from_bytes

POS, NEG = ("easy", "hard"), ("diffseq", "sameseq")


def _files(rng: np.random.Generator, *, inf: bool = True) -> dict[str, np.ndarray]:
    """Small files with many ties (distances from a few values) and, sometimes, +inf distances."""
    out = {}
    for name in (*POS, *NEG):
        n = int(rng.integers(1, 13))
        values = rng.choice([0.5, 1.0, 1.5, 2.0], size=n) + (0.0 if name in POS else 0.25 * rng.integers(0, 3))
        if inf and rng.random() < 0.3:
            values[rng.integers(n)] = np.inf
        out[name] = values.astype(np.float64)
    return out


def _expected(files: dict[str, np.ndarray], counts: dict[str, np.ndarray]) -> dict[str, float]:
    """The scorer on the expanded files; NaN where it refuses them (no positive or no negative)."""
    expanded = {name: np.repeat(d, counts[name]) for name, d in files.items()}
    out: dict[str, float] = {}
    grid = {}
    for p in POS:
        for n in NEG:
            try:
                grid[f"{p}_{n}"] = patch_pair_metrics(expanded[p], expanded[n])
                out[f"{p}_{n}.roc_auc"] = grid[f"{p}_{n}"].roc.auc
                out[f"{p}_{n}.pr_ap"] = grid[f"{p}_{n}"].pr.ap
            except ValueError:
                out[f"{p}_{n}.roc_auc"] = out[f"{p}_{n}.pr_ap"] = np.nan
    out["mean.mean_pr_ap"] = mean_pr_ap(grid) if len(grid) == 4 else np.nan
    return out


def _weights(units_by_variant: dict, counts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each Units' weight row from per-file counts, in that Units' row order (read from its ids)."""
    out = {}
    for variant, units in units_by_variant.items():
        out[variant] = np.array([counts[i.split(":")[0]][int(i.split(":")[1]) - 1] for i in units.ids])
    return out


def _actual(units_by_variant: dict, counts_rows: list[dict[str, np.ndarray]]) -> list[dict[str, float]]:
    rows = [_weights(units_by_variant, c) for c in counts_rows]
    out: list[dict[str, float]] = [{} for _ in rows]
    for variant, units in units_by_variant.items():
        values = evaluate(units, np.stack([r[variant] for r in rows]))
        for metric, v in values.items():
            for j, x in enumerate(v):
                out[j][f"{variant}.{metric}"] = float(x)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_statistics_equal_the_scorer_on_expanded_files(seed: int) -> None:
    rng = np.random.default_rng(seed)
    files = _files(rng)
    units = patch_pair_units({p: files[p] for p in POS}, {n: files[n] for n in NEG})
    counts_rows = [{name: rng.choice([0, 1, 1, 2, 3], size=d.size) for name, d in files.items()} for _ in range(6)]
    counts_rows.append({name: np.ones(d.size, dtype=int) for name, d in files.items()})
    for actual, counts in zip(_actual(units, counts_rows), counts_rows):
        assert_metrics_close(actual, _expected(files, counts), same_keys=True)


def test_all_ones_are_the_grid_and_row_order_does_not_matter() -> None:
    rng = np.random.default_rng(7)
    files = _files(rng, inf=False)
    grid = patch_pair_grid({p: files[p] for p in POS}, {n: files[n] for n in NEG})
    units = patch_pair_units({p: files[p] for p in POS}, {n: files[n] for n in NEG})
    assert list(units) == [*grid, "mean"]
    for variant, m in grid.items():
        u = units[variant]
        ones = evaluate(u, np.ones((1, len(u)), dtype=np.int32))
        assert ones["roc_auc"][0] == pytest.approx(m.roc.auc, abs=1e-12)
        assert ones["pr_ap"][0] == pytest.approx(m.pr.ap, abs=1e-12)
        shuffled = u.take(rng.permutation(len(u)))  # what align() does to a second run
        w = rng.integers(0, 4, size=(3, len(u)))
        perm_w = w[:, [list(u.ids).index(i) for i in shuffled.ids]]
        for metric in ("roc_auc", "pr_ap"):
            np.testing.assert_allclose(evaluate(shuffled, perm_w)[metric], evaluate(u, w)[metric], atol=1e-12)
    mean = units["mean"]
    assert evaluate(mean, np.ones((1, len(mean)), dtype=np.int32))["mean_pr_ap"][0] == pytest.approx(mean_pr_ap(grid))
    back = units_from_bytes(mean.to_parquet_bytes())  # what the runner writes and compare reads
    w = rng.integers(0, 3, size=(4, len(mean)))
    np.testing.assert_allclose(evaluate(back, w)["mean_pr_ap"], evaluate(mean, w)["mean_pr_ap"], atol=1e-12)


def test_twenty_percent_boundary_moves_with_the_draws() -> None:
    """Ten positives at 1.0 ... 10.0 in file order: 10 // 5 = 2 enter the imbalanced protocol. Under
    draws, the first (draws of all positives) // 5 copies of the expanded file do: drawn (3, 0, 1, 1...)
    (11 in all) pair 1 keeps 2 of its 3 copies; (0, 0, 4, 1...) pair 3 keeps 2 of 4, pairs 1 and 2
    being left out; (1, 3, 0...) keeps none (4 // 5 = 0: AP 0); 3 copies each keep pairs 1 and 2."""
    pos = np.arange(1.0, 11.0)
    neg = np.array([1.5, 2.0, 5.0, 0.5])  # 2.0 ties with positive 2: the negative goes first
    units = patch_pair_units({"easy": pos}, {"diffseq": neg})["easy_diffseq"]
    cases = [np.r_[[3, 0, 1], np.ones(7, int)], np.r_[[0, 0, 4], np.ones(7, int)], np.r_[[1, 3], np.zeros(8, int)],
             np.r_[[2, 2, 2, 2, 2], np.zeros(5, int)], np.ones(10, int) * 3]
    for pos_counts in cases:
        for neg_counts in (np.ones(4, int), np.array([0, 2, 1, 3])):
            expected = patch_pair_metrics(np.repeat(pos, pos_counts), np.repeat(neg, neg_counts))
            got = evaluate(units, np.concatenate([pos_counts, neg_counts])[None, :])
            assert got["pr_ap"][0] == pytest.approx(expected.pr.ap, abs=TOL)
            assert got["roc_auc"][0] == pytest.approx(expected.roc.auc, abs=TOL)


def test_fewer_than_five_positives_give_pr_ap_zero_and_no_positive_is_nan() -> None:
    units = patch_pair_units({"easy": [0.1, 0.2, 0.3]}, {"diffseq": [1.0, 2.0]})["easy_diffseq"]
    got = evaluate(units, np.array([[1, 1, 1, 1, 1], [0, 0, 0, 1, 1], [1, 1, 1, 0, 0], [2, 1, 2, 1, 0]]))
    assert got["pr_ap"][0] == 0.0 and patch_pair_metrics([0.1, 0.2, 0.3], [1.0, 2.0]).pr.ap == 0.0
    assert np.isnan(got["pr_ap"][1]) and np.isnan(got["roc_auc"][1]) and np.isnan(got["roc_auc"][2])
    assert got["pr_ap"][3] == pytest.approx(patch_pair_metrics([0.1] * 2 + [0.2] + [0.3] * 2, [1.0]).pr.ap, abs=TOL)


def _clustered(seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Four files over 5 sequences, each sequence with pairs in every file (no NaN replicate)."""
    rng = np.random.default_rng(seed)
    files, clusters = {}, {}
    for name in (*POS, *NEG):
        n = 15
        seq = np.repeat(np.arange(5), 3)
        rng.shuffle(seq)
        shift = 0.0 if name in POS else 0.8
        files[name] = np.round(rng.normal(1.0 + shift, 0.5, n) + 0.2 * seq, 1)  # rounded: ties
        clusters[name] = np.char.add("seq", seq.astype(str))
    return files, clusters


@pytest.mark.parametrize("variant", ["easy_sameseq", "mean"])
def test_clustered_intervals_equal_scipy_bootstrap(variant: str) -> None:
    files, clusters = _clustered(3)
    units = patch_pair_units({p: files[p] for p in POS}, {n: files[n] for n in NEG}, clusters=clusters)[variant]
    resamples, seed = 200, 11
    cluster, n_clusters = units.cluster_index()
    assert n_clusters == np.unique(units.clusters).size == 5
    sets = [i.split(":")[0] for i in units.ids]
    lines = [int(i.split(":")[1]) - 1 for i in units.ids]

    def statistic(drawn: np.ndarray, metric: str) -> float:
        """The scorer on the pairs of the drawn sequences, each pair as often as its sequence was drawn."""
        per_cluster = np.bincount(drawn, minlength=n_clusters)
        counts = {name: np.zeros(files[name].size, int) for name in files}
        for row, (name, line) in enumerate(zip(sets, lines)):
            counts[name][line] = per_cluster[cluster[row]]
        return _expected(files, counts)[f"{variant}.{metric}"]

    found = intervals(units, Resampling(resamples, seed))
    for metric in units.metrics:
        res = bootstrap((np.arange(n_clusters),), lambda d, m=metric: statistic(d, m), method="percentile",
                        n_resamples=resamples, batch=None, vectorized=False, rng=np.random.default_rng(seed),
                        confidence_level=expanded_confidence(0.95, n_clusters))  # the 5 sequences drawn
        assert found[metric].low == pytest.approx(res.confidence_interval.low, abs=1e-9)
        assert found[metric].high == pytest.approx(res.confidence_interval.high, abs=1e-9)
        assert found[metric].low < found[metric].high


def test_sequence_rule() -> None:
    assert sequence_of("i_ajuntament/ref_0001") == "i_ajuntament"
    assert sequence_of("seq01_p003_ref") == "seq01"
    assert sequence_of("lonely") == "lonely"
    assert sequence_of("v_bird-e3-17", r"^([iv]_[a-z]+)") == "v_bird"
    assert pair_sequences(["seq01_p003_ref", "seq01_p004_ref", "x/y"]) == ["seq01", "seq01", "x"]


def test_adapter_units_align_with_records(tmp_path: Path) -> None:
    info = generate_patch_pairs(tmp_path, patches=16, sequences=4, size=8, seed=1)
    bench = load_patch_pairs(tmp_path)
    ids = np.array(bench.image_sets()["patches"].ids)
    features = FeatureSet(ids, np.random.default_rng(0).normal(size=(ids.size, 6)).astype(np.float32))
    result = bench.evaluate({"patches": features}, EvalSettings())
    for figure in result.figures.values():
        close(figure)
    assert info["sequences"] == 4 and len(result.units) == len(result.records)
    for record, units in zip(result.records, result.units):
        assert units is not None and units.kind == "pair" and units.variant == record["variant"]
        assert set(units.metrics) <= set(record) and units.metrics
        assert np.unique(units.ids).size == len(units)
        assert sorted(np.unique(units.clusters)) == ["seq00", "seq01", "seq02", "seq03"]
        ones = evaluate(units, np.ones((1, len(units)), dtype=np.int32))
        for metric, value in ones.items():
            assert value[0] == pytest.approx(record[metric], abs=1e-12)
    easy = {r["variant"]: u for r, u in zip(result.records, result.units)}["easy_diffseq"]
    assert len(easy) == 32 and set(easy.values("label")) == {0.0, 1.0}
