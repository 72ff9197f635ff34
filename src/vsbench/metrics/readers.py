"""Readers and validators for the files the scorers consume.

Every problem raises :class:`InputError` (a ValueError) whose message starts with the file and,
where there is one, the line (``preds.csv:12: duplicate prediction ...``) or the 1-based entry of a
JSON list (``counting_val.json: entry 7: ...``; entry n matches line n of a result file). The
readers never guess: a file that does not match its format stops the run with one clear message.

Decisions recorded here:

* Copy-detection files are read line by line as isc2021's ``read_predictions`` and
  ``read_ground_truth`` read them (stripped lines, ``split(",")``, ids as written, the header
  optional and skipped anywhere, ``float()`` scores); padded or quoted ids get a note and
  ``normalize_ids`` strips them. Predictions may also name their columns in another order.
* Predictions for queries that the ground truth does not list are *not* an error: like isc2021 we
  score them as false positives (see :func:`count_unknown_queries` for a warning count).
* ABID result files: one integer per line (Python's ``int()``); blank lines at the very end are
  ignored, blank lines elsewhere are errors. :func:`read_abid_result` scores what the challenge
  scripts score (a short file's prefix, any integer) with notes; ``strict`` refuses those.
* Product-search queries: each candidate is ``{"candidate_pid": <gallery Image ID>, "label": 0|1}``
  (the public challenge file hides the labels; ``label`` is our name for the fulfil annotation).
* Product-search features: ``.npz`` (no pickle allowed; only the two feature members are opened,
  each checked from its header first) or the upstream pickle, read by an unpickler that can only
  rebuild plain numeric numpy arrays and refuses every other global *before* anything is called,
  so a hostile file cannot run code, nor make more bytes than it holds (no codec but latin-1, no
  array but one filled with exactly its own bytes).
"""

from __future__ import annotations

import math
import pickle
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pandas as pd

from vsbench.inputs import (
    InputError,
    bytes_reader,
    check_array_file,
    check_text,
    is_npy,
    iter_lines,
    load_arrays,
    max_array_bytes,
    parse_json,
    quote,
)
from vsbench.inputs import read_json as _bounded_json
from vsbench.metrics.abid import max_count_classes

__all__ = ["InputError"]  # re-exported: vsbench's one input error lives in vsbench.inputs

FEATURE_DIM = 128
NORM_TOLERANCE = 1e-3


# ------------------------------------------------------------------------------- CSV helpers


def _read_text_csv(path: Path) -> pd.DataFrame:
    """Every field as text ("" when empty or missing), no header handling: row i is line i + 1.

    Reading without a header makes pandas refuse a line with more fields than the first one
    (with a header it may instead silently turn the first column into an index). The file passes
    the bounded checks first (size, line length, UTF-8), so pandas never sees a 2 GB line.
    """
    check_text(path, encoding="utf-8-sig")
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False, header=None,
                           encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except pd.errors.EmptyDataError:
        raise InputError(path, "file is empty") from None
    except pd.errors.ParserError as exc:
        detail = str(exc).replace("Error tokenizing data. C error: ", "").strip()[:200]
        line = re.search(r"line (\d+)", detail)
        raise InputError(path, f"malformed CSV: {detail}", int(line.group(1)) if line else None) from None
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _read_headed_csv(path: Path, required: list[str]) -> pd.DataFrame:
    """A CSV whose first line names the columns; ``required`` must be among them, once each (the
    others are ignored and left out of the frame)."""
    frame = _read_text_csv(path)
    header = [str(name).strip() for name in frame.iloc[0]]
    for column in required:
        if header.count(column) > 1:
            positions = [i + 1 for i, name in enumerate(header) if name == column]
            raise InputError(path, f"column {column!r} is named {len(positions)} times in the header (columns "
                                   f"{', '.join(map(str, positions))}: found {quote(','.join(header))}); "
                                   "keep one, or rename the others", 1)
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(path, f"missing column(s) {', '.join(missing)}; the header must name "
                               f"{','.join(required)} (found {quote(','.join(header))})", 1)
    body = frame.iloc[1:, [header.index(c) for c in required]].reset_index(drop=True)
    body.columns = required  # only these: another column may be named twice, or not at all
    return body


