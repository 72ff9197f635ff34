"""The groups units were drawn in (issue 55, "clustered units").

Copies of one photo are one draw of that photo, not independent queries: a copy-detection query's
group is the reference it copies (queries sharing a reference are one group), a Copydays image's is
its original, a patch pair's its sequence (tests/unit/test_units_patch_pairs.py). The bootstrap draws
groups whole (tests/unit/test_units_copy_detection.py checks it against scipy drawing the groups), the
paired permutation test swaps groups whole, and a right/wrong mean on grouped units is tested by that
permutation, not by McNemar's exact test, whose binomial counts every unit as an independent draw.
"""

from __future__ import annotations

import io
import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from vsbench.benchmarks.disc import readers as disc_readers
from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.stats.compare import compare, paired_clusters, replicates
from vsbench.stats.resample import Resampling
from vsbench.stats.units import Units, groups_of, units_from_bytes


def test_units_linked_through_a_source_are_one_group_named_by_its_smallest_source() -> None:
    ids = ["q0", "q1", "q2", "q3", "q4", "q5"]
    # q0, q1 copy b; q2 copies a and c; q3 copies c: q2 and q3 are one group; q4, q5 copy nothing
    labels = groups_of(6, [0, 1, 2, 2, 3], ["b", "b", "a", "c", "c"], unit_ids=ids, prefix="source:")
    assert labels is not None
    assert labels.tolist() == ["source:b", "source:b", "source:a", "source:a", "unit:q4", "unit:q5"]
    # every unit alone: no groups at all, so the draws stay exactly those of an unclustered file
    assert groups_of(3, [0, 1, 2], ["a", "b", "c"]) is None
    assert groups_of(3, [], []) is None
    with pytest.raises(ValueError, match="outside"):
        groups_of(2, [0, 2], ["a", "b"])


def _copies() -> tuple[list, list, list, list, list]:
    """q0..q2 copy r0 (three edits of one photo), q3 and q4 copy r1, q5 copies r2, q6 has no copy."""
    rng = np.random.default_rng(5)
    source = {"q0": "r0", "q1": "r0", "q2": "r0", "q3": "r1", "q4": "r1", "q5": "r2", "q6": ""}
    pq_, pr, ps = [], [], []
    for query in source:
        for reference in ("r0", "r1", "r2", "r3"):
            pq_.append(query)
            pr.append(reference)
            ps.append(float(rng.random()))
    return pq_, pr, ps, list(source), list(source.values())


def test_copies_of_one_reference_are_one_group_and_the_file_keeps_it() -> None:
    units = copy_detection_units(*_copies())
    groups = dict(zip(units.ids.tolist(), np.asarray(units.clusters).tolist()))
    assert groups == {"q0": "source:r0", "q1": "source:r0", "q2": "source:r0", "q3": "source:r1",
                      "q4": "source:r1", "q5": "source:r2", "q6": "unit:q6"}
    back = units_from_bytes(units.to_parquet_bytes())
    assert back.clusters is not None and back.clusters.tolist() == np.asarray(units.clusters).tolist()
    assert back.cluster_index()[1] == 4
    resampling = Resampling(100, 1)
    for metric, values in replicates(back, resampling).items():
        np.testing.assert_array_equal(values, replicates(units, resampling)[metric])


def test_a_unit_file_without_groups_still_reads_and_draws_its_units_one_by_one() -> None:
    units = copy_detection_units(*_copies())
    table = pq.read_table(io.BytesIO(units.to_parquet_bytes()))
    sink = io.BytesIO()
    pq.write_table(table.drop_columns(["cluster"]), sink)  # a file written before groups were declared
    old = units_from_bytes(sink.getvalue())
    assert old.clusters is None and old.cluster_index()[1] == len(units) == 7
    resampling = Resampling(100, 1)
    flat = replicates(replace(units, clusters=None), resampling)
    for metric, values in replicates(old, resampling).items():
        np.testing.assert_array_equal(values, flat[metric])


