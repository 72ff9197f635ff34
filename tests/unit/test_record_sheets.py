"""``reporting/record_sheets.py`` without drawing a sheet: what each record's sheet is titled, which
file it is written to, with how many rows, and what the record gains (issue 56).

Why a file of its own: the tests that reach these functions through a real score
(test_failure_sheets_retrieval.py, test_failure_sheets_abid_pairs.py) draw PNGs and run searches, a
minute a file on the shared 2-core machine; ``make mutate``'s record_sheets guard ran under two
mutants a minute there. These stand ``write_failure_sheet`` in (it has its own tests) and check
what this module hands it, in milliseconds, so that its mutants die here first. ``titled`` (issue
57) was reached by no unit test before: only tests/integration/test_failure_pages.py called it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vsbench.reporting import record_sheets
from vsbench.reporting.record_sheets import titled, write_failure_sheets
from vsbench.reporting.sheets import Row, Sheet


def test_titled_puts_the_subject_in_place_of_the_benchmarks_own_words() -> None:
    sheet = Sheet("disc Flat: 3 queries whose copy is not first: worst first", (Row("r", ()),), 3)
    led = titled(sheet, "disc · resnet34-random · Flat")
    assert led is not None and led.title == "disc · resnet34-random · Flat: 3 queries whose copy is not first: worst first"
    assert (led.rows, led.total) == (sheet.rows, 3)  # only the title changes
    plain = titled(Sheet("no colon here", (), 0), "disc · m")
    assert plain is not None and plain.title == "disc · m: no colon here"  # a title without ": " is kept whole
    assert titled(sheet, "") is sheet and titled(None, "disc · m") is None


class _Written:
    """Stands in for :func:`vsbench.reporting.sheets.write_failure_sheet`: records what it is given
    and the sheet ``make`` builds, and returns an entry (or None for the stems in ``none_for``)."""

    def __init__(self, none_for: tuple[str, ...] = ()) -> None:
        self.calls: list[dict[str, Any]] = []
        self.none_for = none_for

    def __call__(self, make: Any, folder: Any, stem: str, what: str, *, base: Any = None, thumbs: Any = None) -> Any:
        sheet = make()
        self.calls.append({"folder": folder, "stem": stem, "what": what, "base": base, "thumbs": thumbs,
                           "title": None if sheet is None else sheet.title})
        return None if sheet is None or stem in self.none_for else {"png": f"failures/{stem}.png", "stem": stem}


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> _Written:
    fake = _Written(none_for=("c",))
    monkeypatch.setattr(record_sheets, "write_failure_sheet", fake)
    monkeypatch.setenv("VSBENCH_FAILURE_ROWS", "7")
    return fake


def test_each_record_with_units_gets_its_sheet_titled_and_named(written: _Written, tmp_path: Path) -> None:
    asked: list[tuple[int, int]] = []

    def make(index: int, rows: int) -> Sheet | None:
        asked.append((index, rows))
        return Sheet(f"disc {index}: misses", (), 1) if index != 3 else None

    records: list[dict[str, Any]] = [{"codec": "Flat", "uap": 0.5}, {"codec": "PQ8", "nprobe": "4", "k": 2},
                                     {"codec": "IVF"}, {"codec": "HNSW"}, {"codec": "none"}]
    units = [{"file": "units/a.parquet"}, None, {"file": "units/c.parquet"}, {"file": "units/d.parquet"},
             {"file": "sub/e.v1.parquet"}]
    assert write_failure_sheets("disc", records, units, make, tmp_path, model="resnet34-random") == 2
    assert asked == [(0, 7), (2, 7), (3, 7), (4, 7)]  # record 1 has no unit file; VSBENCH_FAILURE_ROWS=7
    assert [c["stem"] for c in written.calls] == ["a", "c", "d", "e.v1"]
    assert {str(c["folder"]) for c in written.calls} == {str(tmp_path / "failures")}
    assert {str(c["base"]) for c in written.calls} == {str(tmp_path)}
    assert [c["what"] for c in written.calls] == ["disc Flat", "disc IVF", "disc HNSW", "disc none"]
    assert [c["title"] for c in written.calls] == ["disc · resnet34-random · Flat: misses", "disc · resnet34-random · IVF: misses",
                                                   None, "disc · resnet34-random · none: misses"]
    [shared] = {id(c["thumbs"]) for c in written.calls}  # one thumbnail cache for every sheet of the score
    assert written.calls[0]["thumbs"] is not None
    # a sheet written: the record names it; none (make had none, or the writer gave up): nothing added
    assert records[0]["failures"] == {"png": "failures/a.png", "stem": "a"} and records[4]["failures"]["stem"] == "e.v1"
    assert all("failures" not in records[i] for i in (1, 2, 3))


def test_a_variant_is_its_text_values_and_no_model_leaves_no_gap(written: _Written, tmp_path: Path) -> None:
    records: list[dict[str, Any]] = [{"codec": "PQ8", "nprobe": "4", "k": 2, "uap": 0.4}]
    assert write_failure_sheets("disc", records, [{"file": "units/b.parquet"}],
                                lambda index, rows: Sheet("disc PQ8: misses", (), 1), tmp_path) == 1
    assert written.calls[0]["what"] == "disc PQ8 · 4" and written.calls[0]["title"] == "disc · PQ8 · 4: misses"
    records = [{"k": 2}]
    assert write_failure_sheets("vsd", records, [{"file": "units/v.parquet"}],
                                lambda index, rows: Sheet("vsd: misses", (), 1), tmp_path, model="m") == 1
    assert written.calls[1]["what"] == "vsd " and written.calls[1]["title"] == "vsd · m: misses"


@pytest.mark.parametrize("rows", ["0", "many"])
def test_sheets_off_or_a_bad_row_count_write_nothing(written: _Written, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str], rows: str) -> None:
    monkeypatch.setenv("VSBENCH_FAILURE_ROWS", rows)
    records: list[dict[str, Any]] = [{"codec": "Flat"}]
    assert write_failure_sheets("disc", records, [{"file": "units/a.parquet"}],
                                lambda index, rows: Sheet("t", (), 0), tmp_path) == 0
    assert written.calls == [] and records == [{"codec": "Flat"}]
    assert ("is not a number of rows" in capsys.readouterr().err) == (rows == "many")