def _read_headerless_csv(path: Path, names: list[str]) -> pd.DataFrame:
    """A CSV without header whose lines must all have exactly ``len(names)`` fields."""
    frame = _read_text_csv(path)
    if frame.shape[1] != len(names):
        raise InputError(path, f"expected {len(names)} fields ({','.join(names)}), found {frame.shape[1]}", 1)
    frame.columns = names
    return frame


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _check_nonempty_fields(path: Path, frame: pd.DataFrame, columns: list[str], first_line: int) -> None:
    blank = np.logical_and.reduce([frame[c].str.strip().to_numpy() == "" for c in frame.columns])
    if (row := _first(blank)) is not None:
        raise InputError(path, "blank line", row + first_line)
    for column in columns:
        if (row := _first(frame[column].str.strip().to_numpy() == "")) is not None:
            raise InputError(path, f"empty {column}", row + first_line)


def _parse_finite(path: Path, text: pd.Series, what: str, first_line: int) -> np.ndarray:
    values = pd.to_numeric(text.str.strip(), errors="coerce").to_numpy(dtype=np.float64)
    if (row := _first(~np.isfinite(values))) is not None:
        raw = text.iloc[row].strip()
        if raw == "":
            problem = f"empty {what}"
        elif np.isnan(values[row]):
            problem = f"{what} is NaN" if raw.lower().lstrip("+-") == "nan" else f"{what} {quote(raw)} is not a number"
        else:
            problem = f"{what} {quote(raw)} is not finite"
        raise InputError(path, problem, row + first_line)
    return values


def _check_unique_pairs(path: Path, first: np.ndarray, second: np.ndarray, what: str,
                        line_numbers: np.ndarray) -> None:
    """No (first, second) pair twice; ``line_numbers[i]`` is the file line of row i."""
    repeated = pd.DataFrame({"a": first, "b": second}).duplicated().to_numpy()
    if (row := _first(repeated)) is not None:
        earlier = _first((first == first[row]) & (second == second[row]))
        raise InputError(path, f"duplicate {what} (query {quote(first[row])}, reference {quote(second[row])}); "
                               f"first given on line {line_numbers[earlier]} (isc2021 refuses duplicates too)",
                         int(line_numbers[row]))


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
    Lines are capped in length and the file in size (:mod:`vsbench.inputs`).
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
    _check_unique_pairs(path, q, r, "prediction", line_numbers)
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


# ---------------------------------------------------------------------------------- HPatches


def read_hpatches_results(path: str | Path, expected_label: int | None = None) -> np.ndarray:
    """Distances of a ``.results`` file (``distance,label`` lines, no header), in file order.

    Labels must be 0 (negative pair) or 1 (positive pair); with ``expected_label`` every line must
    carry it (a positives file holds only 1s), which catches swapped or mixed files.
    """
    path = Path(path)
    frame = _read_headerless_csv(path, ["distance", "label"])
    if frame.empty:
        raise InputError(path, "file is empty")
    _check_nonempty_fields(path, frame, ["distance", "label"], first_line=1)
    distances = _parse_finite(path, frame["distance"], "distance", first_line=1)
    labels = frame["label"].str.strip().to_numpy()
    if (row := _first(~np.isin(labels, ("0", "1")))) is not None:
        raise InputError(path, f"label {quote(labels[row])} is not 0 or 1", row + 1)
    if expected_label is not None and (row := _first(labels != str(expected_label))) is not None:
        kind = "positives" if expected_label == 1 else "negatives"
        raise InputError(path, f"label {labels[row]} in a {kind} file", row + 1)
    return distances


# -------------------------------------------------------------------------------------- ABID


def read_int_lines(path: str | Path) -> np.ndarray:
    """One integer per line (``counting_result.txt`` and the verification result files)."""
    path = Path(path)
    lines = [line for _, line in iter_lines(path)]
    while lines and not lines[-1].strip():
        lines.pop()
    values = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            raise InputError(path, "blank line", number)
        try:
            value = int(text)  # Python's int(), as the challenge scripts parse each line
        except ValueError:
            if _too_many_digits(text):
                raise InputError(path, f"an integer of {len(text):,} characters, more than Python's int() reads "
                                       f"({sys.get_int_max_str_digits():,} digits): is this the right file?",
                                 number) from None
            raise InputError(path, f"{quote(text)} is not an integer", number) from None
        if not INT64_MIN <= value <= INT64_MAX:
            raise InputError(path, f"answer {quote(text, 40)} is outside the 64-bit integers "
                                   f"({INT64_MIN}..{INT64_MAX}) that are scored: is this the right file?", number)
        values.append(value)
    if not values:
        raise InputError(path, "file is empty")
    return np.asarray(values, dtype=np.int64)


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _too_many_digits(text: str) -> bool:
    """Whether ``int(text)`` failed only on Python's digit limit (``sys.set_int_max_str_digits``)."""
    digits = text.strip().lstrip("+-").replace("_", "")
    return digits.isdigit() and len(digits) > sys.get_int_max_str_digits() > 0


