"""What the statistics' contract tests share (tests/unit/test_units_*.py): a statistic's value under a
draw equals the scorer's on the expanded data to :data:`TOL`, NaN exactly where the scorer's is NaN."""

from __future__ import annotations

import numpy as np

TOL = 1e-9


def assert_metrics_close(actual: dict[str, float], expected: dict[str, float], *, same_keys: bool = False) -> None:
    if same_keys:
        assert set(actual) == set(expected)
    for key, value in expected.items():
        if np.isnan(value):
            assert np.isnan(actual[key]), key
        else:
            assert abs(actual[key] - value) <= TOL, (key, actual[key], value)
