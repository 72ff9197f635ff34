"""Parity: vsbench's patch-pair curves against hpatches-benchmark's own ``utils/metrics.py`` and the
protocol of its ``eval_verification`` (tests/originals/hpatches_metrics.py, BSD 2-clause).

Randomized distances with ties (coarse values), equal-length positive and negative files (as
HPatches generates them), and infinite distances, which upstream treats as never retrieved.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.originals import hpatches_metrics
from vsbench.benchmarks.patch_pairs.metrics import patch_pair_metrics

TOL = 1e-9


@pytest.fixture(autouse=True)
def _numpy_trapz(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream calls np.trapz, which numpy 2.4 removed; np.trapezoid is the same function."""
    monkeypatch.setattr(np, "trapz", np.trapezoid, raising=False)


def upstream(d_pos: np.ndarray, d_neg: np.ndarray) -> tuple[float, float]:
    """hpatches tasks.py eval_verification for one (positives, negatives) pair: balanced ROC AUC, imbalanced AP."""
    d_pos, d_neg = d_pos[:, None], d_neg[:, None]
    labels = np.vstack((np.zeros_like(d_pos), np.ones_like(d_pos)))
    stacked = np.vstack((d_neg, d_pos))
    _, _, auc = hpatches_metrics.roc(-stacked, labels)
    n_imb = d_pos.shape[0] + int(d_pos.shape[0] * 0.2)
    _, _, ap = hpatches_metrics.pr(-stacked[0:n_imb], labels[0:n_imb])
    return float(auc), float(ap)


@pytest.mark.parametrize("seed", range(40))
def test_patch_pairs_equal_hpatches(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 400))
    scale = rng.choice([0.1, 1.0])  # coarse rounding below makes many ties
    d_pos = np.round(rng.gamma(2.0, 1.0, n) / scale) * scale
    d_neg = np.round(rng.gamma(3.0, 1.0, n) / scale) * scale
    if seed % 4 == 0:  # some pairs never retrieved
        d_pos[rng.choice(n, max(1, n // 10))] = np.inf
        d_neg[rng.choice(n, max(1, n // 10))] = np.inf
    m = patch_pair_metrics(d_pos, d_neg)
    auc, ap = upstream(d_pos, d_neg)
    assert m.roc.auc == pytest.approx(auc, abs=TOL)
    assert m.pr.ap == pytest.approx(ap, abs=TOL)
