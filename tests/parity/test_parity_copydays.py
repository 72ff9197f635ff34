"""Parity: vsbench's Copydays numbers against SSCD's own ``copydays_eval.evaluate`` and ``Copydays``.

A full-size synthetic Copydays layout (157 originals, 229 strong, 18 other blocks of 157, empty
.jpg files: only the names matter to scoring) with quantized descriptors, so that distances tie
inside result lists and across queries; both sides search with FAISS and must agree to 1e-9,
including SSCD's unstable-sort ``overall_uAP`` on this machine's numpy.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

from tests.originals.sscd_copydays import Copydays
from tests.originals.sscd_copydays_eval import evaluate as sscd_evaluate
from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.copydays.adapter import BLOCKS, load_copydays
from vsbench.io.features import FeatureSet

TOL = 1e-9
N_ORIGINALS, N_STRONG = 157, 229


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], list[str]]:
    """Copydays' real naming scheme: strong attacks share a 4-character prefix with 1 or 2 originals."""
    root = tmp_path_factory.mktemp("copydays")
    originals = [f"{1000 + i // 2}{i % 2:02d}.jpg" for i in range(N_ORIGINALS)]
    strong = [f"{1000 + j % 79}{50 + j // 79:02d}.jpg" for j in range(N_STRONG)]
    for block in BLOCKS:
        (root / block).mkdir(parents=True)
        for name in strong if block == "strong" else originals:
            (root / block / name).touch()
    distractors = [f"d{i:04d}.jpg" for i in range(300)]
    (root / "distractors").mkdir()
    for name in distractors:
        (root / "distractors" / name).touch()
    return root, originals, distractors


def _descriptors(seed: int, originals: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(every Copydays image in SSCD's order, distractors, training); coarse values give exact ties."""
    rng = np.random.default_rng(seed)
    dim = 6
    base = rng.integers(-3, 4, size=(N_ORIGINALS, dim)).astype(np.float32)
    strong_of = np.array([next(i for i, o in enumerate(originals) if o[:4] == f"{1000 + j % 79}") for j in range(N_STRONG)])
    blocks = [base, base[strong_of] + rng.integers(-2, 3, size=(N_STRONG, dim))]
    blocks += [base + rng.integers(-1, 2, size=base.shape) * rng.integers(0, 2) for _ in BLOCKS[2:]]
    copies = np.concatenate(blocks).astype(np.float32)
    copies[rng.choice(len(copies), 200)] = copies[rng.choice(len(copies), 200)]  # duplicate descriptors
    distractors = rng.integers(-3, 4, size=(300, dim)).astype(np.float32)
    train = rng.standard_normal((300, dim)).astype(np.float32)
    return copies, distractors, train


@pytest.mark.parametrize(("seed", "codec"), [(0, "Flat"), (1, "Flat"), (2, "PCA4,L2norm,Flat")])
def test_copydays_equals_sscd(layout, seed: int, codec: str) -> None:
    root, originals, _ = layout
    copies, distractors, train = _descriptors(seed, originals)
    bench = load_copydays(root, distractors=root / "distractors", codec_train=root / "distractors", k=100)
    sets = bench.image_sets()
    features = {"query": FeatureSet(np.asarray(sets["query"].ids), copies),
                "distractors": FeatureSet(np.asarray(sets["distractors"].ids), distractors),
                "train": FeatureSet(np.asarray(sets["train"].ids), train)}  # 300 codec-training rows
    with contextlib.redirect_stdout(io.StringIO()):  # SSCD prints each block's mAP
        original = sscd_evaluate(copies, distractors, train, Copydays(str(root)), codec, k=100)
    (record,) = bench.evaluate(features, EvalSettings(codecs=codec, use_gpu=False)).records
    assert record["strong_map"] == pytest.approx(original["strong_mAP"], abs=TOL)
    assert record["overall_uap"] == pytest.approx(original["overall_uAP"], abs=TOL)
    for name in ("strong_map", "overall_uap"):
        low, high = record.get(f"{name}_worst", record[name]), record.get(f"{name}_best", record[name])
        assert low - TOL <= record[name] <= high + TOL
    if codec == "Flat":  # integer descriptors: exact distances, so they tie on every CPU and BLAS
        assert "overall_uap_best" in record  # the quantized descriptors do tie across queries
