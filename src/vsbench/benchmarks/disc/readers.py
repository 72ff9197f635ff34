"""Copy-detection result and ground-truth files, read line by line as isc2021's ``read_predictions``
and ``read_ground_truth`` read them (stripped lines, ``split(",")``, ids as written, the header
optional and skipped anywhere, ``float()`` scores); padded or quoted ids get a note and
``normalize_ids`` strips them. Predictions may also name their columns in another order.
Predictions for queries that the ground truth does not list are *not* an error: like isc2021 they
score as false positives (:func:`count_unknown_queries` counts them for a warning)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vsbench.io.inputs import (
    InputError,
    iter_lines,
    quote,
)
from vsbench.io.tables import (
    check_unique_pairs,
)

# -------------------------------------------------------------------------- copy detection


@dataclass(frozen=True)
class CopyDetectionPredictions:
    query_ids: np.ndarray
    reference_ids: np.ndarray
    scores: np.ndarray
    notes: tuple[str, ...] = ()  # one-line warnings: inputs isc2021 scores, probably not as meant


@dataclass(frozen=True)
class CopyDetectionGroundTruth:
    query_ids: np.ndarray  # positive pairs only, repeated pairs kept (isc2021 counts them)
    reference_ids: np.ndarray
    listed_queries: np.ndarray  # every query the file names, with or without a copy
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


def _isc_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, stripped line) as isc2021's readers see them: ``for line in open(f)``, ``line.strip()``.

    Text mode splits on \\n, \\r and \\r\\n alike. The file is decoded as UTF-8 (isc2021 uses the
    locale's encoding, UTF-8 on the systems it was run on).
    Lines are capped in length and the file in size (:mod:`vsbench.io.inputs`).
    """
    return [(number, line.strip()) for number, line in iter_lines(path)]


def _fields(path: Path, number: int, line: str, names: list[str]) -> list[str]:
    """``line.split(",")`` with exactly ``len(names)`` fields, as isc2021 unpacks it (it fails otherwise)."""
    if not line:
        raise InputError(path, "blank line (isc2021 fails on it too)", number)
    fields = line.split(",")
    if len(fields) != len(names):
        raise InputError(path, f"expected {len(names)} comma-separated fields ({','.join(names)}), "
                               f"found {len(fields)} (isc2021 fails on this line too)", number)
    return fields


def _id_notes(path: Path, ids: list[tuple[int, str]], normalize: bool) -> tuple[list[str], list[str]]:
    """The ids to use and, unless normalizing, a note when some are padded or quoted.

    isc2021 keeps ``" R1"`` and ``'"R1"'`` as written, so they match no clean id and score 0: the
    number is isc2021's, and the note says what the user probably meant.
    """
    if normalize:
        return [normalize_id(text) for _, text in ids], []
    odd = [(number, text) for number, text in ids if normalize_id(text) != text]
    notes = []
    if odd:
        number, text = odd[0]
        notes.append(f"{path}: {len(odd)} id(s) have surrounding spaces, quotes or a byte-order mark (line {number}: "
                     f"{quote(text)}); isc2021 compares ids as written, so these match no clean id; {NORMALIZE_IDS_HINT}")
    return [text for _, text in ids], notes


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


def read_copy_detection_predictions(path: str | Path, *, normalize_ids: bool = False) -> CopyDetectionPredictions:
    """``query_id,reference_id,score`` lines read as isc2021's ``read_predictions`` reads them.

    Each line is stripped and split on commas into exactly three fields; ids are kept as written
    (a note flags padded or quoted ones; ``normalize_ids`` strips them); the header line is optional
    and skipped wherever it appears; scores are Python floats (``inf`` allowed, NaN refused).
    Beyond isc2021, a first line naming the columns in another order, or with more columns, maps them
    by name (isc2021 fails on such a file). A repeated (query, reference) pair is an error, as in
    isc2021's ``check_duplicates``.
    """
    path = Path(path)
    lines = _isc_lines(path)
    if not lines:
        raise InputError(path, "file is empty")
    columns: list[str] = PREDICTION_COLUMNS
    header = [normalize_id(name) for name in lines[0][1].split(",")]
    if lines[0][1] != PREDICTION_HEADER and set(PREDICTION_COLUMNS) <= set(header):
        if repeated := [c for c in PREDICTION_COLUMNS if header.count(c) > 1]:
            raise InputError(path, f"column {repeated[0]!r} is named {header.count(repeated[0])} times in the header "
                                   f"(found {quote(','.join(header))}); keep one, or rename the others", 1)
        columns, lines = header, lines[1:]
    elif lines[0][1] != PREDICTION_HEADER and set(header) & set(PREDICTION_COLUMNS) and len(header) != 3:
        missing = [c for c in PREDICTION_COLUMNS if c not in header]
        raise InputError(path, f"missing column(s) {', '.join(missing)}; the header must name "
                               f"{PREDICTION_HEADER} (found {quote(','.join(header))})", 1)
    where = [columns.index(c) for c in PREDICTION_COLUMNS]
    queries: list[tuple[int, str]] = []
    references: list[tuple[int, str]] = []
    scores: list[float] = []
    for number, line in lines:
        if line == PREDICTION_HEADER:
            continue
        fields = _fields(path, number, line, columns)
        queries.append((number, fields[where[0]]))
        references.append((number, fields[where[1]]))
        scores.append(_parse_score(path, number, fields[where[2]]))
    if not scores:
        raise InputError(path, "no predictions")
    query_ids, notes = _id_notes(path, queries, normalize_ids)
    reference_ids, more = _id_notes(path, references, normalize_ids)
    line_numbers = np.asarray([number for number, _ in queries])
    q, r = np.asarray(query_ids, dtype=object).astype(str), np.asarray(reference_ids, dtype=object).astype(str)
    check_unique_pairs(path, q, r, "prediction", line_numbers)
    return CopyDetectionPredictions(q, r, np.asarray(scores, dtype=np.float64), tuple(notes + more))