def read_json(path: Path) -> Any:
    """A JSON file (size-checked: :func:`vsbench.inputs.read_json`), or an InputError naming the
    file and where the JSON breaks."""
    return _bounded_json(path)


def _read_json_list(path: Path) -> list[Any]:
    data = read_json(path)
    if not isinstance(data, list) or not data:
        raise InputError(path, "expected a non-empty JSON list")
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _entries(path: Path, min_len: int, layout: str) -> list[list[Any]]:
    data = _read_json_list(path)
    for number, entry in enumerate(data, start=1):
        if not isinstance(entry, list) or len(entry) < min_len:
            raise InputError(path, f"entry {number}: expected {layout}, got {quote(entry, 80)}")
    return data


def _int_field(path: Path, number: int, value: Any, name: str, allowed: tuple[int, ...] | None = None) -> int:
    if not _is_int(value) or value < 0 or (allowed is not None and value not in allowed):
        want = " or ".join(map(str, allowed)) if allowed else "a non-negative integer"
        raise InputError(path, f"entry {number}: {name} must be {want}, got {quote(repr(value))}")
    return value


def read_counting_ground_truth(path: str | Path) -> np.ndarray:
    """Counts of ``counting_{val,train}[_hard].json``: ``[[idx, quantity], ...]``."""
    path = Path(path)
    entries = _entries(path, 2, "[image_index, quantity]")
    cap = max_count_classes()
    quantities = [_int_field(path, n, e[1], "quantity") for n, e in enumerate(entries, 1)]
    if (row := _first(np.asarray([q >= cap for q in quantities]))) is not None:
        raise InputError(path, f"entry {row + 1}: quantity {quote(quantities[row], 40)} is over the largest count "
                               f"scored, {cap - 1} (set VSBENCH_MAX_COUNT_CLASSES to raise it)")
    return np.asarray(quantities, dtype=np.int64)


def read_verification_ground_truth(path: str | Path) -> np.ndarray:
    """Answers of ``obj_verification_val.json``: ``[idx, asin, 1|0, [train idxs]]``."""
    path = Path(path)
    entries = _entries(path, 3, "[image_index, asin, 0|1, [train indices]]")
    labels = [_int_field(path, n, e[2], "label", (0, 1)) for n, e in enumerate(entries, 1)]
    return np.asarray(labels, dtype=np.int64)


def read_quantity_ground_truth(path: str | Path) -> np.ndarray:
    """Answers of ``obj_num_verification_val.json``: ``[idx, asin, 1|0, gt_qty, asked_qty, [...]]``.

    The label must agree with the quantities (1 exactly when the asked quantity is the true one).
    """
    path = Path(path)
    entries = _entries(path, 5, "[image_index, asin, 0|1, true_quantity, asked_quantity, [train indices]]")
    labels = []
    for number, entry in enumerate(entries, start=1):
        label = _int_field(path, number, entry[2], "label", (0, 1))
        true_qty = _int_field(path, number, entry[3], "true quantity")
        asked = _int_field(path, number, entry[4], "asked quantity")
        if label != int(true_qty == asked):
            raise InputError(path, f"entry {number}: label {label} contradicts true quantity {true_qty} "
                                   f"and asked quantity {asked}")
        labels.append(label)
    return np.asarray(labels, dtype=np.int64)


@dataclass(frozen=True)
class AbidResult:
    """A result file as the challenge scripts score it: ``values[i]`` answers ground-truth entry i."""

    values: np.ndarray
    notes: tuple[str, ...] = ()  # one-line warnings: what upstream scores silently


STRICT_HINT = "strict=True (--strict) refuses such files"


