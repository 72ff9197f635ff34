"""What `vsbench.stats.records` hands on, pinned exactly (issue 56: `make mutate` left 75 of its 261
mutants alive against test_units_records.py, which checks the numbers but not the entry's fields,
the file names, the printed block's words and columns, or the one warning line).

Each test here was seen failing with its mutant planted. Fast: no bootstrap beyond 20 resamples."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from vsbench.stats import records
from vsbench.stats.records import (
    add_intervals,
    format_interval,
    interval_lines,
    intervals_note,
    is_interval_field,
    unit_file_name,
    warn_without_units,
)
from vsbench.stats.resample import Resampling
from vsbench.stats.units import Units

NOTE = "no intervals: this benchmark declares no per-unit outcomes (docs/intervals.md)"


def _units(n: int = 30) -> Units:
    """Two built-in ratios over ``n`` queries: ``hit`` (0/1: Clopper-Pearson) and ``gain`` (a mean of
    fractions: bootstrapped)."""
    hit = (np.arange(n) % 3 == 0).astype(np.int8)
    gain = (np.arange(n) % 5) / 4.0
    return Units("query", "toy", np.array([f"q{i}" for i in range(n)]), {"hit": hit, "gain": gain},
                 {"top1": {"statistic": "ratio", "num": "hit"}, "gain": {"statistic": "ratio", "num": "gain"}})


def test_unit_file_names_are_pinned() -> None:
    """The name is the benchmark and the record's text fields made file-name safe (``._-`` kept), cut
    at 120 characters, then 8 hex of the SHA-256 of benchmark, texts and the record's index."""
    assert unit_file_name("disc", {"codec": "PCAW512,L2norm,Flat", "norm": "a.b_c-d", "n": 3.0}, 3) == \
        "disc-PCAW512_L2norm_Flat-a.b_c-d-dc745cb7.parquet"
    assert unit_file_name("disc", {"n": 3.0}, 3) == "disc-3-32d0d077.parquet"  # no text field: the index
    long = unit_file_name("vsd", {"v": "x" * 200}, 0)
    assert long == "vsd-" + "x" * 116 + "-78daa7dd.parquet"


def test_a_record_without_units_is_skipped_not_the_end(tmp_path: Path) -> None:
    first, second = {"codec": "a", "top1": 0.3}, {"codec": "b", "top1": 10 / 30}
    entries = add_intervals("toy", [first, second], [None, _units()], tmp_path, Resampling(20, 1))
    assert entries[0] is None and entries[1] is not None
    assert entries[1]["file"] == "units/" + unit_file_name("toy", second, 1)
    assert (tmp_path / entries[1]["file"]).is_file()


def test_only_the_metrics_the_record_holds_get_intervals_at_its_level(tmp_path: Path) -> None:
    record = {"codec": "a", "top1": 10 / 30}  # the units could also give "gain": the record does not hold it
    entries = add_intervals("toy", [record], [_units()], tmp_path, Resampling(20, 1, confidence=0.9))
    assert sorted(record) == ["codec", "top1", "top1_ci90_high", "top1_ci90_low"]
    assert entries[0] is not None and entries[0]["metrics"] == ["top1"] and entries[0]["exact"] == ["top1"]


