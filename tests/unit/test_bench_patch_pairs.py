"""The patch_pairs adapter on hand-made layouts: pairs files -> distances -> .results -> metrics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.patch_pairs.adapter import curve_figures, load_patch_pairs
from vsbench.benchmarks.patch_pairs.metrics import patch_pair_grid
from vsbench.benchmarks.patch_pairs.readers import read_hpatches_results
from vsbench.io.features import FeatureError, FeatureSet
from vsbench.io.inputs import InputError
from vsbench.io.storage import UnsafePathError
from vsbench.reporting.plots import close

FILES = ("pos_easy", "pos_hard", "neg_diffseq", "neg_sameseq")


def _layout(root: Path, distances: dict[str, list[float]]) -> FeatureSet:
    """Pairs files whose pair i in file f is (f_i_a, f_i_b) with 1-D descriptors ``distance`` apart."""
    ids, values = [], []
    for infix, ds in distances.items():
        label = 1 if infix.startswith("pos") else 0
        lines = []
        for i, d in enumerate(ds):
            a, b = f"{infix}_{i}_a", f"{infix}_{i}_b"
            lines.append(f"{a},{b},{label}\n")
            ids += [a, b]
            values += [[0.0], [d]]
        (root / f"test_{infix}.pairs").write_text("".join(lines))
    return FeatureSet(np.array(ids), np.array(values, dtype=np.float32))


def _records(result) -> dict[str, dict]:
    for figure in result.figures.values():
        close(figure)
    return {r["variant"]: r for r in result.records}


def test_perfect_descriptor_scores_one_everywhere(tmp_path: Path) -> None:
    features = _layout(tmp_path, {"pos_easy": [0.1] * 5, "pos_hard": [0.2] * 5, "neg_diffseq": [1.0, 2.0],
                                  "neg_sameseq": [0.5, 0.6]})
    bench = load_patch_pairs(tmp_path)
    assert set(bench.image_sets()["patches"].ids) == set(features.ids.tolist())
    assert bench.image_sets()["patches"].paths[0] == tmp_path / "patches" / "pos_easy_0_a.png"
    records = _records(bench.evaluate({"patches": features}, EvalSettings()))
    assert list(records) == ["easy_diffseq", "easy_sameseq", "hard_diffseq", "hard_sameseq", "mean"]
    for variant in ("easy_diffseq", "easy_sameseq", "hard_diffseq", "hard_sameseq"):
        assert records[variant]["roc_auc"] == 1.0 and records[variant]["pr_ap"] == pytest.approx(1.0)
        assert records[variant]["num_imbalanced_positives"] == 1
    assert records["mean"] == {"variant": "mean", "distance": "l2", "mean_pr_ap": pytest.approx(1.0)}


def test_tie_puts_the_negative_first(tmp_path: Path) -> None:
    # easy vs sameseq, ranked by distance: N(1.0) first on the tie, then 5 P(1.0), then N(2.0):
    # tpr stays 0 while fpr goes to 0.5, then rises to 1 at fpr 0.5 -> AUC = 0.5 * 1 = 0.5.
    features = _layout(tmp_path, {"pos_easy": [1.0] * 5, "pos_hard": [0.1] * 5, "neg_diffseq": [3.0, 4.0],
                                  "neg_sameseq": [1.0, 2.0]})
    records = _records(load_patch_pairs(tmp_path).evaluate({"patches": features}, EvalSettings()))
    assert records["easy_sameseq"]["roc_auc"] == pytest.approx(0.5)
    assert records["easy_diffseq"]["roc_auc"] == 1.0


def test_results_files_round_trip_and_rescore(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    distances = {infix: rng.uniform(0, 2, 10).tolist() for infix in FILES}
    features = _layout(tmp_path, distances)
    bench = load_patch_pairs(tmp_path, results_dir="results", descriptor="mine")
    records = _records(bench.evaluate({"patches": features}, EvalSettings()))
    folder = tmp_path / "results" / "classification" / "mine"
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"test_{i}.results" for i in FILES)
    read = {infix: read_hpatches_results(folder / f"test_{infix}.results", int(infix.startswith("pos")))
            for infix in FILES}
    for infix in FILES:  # float32 descriptors, float64 distances, written exactly
        np.testing.assert_array_equal(read[infix], np.float32(distances[infix]).astype(np.float64))
    grid = patch_pair_grid({"easy": read["pos_easy"], "hard": read["pos_hard"]},
                           {"diffseq": read["neg_diffseq"], "sameseq": read["neg_sameseq"]})
    for variant, metrics in grid.items():
        assert records[variant]["roc_auc"] == metrics.roc.auc and records[variant]["pr_ap"] == metrics.pr.ap


def test_l1_and_l2(tmp_path: Path) -> None:
    for infix in FILES:
        (tmp_path / f"test_{infix}.pairs").write_text(f"x,y,{int(infix.startswith('pos'))}\n")
    features = FeatureSet(np.array(["x", "y"]), np.array([[0, 0], [3, 4]], dtype=np.float32))
    for distance, expected in (("l2", 5.0), ("l1", 7.0)):
        bench = load_patch_pairs(tmp_path, distance=distance)
        assert [r.distances.tolist() for r in bench.distances(features)] == [[expected]] * 4
    with pytest.raises(ValueError, match="distance must be"):
        load_patch_pairs(tmp_path, distance="cosine")


def test_bad_pairs_files_name_file_and_line(tmp_path: Path) -> None:
    _layout(tmp_path, {infix: [1.0, 2.0] for infix in FILES})
    (tmp_path / "test_pos_hard.pairs").write_text("a,b,1\nc,d,0\n")
    with pytest.raises(InputError, match=r"test_pos_hard.pairs:2: label '0' in a positives file"):
        load_patch_pairs(tmp_path)
    (tmp_path / "test_pos_hard.pairs").write_text("a,b\n")
    with pytest.raises(InputError, match=r"test_pos_hard.pairs:1: expected 3 fields"):
        load_patch_pairs(tmp_path)
    (tmp_path / "test_pos_hard.pairs").unlink()
    with pytest.raises(InputError, match="test_pos_hard.pairs: file not found"):
        load_patch_pairs(tmp_path)


def test_patch_ids_cannot_leave_the_patches_folder(tmp_path: Path) -> None:
    _layout(tmp_path, {infix: [1.0] for infix in FILES})
    (tmp_path / "test_neg_sameseq.pairs").write_text("../../etc/passwd,b,0\n")
    with pytest.raises(UnsafePathError):
        load_patch_pairs(tmp_path)


def test_missing_or_non_finite_descriptors(tmp_path: Path) -> None:
    features = _layout(tmp_path, {infix: [1.0] for infix in FILES})
    bench = load_patch_pairs(tmp_path)
    with pytest.raises(FeatureError, match="no features"):
        bench.evaluate({"patches": FeatureSet(features.ids[1:], features.features[1:])}, EvalSettings())
    bad = features.features.copy()
    bad[0, 0] = np.nan
    with pytest.raises(FeatureError, match="NaN"):
        bench.evaluate({"patches": FeatureSet(features.ids, bad)}, EvalSettings())


def test_curve_figures_draw_every_variant(tmp_path: Path) -> None:
    grid = patch_pair_grid({"easy": [0.1, 0.2]}, {"diffseq": [0.3], "sameseq": [0.15]})
    figures = curve_figures(grid)
    assert set(figures) == {"patch_pairs_roc.png", "patch_pairs_pr.png"}
    assert len(figures["patch_pairs_roc.png"].axes[0].lines) == 3  # two variants and the chance diagonal
    for figure in figures.values():
        close(figure)