def read_abid_result(path: str | Path, expected: int, truth_path: str | Path, *, binary: bool,
                     strict: bool = False) -> AbidResult:
    """A result file read as the challenge's ``evaluate.py`` reads it, with notes where that misleads.

    Upstream loops over the result lines: a shorter file scores only its prefix (so a truncated file
    can score 100%), any integer is an answer (a count of 7 or -1, a verification answer of 2: wrong,
    not refused). vsbench gives those numbers and notes them; ``strict`` refuses them instead. A file
    longer than the ground truth is refused (upstream fails on it).
    """
    path = Path(path)
    values = read_int_lines(path)
    if values.size > expected:
        raise InputError(path, f"{values.size} lines for {expected} entries in {truth_path} "
                               "(the challenge script fails on it too)")
    notes = []
    if values.size < expected:
        if strict:
            raise InputError(path, f"{values.size} lines for {expected} entries in {truth_path}")
        notes.append(f"{path}: {values.size} lines for {expected} entries in {truth_path}; the challenge script "
                     f"scores the first {values.size} only, and so does this score; {STRICT_HINT}")
    allowed = "0 or 1" if binary else "a non-negative count"
    bad = (values != 0) & (values != 1) if binary else values < 0
    if (row := _first(bad)) is not None:
        if strict:
            raise InputError(path, f"{values[row]} is not {allowed}", row + 1)
        notes.append(f"{path}:{row + 1}: {int(np.count_nonzero(bad))} answer(s) are not {allowed} (e.g. {values[row]}); "
                     f"the challenge script scores them as wrong answers, and so does this score; {STRICT_HINT}")
    return AbidResult(values, tuple(notes))


def read_abid_predictions(path: str | Path, expected: int, truth_path: str | Path, *, binary: bool) -> np.ndarray:
    """A result file that must answer every entry with 0/1 or a count >= 0 (vsbench's own pipelines
    write these files, so anything else is a bug there): :func:`read_abid_result` with ``strict``."""
    return read_abid_result(path, expected, truth_path, binary=binary, strict=True).values


# ---------------------------------------------------------------------------- product search


@dataclass(frozen=True)
class ProductQuery:
    line: int
    source_pid: str
    candidate_pids: tuple[str, ...]
    labels: tuple[int, ...]


def read_product_queries(path: str | Path) -> list[ProductQuery]:
    """Queries JSONL, one object a line (blank lines skipped), in file order = feature row order."""
    path = Path(path)
    queries = [_product_query(path, number, line) for number, line in iter_lines(path) if line.strip()]
    if not queries:
        raise InputError(path, "no queries")
    return queries


def _product_query(path: Path, number: int, line: str) -> ProductQuery:
    record = parse_json(path, line, number)
    if not isinstance(record, dict) or not isinstance(record.get("candidates"), list):
        raise InputError(path, "expected an object with a 'candidates' list", number)
    pids, labels = [], []
    for i, candidate in enumerate(record["candidates"], start=1):
        pid = candidate.get("candidate_pid") if isinstance(candidate, dict) else None
        label = candidate.get("label") if isinstance(candidate, dict) else None
        if not isinstance(pid, str) or not pid:
            raise InputError(path, f"candidate {i}: missing 'candidate_pid'", number)
        if label not in (0, 1) or isinstance(label, float):
            raise InputError(path, f"candidate {i}: 'label' must be 0 or 1, got {quote(repr(label))}", number)
        pids.append(pid)
        labels.append(int(label))
    if len(set(pids)) != len(pids):
        raise InputError(path, "a candidate_pid appears twice in one query", number)
    return ProductQuery(number, str(record.get("source_pid", "")), tuple(pids), tuple(labels))


def read_gallery_image_ids(path: str | Path) -> np.ndarray:
    """``Image ID`` column of the gallery CSV (header ``ASIN, Image ID``), in file order."""
    path = Path(path)
    frame = _read_headed_csv(path, ["Image ID"])
    _check_nonempty_fields(path, frame, ["Image ID"], first_line=2)
    ids = frame["Image ID"].str.strip().to_numpy()
    if (row := _first(pd.Series(ids).duplicated().to_numpy())) is not None:
        earlier = _first(ids == ids[row])
        raise InputError(path, f"Image ID {quote(ids[row])} repeats line {earlier + 2}", row + 2)
    return ids


def candidate_gallery_rows(queries: list[ProductQuery], gallery_ids: np.ndarray, queries_path: str | Path,
                           gallery_path: str | Path) -> list[np.ndarray]:
    """Gallery row of every candidate; a candidate missing from the gallery is an error."""
    row_of = {image_id: row for row, image_id in enumerate(gallery_ids.tolist())}
    rows = []
    for query in queries:
        missing = [pid for pid in query.candidate_pids if pid not in row_of]
        if missing:
            raise InputError(queries_path, f"candidate {quote(missing[0])} is not in the gallery {gallery_path}",
                             query.line)
        rows.append(np.asarray([row_of[pid] for pid in query.candidate_pids], dtype=np.int64))
    return rows