def test_the_entry_holds_exactly_its_fields_and_the_seconds_spent(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    clock = itertools.cycle([100.0, 100.123456])
    monkeypatch.setattr(records.time, "perf_counter", lambda: next(clock))
    record = {"codec": "a", "top1": 10 / 30}
    entry = add_intervals("toy", [record], [_units()], tmp_path, Resampling(0, 0))[0]
    assert entry is not None
    assert sorted(entry) == ["ci", "file", "kind", "metrics", "seconds", "sha256", "units"]  # no empty notes/exact
    assert entry["seconds"] == 0.123 and isinstance(entry["seconds"], float)
    assert entry["ci"] == {"ci_method": "off"} and entry["kind"] == "query" and entry["units"] == 30


def test_the_warning_line_when_no_record_has_units(capsys: pytest.CaptureFixture[str]) -> None:
    warn_without_units("toy", [None, None])
    out, err = capsys.readouterr()
    assert out == "" and err == f"vsbench: toy: {NOTE}\n"
    warn_without_units("toy", [None, {"file": "units/x.parquet"}])
    warn_without_units("toy", [])
    assert capsys.readouterr() == ("", "")
    assert intervals_note([None]) == NOTE and intervals_note([None, {"file": "x"}]) == ""


def test_interval_fields_and_bare_values() -> None:
    assert is_interval_field("uap_ci95_low") and is_interval_field("uap_ci90_high") and not is_interval_field("uap")
    assert format_interval(0.5, 0.25, 0.75) == "0.5000 [0.2500, 0.7500]"
    assert format_interval(0.5, None, 0.75) == "0.5000" and format_interval(0.5, 0.25, None) == "0.5000"


def _entry(units: int = 30, **extra: object) -> dict[str, object]:
    return {"file": "units/x.parquet", "kind": "query", "units": units, "metrics": ["top1"],
            "ci": Resampling(20, 1).params(), **extra}


def test_the_printed_block_word_for_word() -> None:
    """Columns padded on the right, the variant's texts joined by " · " ("-" for none), a note only
    where the metric has both an interval and a note, the exact interval's words where any."""
    long = {"codec": "Flat", "norm": "l2", "top1": 0.5, "top1_ci95_low": 0.25, "top1_ci95_high": 0.75,
            "gain_at_10": 0.4, "gain_at_10_ci95_low": 0.3, "gain_at_10_ci95_high": 0.5}
    bare = {"top1": 0.6}  # no text field, no interval
    entries = [_entry(metrics=["top1", "gain_at_10"], notes={"top1": "few"}, exact=["top1"]),
               _entry(notes={"top1": "ignored without bounds"})]
    assert interval_lines([long, bare], entries) == [
        "95% intervals: expanded percentile bootstrap over 30 queries, 20 resamples, seed 1",
        "  (a proportion of independent queries, such as an accuracy: " + records.EXACT_WORDS + ")",
        "  Flat · l2  top1        0.5000 [0.2500, 0.7500]  (few)",
        "  Flat · l2  gain_at_10  0.4000 [0.3000, 0.5000]",
        "  -          top1        0.6000",
    ]


def test_the_heading_for_counts_groups_and_kinds_that_differ() -> None:
    record = {"top1": 0.5}
    heading = interval_lines([record, record], [_entry(30, groups=5), _entry(40, groups=5)])[0]
    assert heading == "95% intervals: expanded percentile bootstrap over each record's queries in 5 groups, " \
                      "each drawn whole, 20 resamples, seed 1"
    heading = interval_lines([record, record], [_entry(30, groups=5), _entry(30, groups=6)])[0]
    assert heading == "95% intervals: expanded percentile bootstrap over 30 queries, 20 resamples, seed 1"
    heading = interval_lines([record], [{**_entry(), "kind": "bin"}])[0]
    assert "over 30 bins," in heading  # a kind without its own plural: an s


def test_edges_of_the_printed_block() -> None:
    assert interval_lines([], []) == []
    assert interval_lines([{"top1": 0.5}], [None]) == [NOTE]
    no_method = {**_entry(), "ci": {}}
    assert interval_lines([{"top1": 0.5}], [no_method]) == [
        "intervals off (VSBENCH_RESAMPLES=0); per-unit outcomes kept in units/x.parquet"]
    for entry in ({**_entry(), "metrics": []}, {k: v for k, v in _entry().items() if k != "metrics"}):
        assert interval_lines([{"top1": 0.5}], [entry]) == [
            "95% intervals: expanded percentile bootstrap over 30 queries, 20 resamples, seed 1"]