def test_a_generated_set_groups_each_copy_with_its_source(tmp_path: Path) -> None:
    """generate_disc draws 6 copies of 3 references (each used twice) and 4 queries without a copy;
    read from its files (the readers' Arrow ids), the copies make 3 groups of 2."""
    made = generate_disc(tmp_path, references=3, queries=10, train=1, copy_fraction=0.6, seed=2)
    truth = disc_readers.read_copy_detection_ground_truth(made["ground_truth"])
    rows = [line.split(",") for line in Path(made["ground_truth"]).read_text().splitlines()[1:]]
    pq_ = [q for q, _ in rows for _ in range(2)]
    pr = [r for _, r in rows for r in ("R000000", "R000001")]
    (tmp_path / "predictions.csv").write_text("query_id,reference_id,score\n" + "".join(
        f"{q},{r},{0.5 + n / 100}\n" for n, (q, r) in enumerate(zip(pq_, pr))))
    preds = disc_readers.read_copy_detection_predictions(tmp_path / "predictions.csv")
    units = copy_detection_units(preds.query_ids, preds.reference_ids, preds.scores, truth.query_ids,
                                 truth.reference_ids, queries=truth.listed_queries)
    source = dict(rows)
    expected = {q: f"source:{r}" if r else f"unit:{q}" for q, r in source.items()}
    assert dict(zip(units.ids.tolist(), np.asarray(units.clusters).tolist())) == expected
    assert sorted(np.unique([r for r in source.values() if r], return_counts=True)[1].tolist()) == [2, 2, 2]


def _right_or_wrong(seed: int, groups: int = 8, size: int = 5) -> tuple[Units, Units]:
    """Two runs' right/wrong answers on ``groups`` groups of ``size`` questions."""
    rng = np.random.default_rng(seed)
    n = groups * size
    ids = np.array([f"q{i:02d}" for i in range(n)])
    clusters = np.array([f"photo{i // size}" for i in range(n)])
    spec = {"accuracy": {"statistic": "ratio", "num": "correct"}}
    first = Units("query", "disc", ids, {"correct": rng.integers(0, 2, n).astype(np.float64)}, spec, clusters)
    second = Units("query", "disc", ids, {"correct": rng.integers(0, 2, n).astype(np.float64)}, spec, clusters)
    return first, second


def _swap_p(first: Units, second: Units) -> float:
    """The exact paired permutation p of a mean, written out: each group's summed difference keeps or
    flips its sign, all 2**groups ways, two-sided (scipy's rule: each tail's share, doubled)."""
    cluster, groups = first.cluster_index()
    d = np.bincount(cluster, weights=second.values("correct") - first.values("correct"), minlength=groups)
    observed = d.sum()
    totals = np.array([np.dot(signs, d) for signs in itertools.product((1, -1), repeat=groups)])
    return float(min(1.0, 2 * min(np.mean(totals <= observed + 1e-9), np.mean(totals >= observed - 1e-9))))


def test_a_right_or_wrong_mean_on_grouped_units_swaps_whole_groups_not_mcnemar() -> None:
    first, second = _right_or_wrong(4)
    found = compare(first, second, Resampling(200, 0))["accuracy"]
    assert found.paired and found.mcnemar is None
    assert "exact paired permutation test (256 swaps of 8 groups, each swapped whole)" in found.test
    assert "not McNemar's exact test" in found.test
    assert found.p_value == pytest.approx(_swap_p(first, second), abs=1e-12)
    # the same answers counted as 40 independent questions: McNemar, as before
    flat = compare(replace(first, clusters=None), replace(second, clusters=None), Resampling(200, 0))["accuracy"]
    assert flat.mcnemar is not None and flat.test.startswith("exact McNemar test")
    assert flat.p_value != pytest.approx(found.p_value, abs=1e-3)


def test_a_ranking_statistic_of_grouped_queries_says_its_groups_are_drawn_whole() -> None:
    units = copy_detection_units(*_copies())
    found = compare(units, units, Resampling(100, 0))["uap"]
    assert found.test.startswith("paired bootstrap of the difference (100 resamples, seed 0, drawing 4 groups whole;")


def test_a_pair_draws_the_groups_either_run_declares() -> None:
    first, second = _right_or_wrong(6)
    old = replace(second, clusters=None)  # a unit file from before groups were declared
    assert paired_clusters(first, old).tolist() == np.asarray(first.clusters).tolist()
    assert paired_clusters(old, first).tolist() == np.asarray(first.clusters).tolist()
    assert paired_clusters(replace(first, clusters=None), old) is None
    found = compare(first, old, Resampling(200, 0))["accuracy"]
    assert found.mcnemar is None and found.p_value == pytest.approx(_swap_p(first, second), abs=1e-12)
    # two runs grouping differently: units grouped in either stay together (photo0+photo1 joined)
    other = replace(second, clusters=np.where(np.asarray(second.clusters) == "photo1", "photo0", second.clusters))
    joined = paired_clusters(first, other)
    assert joined is not None and np.unique(joined).size == 7
    assert np.unique(joined[:10]).size == 1
