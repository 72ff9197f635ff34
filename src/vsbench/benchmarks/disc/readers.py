"""Copy-detection result and ground-truth files, read line by line as isc2021's ``read_predictions``
and ``read_ground_truth`` read them (stripped lines, ``split(",")``, ids as written, the header
optional and skipped anywhere, ``float()`` scores); padded or quoted ids get a note and
``normalize_ids`` strips them. Predictions may also name their columns in another order.
Predictions for queries that the ground truth does not list are *not* an error: like isc2021 they
score as false positives (:func:`count_unknown_queries` counts them for a warning)."""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vsbench.io.ids import IdColumn, Ids
from vsbench.io.inputs import InputError, iter_lines, names_memory_errors, quote
from vsbench.io.tables import check_unique_pairs, first_true

# -------------------------------------------------------------------------- copy detection


@dataclass(frozen=True)
class CopyDetectionPredictions:
    query_ids: Ids  # codes into the sorted distinct ids: no Python object a row
    reference_ids: Ids
    scores: np.ndarray
    notes: tuple[str, ...] = ()  # one-line warnings: inputs isc2021 scores, probably not as meant


@dataclass(frozen=True)
class CopyDetectionGroundTruth:
    query_ids: Ids  # positive pairs only, repeated pairs kept (isc2021 counts them)
    reference_ids: Ids
    listed_queries: Ids  # every query the file names, with or without a copy, once each, sorted
    notes: tuple[str, ...] = ()


PREDICTION_COLUMNS = ["query_id", "reference_id", "score"]
GROUND_TRUTH_COLUMNS = ["query_id", "reference_id"]
PREDICTION_HEADER = ",".join(PREDICTION_COLUMNS)
GROUND_TRUTH_HEADER = ",".join(GROUND_TRUTH_COLUMNS)
NORMALIZE_IDS_HINT = "normalize_ids=True (--normalize-ids) strips them"
_BOM = "\ufeff"


def normalize_id(text: str) -> str:
    """What a user usually means by an id: no byte-order mark, no surrounding spaces or double quotes."""
    text = text.replace(_BOM, "").strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].strip()
    return text


