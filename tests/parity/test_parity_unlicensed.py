"""Parity against the originals that carry no license: VSD (vsd-benchmark/vsd) and ABID
(silverbottlep/abid_challenge).

Their code cannot be copied into this repository, so these tests run it from a checkout named by
``VSBENCH_ORIGINALS``, a folder holding::

    vsd/evaluation/metrics.py                       vsd-benchmark/vsd @ c08e8d95b4c5b40005dcb15d7428d375a12a8b3a
    abid_challenge/counting/evaluate.py             silverbottlep/abid_challenge @ 44bf087056f830cb7097ff925a3bce877accd842
    abid_challenge/verification_siamese/evaluate.py (same commit)

Without it they are skipped (and say so); with it they must agree to 1e-9.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import runpy
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from vsbench.abid.metrics import counting_metrics, verification_metrics
from vsbench.abid.readers import read_abid_result
from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.vsd.adapter import load_vsd
from vsbench.io.features import FeatureSet


def originals_root(value: str | None) -> Path | None:
    """The folder ``VSBENCH_ORIGINALS`` names, or None when it is unset or empty: ``VSBENCH_ORIGINALS=``
    (set but empty, as a CI template leaves it) means no checkout, not the current folder (``Path("")``
    is ``.``, a folder, and the tests would run against it and fail)."""
    return Path(value) if value and value.strip() else None


ORIGINALS = originals_root(os.environ.get("VSBENCH_ORIGINALS")) or Path("/nonexistent")
needs_originals = pytest.mark.skipif(not ORIGINALS.is_dir(), reason="VSBENCH_ORIGINALS names no checkout of the "
                                     "unlicensed originals (see this module's docstring)")
TOL = 1e-9


def _vsd_module() -> types.ModuleType:
    sys.modules.setdefault("fsutil", types.SimpleNamespace(read_file_json=lambda p: json.loads(Path(p).read_text())))
    spec = importlib.util.spec_from_file_location("vsd_original_metrics", ORIGINALS / "vsd/evaluation/metrics.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _catalog(root: Path, seed: int) -> tuple[list[str], np.ndarray, list[dict]]:
    """400 images of ~150 products, coarse features (exact ties) with duplicates; 40 seeds x 6 tags."""
    rng = np.random.default_rng(seed)
    n = 400
    paths = [f"img/{i:04d}.jpg" for i in range(n)]
    products = np.sort(rng.integers(0, 150, n))
    # Signs on 1 or 4 of 5 components: norms 1 or 2, so every normalized row and every cosine is exact
    # in float32 and ties hold whatever order a kernel sums in (AVX2, AVX-512, another BLAS).
    features = rng.choice([-1.0, 1.0], size=(n, 5)).astype(np.float32)
    one_hot = rng.random(n) < 0.5
    features[one_hot] *= np.eye(5, dtype=np.float32)[rng.integers(0, 5, one_hot.sum())]
    features[~one_hot, rng.integers(0, 5, (~one_hot).sum())] = 0.0
    features[rng.choice(n, 60)] = features[rng.choice(n, 60)]
    metadata = {"images": [{"id": f"P{p}", "path": path, "phase": "train"} for path, p in zip(paths, products)]}
    (root / "metadata.json").write_text(json.dumps(metadata))
    tags = []
    for s in rng.choice(n, 40, replace=False):
        near = np.argsort(-(features @ features[s]))[:30]
        for c in rng.choice([c for c in near if c != s], 6, replace=False):
            tags.append({"key": [paths[s], paths[c]], "value": int(rng.random() < 0.5)})
    (root / "tags.json").write_text(json.dumps(tags))
    return paths, features, tags


@needs_originals
@pytest.mark.parametrize("seed", range(3))
def test_vsd_closed_catalog_equals_upstream(tmp_path: Path, seed: int) -> None:
    paths, features, tags = _catalog(tmp_path, seed)
    module = _vsd_module()
    calculator = module.GT_ImageBasedRetrievalAccuracyCalculator(str(tmp_path / "tags.json"), [5, 9], [5, 9], "cpu")
    metadata = types.SimpleNamespace(metadata_file=str(tmp_path / "metadata.json"))
    loader = [(paths, torch.from_numpy(features), None)]
    with contextlib.redirect_stdout(io.StringIO()):
        hr, mrr_k, _, roc, pr = calculator.calc(torch.nn.Identity(), metadata, loader, None, verbose=False)
    ours = load_vsd(tmp_path, protocol="closed", tags="tags.json")
    (record,) = ours.evaluate({"images": FeatureSet(np.asarray(paths), features)}, EvalSettings()).records
    for k in (5, 9):
        assert record[f"hr_at_{k}"] == pytest.approx(hr[k]["mean"], abs=TOL)
        assert record[f"mrr_at_{k}"] == pytest.approx(mrr_k[k]["mean"], abs=TOL)
    assert record["roc_auc"] == pytest.approx(roc, abs=TOL) and record["pr_auc"] == pytest.approx(pr, abs=TOL)
    assert any(key.endswith("_best") for key in record)  # the coarse features do tie


def _run_script(folder: Path, script: Path, result_name: str, lines: list[str], truth: list) -> str:
    """Run a challenge script as its README says: from its folder, ground truth in ../dataset/."""
    work = folder / "work"
    (folder / "dataset").mkdir(parents=True, exist_ok=True)
    work.mkdir(exist_ok=True)
    (folder / "dataset" / ("counting_val.json" if "counting" in result_name else "obj_verification_val.json")
     ).write_text(json.dumps(truth))
    (work / result_name).write_text("".join(f"{line}\n" for line in lines))
    out = io.StringIO()
    cwd = os.getcwd()
    try:
        os.chdir(work)
        with contextlib.redirect_stdout(out), np.errstate(all="ignore"):
            runpy.run_path(str(script))
    finally:
        os.chdir(cwd)
    return out.getvalue()


@needs_originals
@pytest.mark.parametrize("seed", range(5))
def test_abid_scorers_equal_the_challenge_scripts(tmp_path: Path, seed: int) -> None:
    """Answers out of range, negative counts and short result files: scored as the scripts score them."""
    rng = np.random.default_rng(seed)
    truth = [[i, int(q)] for i, q in enumerate(rng.integers(0, 6, 60))]
    preds = [str(int(v)) for v in rng.integers(-2, 9, int(rng.integers(30, 61)))]
    printed = _run_script(tmp_path / "c", ORIGINALS / "abid_challenge/counting/evaluate.py", "counting_result.txt",
                          preds, truth).split("\n")
    accuracy, rmse = float(printed[1].split("(")[1].rstrip(")")), float(printed[3])
    result = read_abid_result(tmp_path / "c/work/counting_result.txt", len(truth), "gt", binary=False)
    m = counting_metrics(result.values, np.array([q for _, q in truth])[: result.values.size], 6)
    assert m.accuracy == pytest.approx(accuracy, abs=1e-6)  # the script prints %f
    assert m.rmse == pytest.approx(rmse, abs=TOL)

    vtruth = [[i, "A", int(v), []] for i, v in enumerate(rng.integers(0, 2, 60))]
    vpreds = [str(int(v)) for v in rng.integers(0, 3, int(rng.integers(30, 61)))]
    printed = _run_script(tmp_path / "v", ORIGINALS / "abid_challenge/verification_siamese/evaluate.py",
                          "obj_verification_result.txt", vpreds, vtruth).split("\n")
    result = read_abid_result(tmp_path / "v/work/obj_verification_result.txt", len(vtruth), "gt", binary=True)
    v = verification_metrics(result.values, np.array([e[2] for e in vtruth])[: result.values.size])
    assert v.accuracy == pytest.approx(float(printed[1].split("(")[1].rstrip(")")), abs=1e-6)
    assert v.accuracy * v.num_examples == pytest.approx(int(printed[1].split("/")[0]))  # exact count of correct


@needs_originals
@pytest.mark.parametrize("answer", [20_000, 10**9, 3_037_000_499, -3_037_000_000])
def test_abid_counting_equals_the_challenge_script_on_huge_answers(tmp_path: Path, answer: int) -> None:
    """Answers far outside the classes (issue 28): the script's number, from tables of 6 classes; up to
    |pred - gt| = 3,037,000,499 its int64 square is exact (past it, it wraps: see docs/fidelity.md)."""
    truth = [[0, 1], [1, 2], [2, 0], [3, 5]]
    preds = ["1", str(answer), "0", "4"]
    printed = _run_script(tmp_path, ORIGINALS / "abid_challenge/counting/evaluate.py", "counting_result.txt",
                          preds, truth).split("\n")
    result = read_abid_result(tmp_path / "work/counting_result.txt", len(truth), "gt", binary=False)
    m = counting_metrics(result.values, np.array([q for _, q in truth]))
    assert m.accuracy == pytest.approx(float(printed[1].split("(")[1].rstrip(")")), abs=1e-6)
    assert m.rmse == pytest.approx(float(printed[3]), rel=1e-12)
    assert m.per_class_count.size == 6 and m.confusion_matrix.shape == (6, 6)
