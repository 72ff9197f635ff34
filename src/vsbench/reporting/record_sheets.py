"""A score's failure sheets written beside its unit files, and named in its records.

Why here: the similarity engine (and any other runner that writes unit files) makes the sheets the
same way: one per record that has units and a benchmark that draws one, as
``<out>/failures/<stem of the record's unit file>.png`` and ``.html``, the record gaining
``"failures": {"png", "html", "rows", "total", "sha256"}`` (paths relative to ``out``, like
``units``), which the evaluation's MLflow run logs under ``failures/``. ``VSBENCH_FAILURE_ROWS=0``
turns them off. A sheet is a picture of the score, not a part of it: whatever stops one (a bad
setting, an image folder gone, a bug in a plugin's sheet) is one warning line and no sheet, never a
failed score.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from vsbench.reporting.sheets import FAILURES_DIR, Sheet, failure_rows, thumbnails, write_failure_sheet

FAILURES_KEY = "failures"  # the record's key


def titled(sheet: Sheet | None, subject: str) -> Sheet | None:
    """``sheet`` with its title led by ``subject`` (``disc · resnet34-random · Flat · none``) in place of
    the benchmark's own ``<benchmark> <variant>`` before the first ``": "``. Why: the benchmarks draw
    their sheets knowing the units, not the model, and a title without the model reads the same for
    every model (issue 57); the MLflow run id is added when the sheet is logged to its run
    (:func:`vsbench.tracking.sheet_stamp.stamped`)."""
    if sheet is None or not subject:
        return sheet
    _, colon, what = sheet.title.partition(": ")
    return replace(sheet, title=f"{subject}: {what}" if colon else f"{subject}: {sheet.title}")


def write_failure_sheets(benchmark: str, records: Sequence[MutableMapping[str, Any]],
                         unit_files: Sequence[dict[str, Any] | None],
                         make: Callable[[int, int], Sheet | None] | None, out: Path, model: str = "") -> int:
    """Each record's sheet (``make(record index, rows)``) written under ``out/failures`` and named in
    the record, titled ``<benchmark> · <model> · <variant>`` (``model``: as MLflow names it); returns how
    many were written. Nothing when ``make`` is None (a benchmark without sheets: nothing is said) or the
    sheets are off."""
    if make is None:
        return 0
    rows = failure_rows()  # a bad VSBENCH_FAILURE_ROWS: one warning, no sheets
    if rows == 0:
        return 0
    thumbs = thumbnails()  # one image, one decode, for every sheet of this score
    written = 0
    for index, record in enumerate(records):
        entry = unit_files[index] if index < len(unit_files) else None
        if not entry:
            continue
        variant = " · ".join(str(v) for v in record.values() if isinstance(v, str))
        subject = " · ".join(part for part in (benchmark, model, variant) if part)
        sheet = write_failure_sheet(lambda index=index, subject=subject: titled(make(index, rows), subject), Path(out) / FAILURES_DIR,
                                    Path(str(entry["file"])).stem, f"{benchmark} {variant}", base=out, thumbs=thumbs)
        if sheet is not None:
            record[FAILURES_KEY] = sheet
            written += 1
    return written


def failure_files(record: Mapping[str, Any], out: Path) -> dict[str, str]:
    """``{local path: sha256}`` of a record's two sheet files (empty when it has none)."""
    entry = record.get(FAILURES_KEY)
    if not isinstance(entry, dict):
        return {}
    digests = entry.get("sha256") if isinstance(entry.get("sha256"), dict) else {}
    return {str(Path(out) / str(entry[kind])): str(digests.get(kind, "")) for kind in ("png", "html")
            if isinstance(entry.get(kind), str)}
