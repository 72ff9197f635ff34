"""Fast tests for the bugs issue 56 planted that survived every fast test (the nightly's decision,
clustered unit files read back, lease renewal): pure functions of records and arrays, so a unit test
sees what only the integration tests with a real ``mlflow server`` saw before.

Each was seen failing with its bug planted (significance.py's two directions swapped, regression.py
sending a refused drop to the noise, units.py dropping the clusters when read, the lease renewed
every ttl*4).
"""

from __future__ import annotations

import math
import threading
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vsbench.io import locks
from vsbench.reporting.regression import deciding_tests, judge_drops
from vsbench.reporting.significance import (
    bad_direction,
    compare_metric,
    difference_line,
    format_interval,
    format_p,
    resampling_of,
    verdict_line,
)
from vsbench.stats.compare import Difference, replicates
from vsbench.stats.resample import Resampling
from vsbench.stats.units import Units, units_from_bytes


def _difference(low: float, high: float, p: float, point: float | None = None) -> Difference:
    point = (low + high) / 2 if point is None else point
    return Difference("accuracy", 0.5, 0.5 + point, point, low, high, p, True, "hand-built")


@pytest.mark.parametrize(("low", "high", "p", "higher_worse", "lower_worse"), [
    (-0.30, -0.10, 0.001, True, False),   # clearly down: bad when higher is better
    (0.10, 0.30, 0.001, False, True),     # clearly up: bad when lower is better
    (-0.05, 0.20, 0.01, False, False),    # the interval holds 0: no verdict of "worse", whatever p says
    (-0.20, 0.05, 0.01, False, False),
    (-0.30, -0.10, 0.20, True, False),    # the interval decides; a test on the other side is said beside it
    (0.10, 0.30, 0.20, False, True),
    (0.0, 0.30, 0.001, False, False),     # an interval ending at 0 does not exclude it
    (-0.30, 0.0, 0.001, False, False),
    (float("nan"), float("nan"), 0.001, False, False),  # no interval: no verdict
])
def test_the_nightly_calls_a_drop_worse_only_when_its_interval_excludes_0_on_the_worse_side(
        low: float, high: float, p: float, higher_worse: bool, lower_worse: bool) -> None:
    difference = _difference(low, high, p, point=-0.1)
    assert bad_direction(difference, higher_is_better=True) is higher_worse
    assert bad_direction(difference, higher_is_better=False) is lower_worse
    assert difference.distinguishable is (higher_worse or lower_worse)
    assert difference.test_disagrees is (difference.distinguishable != (p < 0.05))


class _Reader:
    """A unit-file reader whose files for ``refused`` metrics were refused (None: no difference)."""

    def __init__(self, differences: dict[str, Difference | None]) -> None:
        self.differences = differences
        self.asked: list[tuple[str, str, str]] = []

    def difference(self, before: str, now: str, metric: str) -> Difference | None:
        self.asked.append((before, now, metric))
        return self.differences[metric]


def _drop(metric: str) -> dict[str, Any]:
    return {"metric": metric, "previous": 0.9, "current": 0.5, "higher_is_better": True}


def test_a_drop_whose_unit_files_are_refused_still_fails_the_night_and_noise_is_told_apart() -> None:
    reader = _Reader({"tampered": None, "real": _difference(-0.5, -0.3, 0.001), "noise": _difference(-0.2, 0.1, 0.04)})
    runs = {name: (f"run-{name}", name) for name in ("tampered", "real", "noise")}
    tonight = {name: (f"run-{name}-2", name) for name in runs}
    kept, noise = judge_drops([_drop("tampered"), _drop("real"), _drop("noise")], runs, tonight, reader)
    assert [d["metric"] for d in kept] == ["tampered", "real"]
    assert "test" not in kept[0]  # untested: kept as the threshold said, not dressed as a test
    assert kept[1]["p_value"] == 0.001 and kept[1]["ci_high"] == -0.3
    assert [d["metric"] for d in noise] == ["noise"]
    assert reader.asked == [("run-tampered", "run-tampered-2", "tampered"), ("run-real", "run-real-2", "real"),
                            ("run-noise", "run-noise-2", "noise")]


