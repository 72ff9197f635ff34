"""The difference's interval says when it is weak, as a single interval does (issue 55): fewer than 20
draws behind it, zero width, resamples left out; in ``compare --runs``, its JSON and the report."""

from __future__ import annotations

import numpy as np

from tests.unit.test_expanded_interval import _disc
from vsbench.abid.units import answer_units
from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.reporting.pairs import MetricPair, RunPair, pair_table, render_pair
from vsbench.stats.compare import compare, intervals
from vsbench.stats.resample import Resampling
from vsbench.stats.units import Units


def test_few_groups_and_left_out_resamples_are_said() -> None:
    """Six queries, 5 groups, 2 of them holding a copy: uAP's difference rests on 2 groups, and a
    resample that draws neither copy leaves the difference undefined."""
    found = compare(_disc(), _other_scores(), Resampling(400, 1), ["uap"])["uap"]
    assert found.paired and found.draws == 2 and found.kind == "group"
    assert "only 2 groups (under 20): a rough interval" in found.note
    assert found.dropped > 0 and f"{found.dropped} of 400 resamples left out" in found.note
    assert found.as_dict()["interval_note"] == found.note


def _other_scores() -> Units:
    """The queries, predictions and ground truth of :func:`_disc`, scored by another model."""
    pq = [f"q{i}" for i in range(6) for _ in range(2)]
    pr = ["A", "x0", "A", "x1", "B", "x2", "x3", "x4", "x5", "x6", "x7", "x8"]
    ps = [0.3, 0.2, 0.9, 0.6, 0.8, 0.85, 0.7, 0.1, 0.5, 0.2, 0.35, 0.05]
    return copy_detection_units(pq, pr, ps, ["q0", "q1", "q2"], ["A", "A", "B"], queries=[f"q{i}" for i in range(6)])


def test_identical_runs_say_their_zero_width_and_a_sound_interval_says_nothing() -> None:
    n = 60
    truth = np.ones(n, dtype=np.int64)
    a = answer_units(np.where(np.arange(n) % 3 == 0, 0, 1), truth, [str(i) for i in range(n)], task="verification")
    b = answer_units(np.where(np.arange(n) % 4 == 0, 0, 1), truth, [str(i) for i in range(n)], task="verification")
    same = compare(a, a, Resampling(200, 0))["accuracy"]
    assert (same.low, same.high) == (0, 0) and "zero width" in same.note
    sound = compare(a, b, Resampling(200, 0))["accuracy"]
    assert sound.draws == n and sound.low < sound.high and sound.note == ""
    assert "interval_note" not in sound.as_dict()


def test_compare_runs_and_the_report_print_the_difference_note() -> None:
    found = compare(_disc(), _other_scores(), Resampling(400, 1), ["uap"])["uap"]
    pair = RunPair("a" * 32, "b" * 32, "first model", "second model",
                   [MetricPair("uap", True, found.first, found.second, (0.1, 0.9), (0.2, 0.95), found)])
    text = " ".join(render_pair(pair).split())
    assert f"({found.note})" in text
    assert "only 2 groups (under 20): a rough interval" in pair_table(pair)


def test_a_single_intervals_note_names_groups_when_it_counted_groups() -> None:
    """_disc(): 6 queries in 5 groups. uAP's note counts the groups drawn; accuracy at 1 (a ratio over
    the queries with a copy) counts those 3 queries (skimage-copydetect printed 'only 11 queries' for
    58 queries in 11 groups)."""
    found = intervals(_disc(), Resampling(200, 0))
    assert found["uap"].note.startswith("only 5 groups (under 20)")
    assert found["accuracy_at_1"].note.startswith("only 3 queries (under 20)")
