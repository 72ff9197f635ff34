"""`vsbench.stats.statistics`: the ratio's class rows with a denominator, its division, and each
refusal's words (issue 56: `make mutate` left 30 of its 168 mutants alive against the unit-file
tests, which never ask for a class's ratio with a denominator and match refusals by their first
words only). Each test was seen failing with its mutant planted."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.unit.test_units_trust import _install
from vsbench.stats.statistics import ENTRY_POINT_GROUP, check_name, evaluate, find, known, per_count, ratio
from vsbench.stats.units import Units, UnitsError

KNOWN = ", ".join(known())
NOT_CALLABLE = 3.5


def twice_mean(units: Units, weights: np.ndarray) -> np.ndarray:
    return 2 * (weights @ units.values("x")) / weights.sum(axis=1)


def half_mean(units: Units, weights: np.ndarray) -> np.ndarray:
    return 0.5 * (weights @ units.values("x")) / weights.sum(axis=1)


def _units() -> Units:
    return Units("question", "toy", np.array(["a", "b", "c", "d"]),
                 {"x": np.array([1.0, 2.0, 3.0, 4.0]), "n": np.array([1.0, 0.0, 2.0, 1.0]),
                  "cls": np.array(["p", "q", "p", "q"])},
                 {"m": {"statistic": "ratio", "num": "x", "den": "n", "where": "cls", "equals": "p"}})


def test_a_class_ratio_with_a_denominator_uses_that_class_rows_of_both() -> None:
    units = _units()
    weights = np.array([[1, 1, 1, 1], [2, 0, 0, 5], [0, 3, 0, 1], [0, 4, 0, 0]])
    found = ratio(units, weights, num="x", den="n", where="cls", equals="p")
    assert found[0] == pytest.approx((1 + 3) / (1 + 2)) and found[1] == pytest.approx(2 / 2)
    assert np.isnan(found[2]) and np.isnan(found[3])  # no unit of class p drawn
    q = ratio(units, weights, num="x", den="n", where="cls", equals="q")
    assert q[0] == pytest.approx(6 / 1) and q[1] == pytest.approx(20 / 5) and q[2] == pytest.approx((3 * 2 + 4) / 1)
    assert np.isnan(q[3])  # b drawn, but its denominator is 0
    assert ratio(units, weights, num="x", transform="sqrt")[1] == pytest.approx(np.sqrt((2 + 20) / 7))
    with pytest.raises(UnitsError, match=r"^ratio: unknown transform 'log' \(expected '' or 'sqrt'\)$"):
        ratio(units, weights, num="x", transform="log")


def test_per_count_keeps_the_division_and_computes_no_0_over_0() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = per_count(np.array([3.0, 0.0, 2.0, 0.0, 1.0]), np.array([2.0, 0.0, 1.0, 5.0, -1.0]))
    assert out[0] == 1.5 and np.isnan(out[1]) and out[2] == 2.0 and out[3] == 0.0 and np.isnan(out[4])


def test_refusals_word_for_word() -> None:
    with pytest.raises(UnitsError) as caught:
        check_name("no_such_statistic")
    assert str(caught.value) == (f"unknown statistic 'no_such_statistic'; known: {KNOWN} (a plugin registers its own "
                                 f"through the '{ENTRY_POINT_GROUP}' entry point)")
    long = "x" * 70 + ":y"
    with pytest.raises(UnitsError) as caught:
        check_name(long)
    assert str(caught.value) == (f"statistic {long[:60]!r} is not a statistic's name (vsbench runs only registered "
                                 f"statistics, never a module path from a file); known: {KNOWN}")


def _raising(units: Units, weights: np.ndarray, **params: object) -> np.ndarray:
    raise KeyError("k" * 200)


def test_a_statistic_that_cannot_use_its_params_is_one_line_naming_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import vsbench.stats.statistics as statistics

    monkeypatch.setitem(statistics.builtin(), "ratio", _raising)
    units = Units("query", "toy", np.array(["a"]), {"x": np.array([1.0])},
                  {"m": {"statistic": "ratio", "num": "x", "den": "x"}})
    with pytest.raises(UnitsError) as caught:
        evaluate(units, np.ones((1, 1), dtype=np.int32))
    assert str(caught.value) == ("metric 'm': statistic 'ratio' cannot use the params ['den', 'num'] on these units "
                                 f"(KeyError: {repr('k' * 200)[:120]})")
    assert caught.value.__suppress_context__


def test_evaluate_gives_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    import vsbench.stats.statistics as statistics

    monkeypatch.setitem(statistics.builtin(), "ratio", lambda units, weights, **params: [1, 2])
    units = Units("query", "toy", np.array(["a"]), {"x": np.array([1.0])}, {"m": {"statistic": "ratio", "num": "x"}})
    out = evaluate(units, np.ones((2, 1), dtype=np.int32))["m"]
    assert out.dtype == np.float64


def test_a_plugin_is_found_by_its_own_name_among_several(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install(tmp_path, f"aa.twice = {__name__}:twice_mean\nzz.half = {__name__}:half_mean\n"
                       f"zz.constant = {__name__}:NOT_CALLABLE", name="several-stats")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert find("zz.half") is half_mean and find("aa.twice") is twice_mean
    with pytest.raises(UnitsError) as caught:
        find("zz.constant")
    assert str(caught.value) == (f"statistic 'zz.constant' ({__name__}:NOT_CALLABLE, from several-stats) "
                                 "is not a function")


def test_a_same_named_entry_point_of_another_group_is_never_loaded(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "mixed_stats-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mixed-stats\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[console_scripts]\nzz.half = {__name__}:twice_mean\n\n"
                                           f"[{ENTRY_POINT_GROUP}]\nzz.half = {__name__}:half_mean\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert find("zz.half") is half_mean