_PLAIN_KINDS = "biufc"  # bool, integers, floats, complex: arrays of plain numbers
_LATIN1 = frozenset({"latin1", "latin-1", "iso-8859-1", "iso8859-1", "l1"})


def _refuse(what: str) -> NoReturn:
    raise pickle.UnpicklingError(f"refusing {what}: only plain numeric numpy arrays are allowed")


def _plain_dtype(dtype: Any) -> np.dtype:
    """A dtype of plain numbers (no objects, fields or sub-arrays), checked where it is used: a
    pickle may change a dtype after making it (BUILD), and numpy trusts an object dtype's data as
    pointers (an object array given a short list in its state crashes the interpreter)."""
    if (not isinstance(dtype, np.dtype) or dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None
            or dtype.kind not in _PLAIN_KINDS):
        _refuse(f"dtype {quote(dtype, 40)}")
    return dtype


def _new_dtype(*args: Any) -> np.dtype:
    return _plain_dtype(np.dtype(*args))


class _PickledArray(np.ndarray):
    """The array a pickle builds, whose state is checked before numpy takes it: a plain dtype and
    exactly the bytes its shape needs (no list of objects). Viewed as a plain ndarray once loaded."""

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            _refuse("an array state that is not (version, shape, dtype, fortran, data)")
        shape, dtype, _, data = state[-4:]
        _plain_dtype(dtype)
        if not isinstance(shape, tuple) or not all(isinstance(side, int) and side >= 0 for side in shape):
            _refuse(f"array shape {quote(shape, 40)}")
        if isinstance(data, str):  # Python 2 pickles read with encoding="latin1": one character a byte
            data = _latin1_encode(data, "latin1")
            state = (*state[:-1], data)
        if not isinstance(data, bytes | bytearray) or len(data) != math.prod(shape) * dtype.itemsize:
            _refuse("array data that is not exactly the bytes of its shape")
        super().__setstate__(state)


class _NdarrayName:
    """What ``numpy.ndarray`` resolves to: only an argument of ``_reconstruct``, never callable
    (``ndarray((10**12,), "b")`` would allocate a terabyte)."""

    def __call__(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("a call of numpy.ndarray")


def _reconstruct(subtype: Any, shape: Any, typecode: Any) -> np.ndarray:
    """numpy's ``_reconstruct(ndarray, (0,), b"b")``, the empty array its pickles fill; nothing else."""
    if not isinstance(subtype, _NdarrayName) or shape != (0,) or typecode not in (b"b", "b"):
        _refuse("_reconstruct other than of an empty ndarray")
    return np.ndarray.__new__(_PickledArray, (0,), np.int8)


def _scalar(dtype: Any, data: Any = None) -> Any:
    _plain_dtype(dtype)
    if isinstance(data, str):  # Python 2 pickles, as for arrays
        data = _latin1_encode(data, "latin1")
    if not isinstance(data, bytes) or len(data) != dtype.itemsize:
        _refuse("a numpy scalar whose data is not its dtype's bytes")
    return np.frombuffer(data, dtype)[0]


def _frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    """Protocol 5 arrays; the buffer is the pickle's own bytes, so the array is no larger."""
    _plain_dtype(dtype)
    if not isinstance(buffer, bytes | bytearray | pickle.PickleBuffer):
        _refuse("an array buffer that is not bytes")
    return np.frombuffer(buffer, dtype).reshape(shape, order=order)


def _latin1_encode(text: Any, encoding: Any = "utf-8", errors: Any = "strict") -> bytes:
    """``_codecs.encode(text, "latin1")``: how protocols 0-2 write bytes (one byte per character).
    Any other codec is refused: ``hex`` doubles its input, and 22 chained calls took 6.45 GB."""
    if not isinstance(text, str) or str(encoding).lower().replace("_", "-") not in _LATIN1 or errors != "strict":
        _refuse(f"_codecs.encode with {quote(encoding, 20)}")
    return text.encode("latin-1")


_NDARRAY = _NdarrayName()
_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _new_dtype,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.multiarray", "scalar"): _scalar,
    ("numpy._core.multiarray", "scalar"): _scalar,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,  # protocol 5 arrays
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("_codecs", "encode"): _latin1_encode,  # bytes in protocol 0-2 pickles
}


class ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickles dicts, lists, tuples, numbers, strings and plain numeric numpy arrays, and nothing else.

    Pickle runs code only through the globals it looks up; every lookup goes through
    ``find_class``, which here returns vsbench's own checked stand-ins for numpy's array
    reconstruction helpers and refuses anything else, so a hostile file fails before any of its
    callables can be reached. No stand-in can make more bytes than the pickle holds: arrays are
    built empty and filled with their exact bytes, and only latin-1 text becomes bytes.
    """

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only numpy arrays are allowed")
        return _ALLOWED_GLOBALS[module, name]


def _plain(value: Any) -> Any:
    return value.view(np.ndarray) if isinstance(value, _PickledArray) else value


def load_array_pickle(path: str | Path) -> Any:
    """A restricted pickle, read from memory after the size check (VSBENCH_MAX_ARRAY_BYTES); the
    arrays at its top level (or in its top-level dict) come back as plain ndarrays."""
    path = Path(path)
    handle = bytes_reader(path, max_bytes=max_array_bytes(), variable="VSBENCH_MAX_ARRAY_BYTES")
    try:
        data = ArrayOnlyUnpickler(handle, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, KeyError, IndexError,
            ImportError, UnicodeDecodeError, OverflowError, RecursionError) as exc:
        raise InputError(path, f"unreadable or refused pickle: {str(exc)[:100]}") from None
    except MemoryError:
        raise InputError(path, "unreadable pickle: it asks for more memory than there is") from None
    return {key: _plain(value) for key, value in data.items()} if isinstance(data, dict) else _plain(data)


FEATURE_KEYS = ("query_feature", "gallery_feature")


def read_product_features(path: str | Path, num_queries: int, num_gallery: int) -> tuple[np.ndarray, np.ndarray]:
    """``query_feature`` (N x 128) and ``gallery_feature`` (M x 128) from ``.npz`` or a safe pickle.

    Checked: both keys present, 2-D, 128 columns, floating point, finite, N and M equal to the
    number of queries and gallery rows, and every row L2-normalized within 1e-3.
    """
    path = Path(path)
    features = _load_feature_mapping(path)
    missing = [key for key in FEATURE_KEYS if key not in features]
    if missing:
        raise InputError(path, f"missing {', '.join(missing)} (found {quote(', '.join(map(str, features)))})")
    return (_checked_features(path, "query_feature", features["query_feature"], num_queries, "queries"),
            _checked_features(path, "gallery_feature", features["gallery_feature"], num_gallery, "gallery rows"))


def _load_feature_mapping(path: Path) -> dict[str, Any]:
    if zipfile.is_zipfile(path):
        return load_arrays(path, FEATURE_KEYS)  # only these members; headers first; object arrays refused
    if is_npy(path):
        check_array_file(path)  # a forged header is named as such
        raise InputError(path, f"a .npy file holds one array; the features need two, {' and '.join(FEATURE_KEYS)}: "
                               "save them with np.savez (.npz)")
    data = load_array_pickle(path)
    if not isinstance(data, dict):
        raise InputError(path, f"expected a dict of arrays, got {type(data).__name__}")
    return data


def _checked_features(path: Path, key: str, value: Any, expected_rows: int, what: str) -> np.ndarray:
    if not isinstance(value, np.ndarray) or value.ndim != 2 or value.shape[1] != FEATURE_DIM:
        shape = getattr(value, "shape", type(value).__name__)
        raise InputError(path, f"{key} must be a 2-D array with {FEATURE_DIM} columns, got {shape}")
    if not np.issubdtype(value.dtype, np.floating):
        raise InputError(path, f"{key} must hold floating-point numbers, got dtype {value.dtype}")
    if value.shape[0] != expected_rows:
        raise InputError(path, f"{key} has {value.shape[0]} rows for {expected_rows} {what}")
    if (row := _first(~np.isfinite(value).all(axis=1))) is not None:
        raise InputError(path, f"{key} row {row} has a non-finite value")
    norms = np.linalg.norm(value.astype(np.float64), axis=1)
    if (row := _first(np.abs(norms - 1.0) > NORM_TOLERANCE)) is not None:
        raise InputError(path, f"{key} row {row} has L2 norm {norms[row]:.6f}, not 1 (tolerance {NORM_TOLERANCE})")
    return value