def _isc_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, stripped line) as isc2021's readers see them: ``for line in open(f)``, ``line.strip()``.

    Text mode splits on \\n, \\r and \\r\\n alike. The file is decoded as UTF-8 (isc2021 uses the
    locale's encoding, UTF-8 on the systems it was run on).
    Lines are capped in length and the file in size (:mod:`vsbench.io.inputs`), and read one at a
    time: only the compact columns (:class:`~vsbench.io.tables.IdColumn`) are kept.
    """
    return ((number, line.strip()) for number, line in iter_lines(path))


def _fields(path: Path, number: int, line: str, names: list[str]) -> list[str]:
    """``line.split(",")`` with exactly ``len(names)`` fields, as isc2021 unpacks it (it fails otherwise)."""
    if not line:
        raise InputError(path, "blank line (isc2021 fails on it too)", number)
    fields = line.split(",")
    if len(fields) != len(names):
        raise InputError(path, f"expected {len(names)} comma-separated fields ({','.join(names)}), "
                               f"found {len(fields)} (isc2021 fails on this line too)", number)
    return fields


class RowLines:
    """The file line of each row, kept as the few lines that made no row (headers; a blank line is an
    error, so every other line is a row): 8 bytes a skipped line instead of 8 bytes a row.
    ``subset`` (a row mask) numbers only the rows it keeps, for the ground truth's pairs."""

    def __init__(self) -> None:
        self.skipped = array("q")
        self.kept: np.ndarray | None = None

    def skip(self, number: int) -> None:
        self.skipped.append(number)

    def subset(self, mask: np.ndarray) -> RowLines:
        lines = RowLines()
        lines.skipped, lines.kept = self.skipped, mask
        return lines

    def __getitem__(self, row: int) -> int:
        if self.kept is not None:
            row = int(np.flatnonzero(self.kept)[row])
        line = int(row) + 1
        for skipped in self.skipped:  # sorted: each skipped line at or before it moves the row down one line
            if skipped > line:
                break
            line += 1
        return line


def _id_notes(path: Path, ids: Ids, line_numbers: RowLines, normalize: bool) -> tuple[Ids, list[str]]:
    """The ids to use and, unless normalizing, a note when some are padded or quoted.

    isc2021 keeps ``" R1"`` and ``'"R1"'`` as written, so they match no clean id and score 0: the
    number is isc2021's, and the note says what the user probably meant. Each distinct id is
    looked at once (not each row).
    """
    if normalize:
        return ids.mapped(normalize_id), []
    odd = ids.marked(lambda text: normalize_id(text) != text)
    notes = []
    if (row := first_true(odd)) is not None:
        notes.append(f"{path}: {int(np.count_nonzero(odd))} id(s) have surrounding spaces, quotes or a byte-order mark "
                     f"(line {line_numbers[row]}: {quote(ids[row])}); isc2021 compares ids as written, so these match "
                     f"no clean id; {NORMALIZE_IDS_HINT}")
    return ids, notes


def _parse_score(path: Path, number: int, text: str) -> float:
    """``float(text)`` as isc2021 parses scores (so ``inf`` and ``1_000`` are numbers); NaN is refused."""
    try:
        value = float(text)
    except ValueError:
        problem = "empty score" if not text.strip() else f"score {quote(text.strip())} is not a number"
        raise InputError(path, f"{problem} (isc2021 fails on it too)", number) from None
    if value != value:
        raise InputError(path, "score is NaN: isc2021 has no defined order for it", number)
    return value


@names_memory_errors
def read_copy_detection_predictions(path: str | Path, *, normalize_ids: bool = False) -> CopyDetectionPredictions:
    """``query_id,reference_id,score`` lines read as isc2021's ``read_predictions`` reads them.

    Each line is stripped and split on commas into exactly three fields; ids are kept as written
    (a note flags padded or quoted ones; ``normalize_ids`` strips them); the header line is optional
    and skipped wherever it appears; scores are Python floats (``inf`` allowed, NaN refused).
    Beyond isc2021, a first line naming the columns in another order, or with more columns, maps them
    by name (isc2021 fails on such a file). A repeated (query, reference) pair is an error, as in
    isc2021's ``check_duplicates``.

    Read one line at a time into compact columns (ids as codes, :class:`~vsbench.io.ids.Ids`; scores
    as 8 bytes), so memory stays under 3x the file's size (isc2021's Python lists took 15-35x).
    """
    path = Path(path)
    lines = _isc_lines(path)
    first = next(lines, None)
    if first is None:
        raise InputError(path, "file is empty")
    columns: list[str] = PREDICTION_COLUMNS
    line_numbers = RowLines()
    header = [normalize_id(name) for name in first[1].split(",")]
    if first[1] != PREDICTION_HEADER and set(PREDICTION_COLUMNS) <= set(header):
        if repeated := [c for c in PREDICTION_COLUMNS if header.count(c) > 1]:
            raise InputError(path, f"column {repeated[0]!r} is named {header.count(repeated[0])} times in the header "
                                   f"(found {quote(','.join(header))}); keep one, or rename the others", 1)
        columns = header
        line_numbers.skip(1)
    else:
        if first[1] != PREDICTION_HEADER and set(header) & set(PREDICTION_COLUMNS) and len(header) != 3:
            missing = [c for c in PREDICTION_COLUMNS if c not in header]
            raise InputError(path, f"missing column(s) {', '.join(missing)}; the header must name "
                                   f"{PREDICTION_HEADER} (found {quote(','.join(header))})", 1)
        lines = itertools.chain([first], lines)
    query_at, reference_at, score_at = (columns.index(c) for c in PREDICTION_COLUMNS)
    queries, references = IdColumn(), IdColumn()
    scores = array("d")
    for number, line in lines:
        if line == PREDICTION_HEADER:
            line_numbers.skip(number)
            continue
        fields = _fields(path, number, line, columns)
        queries.append(fields[query_at])
        references.append(fields[reference_at])
        scores.append(_parse_score(path, number, fields[score_at]))
    if not scores:
        raise InputError(path, "no predictions")
    q, notes = _id_notes(path, queries.finish(), line_numbers, normalize_ids)
    r, more = _id_notes(path, references.finish(), line_numbers, normalize_ids)
    check_unique_pairs(path, q, r, "prediction", line_numbers)
    return CopyDetectionPredictions(q, r, np.frombuffer(scores, dtype=np.float64), tuple(notes + more))


@names_memory_errors
def read_copy_detection_ground_truth(path: str | Path, *, normalize_ids: bool = False) -> CopyDetectionGroundTruth:
    """``query_id,reference_id`` lines read as isc2021's ``read_ground_truth`` reads them.

    Stripped lines split into exactly two fields, the header skipped wherever it appears, ids kept
    as written (``normalize_ids`` strips padding and quotes); an empty reference marks a query
    without a copy. A pair listed twice is kept twice (isc2021 counts it twice; the scorer notes it).
    A first line naming the columns in the other order (``reference_id,query_id``) is read as the
    header, and the columns by name (isc2021 reads that line as a pair and the columns as
    ``query_id,reference_id``, scoring every pair as missed). Any other line that names the
    columns is read as a pair, as isc2021 does, with a note. Read into compact columns, as the
    predictions are.
    """
    path = Path(path)
    queries, references = IdColumn(), IdColumn()  # every listed row; ``positive`` marks the pairs
    positive, line_numbers = array("b"), RowLines()
    notes: list[str] = []
    lines = _isc_lines(path)
    first = next(lines, None)
    swapped = first is not None and [normalize_id(name) for name in first[1].split(",")] == GROUND_TRUTH_COLUMNS[::-1]
    if swapped:  # "reference_id,query_id": the columns are read by name (isc2021 reads it as a pair, then swaps them)
        line_numbers.skip(1)
    elif first is not None:
        lines = itertools.chain([first], lines)
    for number, line in lines:
        if line == GROUND_TRUTH_HEADER:
            line_numbers.skip(number)
            continue
        fields = _fields(path, number, line, GROUND_TRUTH_COLUMNS)
        q, db = fields[::-1] if swapped else fields
        if {normalize_id(q), normalize_id(db)} == set(GROUND_TRUTH_COLUMNS):
            if normalize_ids:
                line_numbers.skip(number)
                continue
            if [normalize_id(f) for f in fields] == GROUND_TRUTH_COLUMNS[::-1]:
                notes.append(f"{path}:{number}: {quote(line)} names the columns in the other order; only a first "
                             "line is read as a header, so this one counts as a ground-truth pair (as in isc2021)")
            else:
                notes.append(f"{path}:{number}: {quote(line)} looks like a header but is not exactly "
                             f"{GROUND_TRUTH_HEADER!r}, so isc2021 counts it as a ground-truth pair; {NORMALIZE_IDS_HINT}")
        queries.append(q)
        references.append(db)
        positive.append((normalize_id(db) if normalize_ids else db) != "")
    pairs = np.frombuffer(positive, dtype=np.bool_) if positive else np.zeros(0, dtype=bool)  # 0 or 1 a byte
    if not pairs.any():
        raise InputError(path, "no (query, reference) pair: nothing to score against (isc2021 fails on it too)")
    # Each column is finished, and what it no longer needs dropped, before the next is: the peak is
    # one column's sort beside the other's compact state (docs/reliability.md, 'Limits').
    listed, pair_lines = queries.finish(), line_numbers.subset(pairs)
    distinct = (listed.mapped(normalize_id) if normalize_ids else listed).used()
    listed = listed[pairs]
    query_ids, id_notes = _id_notes(path, listed, pair_lines, normalize_ids)
    del listed
    reference_ids, more = _id_notes(path, references.finish()[pairs], pair_lines, normalize_ids)
    return CopyDetectionGroundTruth(query_ids, reference_ids, Ids(np.arange(len(distinct), dtype=np.int32), distinct),
                                    tuple(notes + id_notes + more))


def count_unknown_queries(predictions: CopyDetectionPredictions, truth: CopyDetectionGroundTruth) -> int:
    """Predictions whose query the ground truth never lists (scored as false positives)."""
    return int(np.count_nonzero(~predictions.query_ids.isin(truth.listed_queries.values)))