def test_a_drop_without_unit_files_on_either_night_is_kept_untested() -> None:
    reader = _Reader({})
    kept, noise = judge_drops([_drop("accuracy")], {}, {"accuracy": ("b", "accuracy")}, reader)
    assert [d["metric"] for d in kept] == ["accuracy"] and noise == [] and reader.asked == []


def _clustered() -> Units:
    rng = np.random.default_rng(3)
    correct = rng.integers(0, 2, 40).astype(np.float64)
    return Units("query", "disc", np.array([f"q{i:02d}" for i in range(40)]), {"correct": correct},
                 {"accuracy": {"statistic": "ratio", "num": "correct"}},
                 clusters=np.array([f"photo{i // 5}" for i in range(40)]), variant="none")


def test_a_clustered_unit_file_read_back_keeps_its_clusters_and_resamples_them() -> None:
    units = _clustered()
    back = units_from_bytes(units.to_parquet_bytes())
    assert back.clusters is not None and list(back.clusters) == list(units.clusters)
    assert back.cluster_index()[1] == 8
    resampling = Resampling(200, 0)
    assert np.array_equal(replicates(back, resampling)["accuracy"], replicates(units, resampling)["accuracy"])
    # and not the same as resampling each query on its own: the groups decide the draws
    flat = Units(units.kind, units.benchmark, units.ids, units.columns, units.metrics, variant="none")
    assert not np.array_equal(replicates(flat, resampling)["accuracy"], replicates(units, resampling)["accuracy"])


class _RecordingEvent:
    """threading.Event whose wait returns at once (stop) and records the interval asked for."""

    waits: list[float] = []

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        _RecordingEvent.waits.append(float(timeout if timeout is not None else -1))
        return True