def read_copy_detection_ground_truth(path: str | Path, *, normalize_ids: bool = False) -> CopyDetectionGroundTruth:
    """``query_id,reference_id`` lines read as isc2021's ``read_ground_truth`` reads them.

    Stripped lines split into exactly two fields, the header skipped wherever it appears, ids kept
    as written (``normalize_ids`` strips padding and quotes); an empty reference marks a query
    without a copy. A pair listed twice is kept twice (isc2021 counts it twice; the scorer notes it).
    A first line naming the columns in the other order (``reference_id,query_id``) is read as the
    header, and the columns by name (isc2021 reads that line as a pair and the columns as
    ``query_id,reference_id``, scoring every pair as missed). Any other line that names the
    columns is read as a pair, as isc2021 does, with a note.
    """
    path = Path(path)
    queries: list[tuple[int, str]] = []
    references: list[tuple[int, str]] = []
    listed: list[tuple[int, str]] = []
    notes: list[str] = []
    lines = _isc_lines(path)
    swapped = bool(lines) and [normalize_id(name) for name in lines[0][1].split(",")] == GROUND_TRUTH_COLUMNS[::-1]
    if swapped:  # "reference_id,query_id": the columns are read by name (isc2021 reads it as a pair, then swaps them)
        lines = lines[1:]
    for number, line in lines:
        if line == GROUND_TRUTH_HEADER:
            continue
        fields = _fields(path, number, line, GROUND_TRUTH_COLUMNS)
        q, db = fields[::-1] if swapped else fields
        if {normalize_id(q), normalize_id(db)} == set(GROUND_TRUTH_COLUMNS):
            if normalize_ids:
                continue
            if [normalize_id(f) for f in fields] == GROUND_TRUTH_COLUMNS[::-1]:
                notes.append(f"{path}:{number}: {quote(line)} names the columns in the other order; only a first "
                             "line is read as a header, so this one counts as a ground-truth pair (as in isc2021)")
            else:
                notes.append(f"{path}:{number}: {quote(line)} looks like a header but is not exactly "
                             f"{GROUND_TRUTH_HEADER!r}, so isc2021 counts it as a ground-truth pair; {NORMALIZE_IDS_HINT}")
        listed.append((number, q))
        if (normalize_id(db) if normalize_ids else db) == "":
            continue
        queries.append((number, q))
        references.append((number, db))
    if not queries:
        raise InputError(path, "no (query, reference) pair: nothing to score against (isc2021 fails on it too)")
    query_ids, id_notes = _id_notes(path, queries, normalize_ids)
    reference_ids, more = _id_notes(path, references, normalize_ids)
    all_queries = [normalize_id(q) if normalize_ids else q for _, q in listed]
    return CopyDetectionGroundTruth(np.asarray(query_ids, dtype=object).astype(str),
                                    np.asarray(reference_ids, dtype=object).astype(str),
                                    np.unique(np.asarray(all_queries, dtype=object).astype(str)),
                                    tuple(notes + id_notes + more))


def count_unknown_queries(predictions: CopyDetectionPredictions, truth: CopyDetectionGroundTruth) -> int:
    """Predictions whose query the ground truth never lists (scored as false positives)."""
    return int(np.count_nonzero(~np.isin(predictions.query_ids, truth.listed_queries)))