def test_a_leased_folder_is_renewed_well_before_its_lease_expires(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(locks.LEASE_TTL_ENV, "600")
    _RecordingEvent.waits = []
    fake = types.ModuleType("threading")  # the real module, but for the renewal's stop event
    fake.__dict__.update(threading.__dict__)
    fake.Event = _RecordingEvent  # type: ignore[attr-defined]
    monkeypatch.setattr(locks, "threading", fake)
    with locks.folder_lease(tmp_path, "run-a"):
        pass
    assert _RecordingEvent.waits and 0 < _RecordingEvent.waits[0] <= 600 / 2


def test_the_tested_drop_carries_every_field_of_its_test() -> None:
    difference = Difference("accuracy", 0.9, 0.5, -0.4, -0.5, -0.3, 0.002, True, "exact McNemar test", (30, 2, 1e-6))
    reader = _Reader({"accuracy": difference})
    [kept], noise = judge_drops([_drop("accuracy")], {"accuracy": ("a", "accuracy")}, {"accuracy": ("b", "accuracy")},
                                reader)
    assert noise == []
    assert kept == {**_drop("accuracy"), "test": "exact McNemar test", "p_value": 0.002, "paired": True,
                    "ci_low": -0.5, "ci_high": -0.3,
                    "mcnemar": {"previous_only": 30, "current_only": 2, "p_value": 1e-6}}


def test_a_drop_that_cannot_be_tested_is_kept_without_asking_for_units() -> None:
    reader = _Reader({})
    gone = {**_drop("gone"), "current": None}  # tonight lacks the metric
    renamed = _drop("renamed")  # the two nights' unit files hold it under other names
    kept, noise = judge_drops([gone, renamed], {"gone": ("a", "gone"), "renamed": ("a", "renamed")},
                              {"gone": ("b", "gone"), "renamed": ("b", "renamed_v2")}, reader)
    assert kept == [gone, renamed] and noise == [] and reader.asked == []


def test_the_regression_test_tag_names_each_tested_metric_its_test_and_p() -> None:
    tested = [{"metric": "uap", "test": "paired bootstrap", "p_value": 0.0123456},
              {"metric": "acc", "test": "exact McNemar test", "p_value": 0.5}]
    untested = [{"metric": "rmse"}, {"metric": "x", "test": ""}]
    assert deciding_tests(tested[:1] + untested, tested[1:]) == (
        "uap: paired bootstrap, p=0.01235; acc: exact McNemar test, p=0.5")
    assert deciding_tests(untested, []) == "threshold"
    assert deciding_tests([], []) == "threshold"


@pytest.mark.parametrize(("params", "expected"), [
    ([{"ci_resamples": "10", "ci_seed": "4"}], (10, 4)),          # the smallest a run may name
    ([{"ci_resamples": "100000", "ci_seed": ""}], (100000, 0)),   # the cap itself; an empty seed is 0
    ([{"ci_resamples": "9"}, {"ci_resamples": "50", "ci_seed": "2"}], (50, 2)),  # too few: the next run's
    ([{"ci_resamples": "100001", "ci_seed": "1"}, {"ci_resamples": "20"}], (20, 0)),  # over the cap: data, not obeyed
    ([{"ci_resamples": "x"}, {}], (300, 7)),                      # nothing usable: the environment's
])
def test_a_comparison_resamples_as_the_runs_did_within_bounds(params: list, expected: tuple,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VSBENCH_RESAMPLES", "300")
    monkeypatch.setenv("VSBENCH_RESAMPLE_SEED", "7")
    found = resampling_of(*params)
    assert (found.resamples, found.seed) == expected


def test_runs_logged_with_intervals_off_are_still_tested_with_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VSBENCH_RESAMPLES", "0")
    monkeypatch.setenv("VSBENCH_RESAMPLE_SEED", "3")
    found = resampling_of({"ci_resamples": "0"})
    assert found.enabled and (found.resamples, found.seed) == (Resampling().resamples, 3)


def test_the_lines_a_person_reads() -> None:
    assert (format_p(0.0004), format_p(0.001), format_p(0.04567), format_p(math.nan)) == (
        "p<0.001", "p=0.001", "p=0.046", "-")
    real = Difference("uap", 0.5, 0.62, 0.12, 0.04, 0.21, 0.003, True, "paired bootstrap")
    assert difference_line(real) == "+0.12 [+0.04, +0.21], p=0.003 (paired bootstrap)"
    edge = Difference("uap", 0.5, 0.62, 0.12, 0.04, 0.21, 0.07, True, "paired bootstrap")
    assert difference_line(edge) == ("+0.12 [+0.04, +0.21], p=0.070 (paired bootstrap); the test and the interval "
                                     "disagree at this edge: the verdict is the interval's")
    assert verdict_line(real, True) == "the second is better: the 95% interval of the difference excludes 0"
    assert verdict_line(real, False) == "the second is worse: the 95% interval of the difference excludes 0"
    same = Difference("uap", 0.5, 0.5, 0.0, -0.1, 0.1, 0.9, True, "paired bootstrap")
    assert verdict_line(same, True) == "indistinguishable (≈): the 95% interval of the difference holds 0"
    assert format_interval(0.123456, 0.1, 0.15) == "0.1235 [0.1, 0.15]"
    assert format_interval(0.123456, math.nan, 0.15) == "0.1235"


def test_other_ground_truth_under_the_same_ids_is_compared_unpaired_saying_why() -> None:
    units = _clustered()
    paired = compare_metric(units, units, "accuracy", Resampling(50, 0))
    assert paired.paired and paired.difference == 0 and paired.p_value == 1
    other = compare_metric(units, units, "accuracy", Resampling(50, 0), same_data=False)
    assert not other.paired and other.test.endswith("their ground truths differ (another vsbench.data.digest "
                                                    "under the same ids)")
