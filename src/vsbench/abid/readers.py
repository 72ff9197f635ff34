"""ABID result and ground-truth files. Result files: one integer per line (Python's ``int()``);
blank lines at the very end are ignored, blank lines elsewhere are errors. :func:`read_abid_result`
scores what the challenge scripts score (a short file's prefix, any integer) with notes; ``strict``
refuses those."""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.abid.metrics import max_count_classes
from vsbench.io.inputs import (
    InputError,
    iter_lines,
    names_memory_errors,
    quote,
    read_json,
)
from vsbench.io.tables import (
    first_true,
)

# -------------------------------------------------------------------------------------- ABID


@names_memory_errors
def read_int_lines(path: str | Path) -> np.ndarray:
    """One integer per line (``counting_result.txt`` and the verification result files)."""
    path = Path(path)
    values = array("q")  # 8 bytes a line, read one line at a time (a list of str was ~29x a 2-byte line)
    blank: int | None = None  # the first blank line since the last number: an error unless only blanks follow
    for number, line in iter_lines(path):
        text = line.strip()
        if not text:
            blank = blank or number
            continue
        if blank is not None:
            raise InputError(path, "blank line", blank)
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
    return np.frombuffer(values, dtype=np.int64)


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _too_many_digits(text: str) -> bool:
    """Whether ``int(text)`` failed only on Python's digit limit (``sys.set_int_max_str_digits``)."""
    digits = text.strip().lstrip("+-").replace("_", "")
    return digits.isdigit() and len(digits) > sys.get_int_max_str_digits() > 0


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


@names_memory_errors
def read_counting_ground_truth(path: str | Path) -> np.ndarray:
    """Counts of ``counting_{val,train}[_hard].json``: ``[[idx, quantity], ...]``."""
    path = Path(path)
    entries = _entries(path, 2, "[image_index, quantity]")
    cap = max_count_classes()
    quantities = [_int_field(path, n, e[1], "quantity") for n, e in enumerate(entries, 1)]
    _refuse_repeats(path, [(repr(e[0]), f"image {quote(e[0], 40)}", f"quantity {q}") for e, q in zip(entries, quantities)],
                    "an image has one count; keep one entry per image")
    if (row := first_true(np.asarray([q >= cap for q in quantities]))) is not None:
        raise InputError(path, f"entry {row + 1}: quantity {quote(quantities[row], 40)} is over the largest count "
                               f"scored, {cap - 1} (set VSBENCH_MAX_COUNT_CLASSES to raise it)")
    return np.asarray(quantities, dtype=np.int64)


@names_memory_errors
def read_verification_ground_truth(path: str | Path) -> np.ndarray:
    """Answers of ``obj_verification_val.json``: ``[idx, asin, 1|0, [train idxs]]``."""
    path = Path(path)
    entries = _entries(path, 3, "[image_index, asin, 0|1, [train indices]]")
    labels = [_int_field(path, n, e[2], "label", (0, 1)) for n, e in enumerate(entries, 1)]
    # The same (image, asin) twice with one label is scored twice, as the challenge's script does
    # (the score command warns); with two labels it is a question with two true answers: refused.
    first: dict[str, tuple[int, int]] = {}
    for number, (entry, label) in enumerate(zip(entries, labels), start=1):
        seen = first.setdefault(repr(entry[:2]), (number, label))
        if seen[1] != label:
            raise InputError(path, f"image {quote(entry[0], 40)}, asin {quote(entry[1], 40)} is listed twice with "
                                   f"two answers, entries {seen[0]} (label {seen[1]}) and {number} (label {label}); "
                                   "keep the entry that is true")
    return np.asarray(labels, dtype=np.int64)


def repeated_questions(ids: np.ndarray) -> list[str]:
    """The question ids :func:`vsbench.abid.units.question_ids` gave a repeated copy (``#2``, ...)."""
    import re

    return [i for i in np.asarray(ids, dtype=str).tolist() if re.search(r"#\d+$", i)]


@names_memory_errors
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
    _refuse_repeats(path, [(repr(e[:2] + e[4:5]), f"image {quote(e[0], 40)}, asin {quote(e[1], 40)}, asked quantity {e[4]}",
                            f"true quantity {e[3]}") for e in entries],
                    "each question is asked once; keep one entry per (image, asin, asked quantity)")
    return np.asarray(labels, dtype=np.int64)


def _refuse_repeats(path: Path, keyed: list[tuple[str, str, str]], fix: str) -> None:
    """Refuse a ground truth that asks one question twice (issue 54), naming the question, both
    entries and their answers: the scorers count every entry, so a repeated question weighs twice in
    accuracy and RMSE (and answers the same prediction twice, or contradicts itself), silently."""
    first: dict[str, tuple[int, str]] = {}  # the question's JSON values (repr: 5 and "5" differ) -> its entry
    for number, (key, name, answer) in enumerate(keyed, start=1):
        seen = first.setdefault(key, (number, answer))
        if seen[0] != number:
            same = "the same answer" if seen[1] == answer else f"{seen[1]}, then {answer}"
            raise InputError(path, f"{name} is listed twice, entries {seen[0]} and {number} ({same}); {fix}")


@names_memory_errors
def read_question_ids(path: str | Path, task: str) -> np.ndarray:
    """Stable ids of a task file's questions, in file order (:func:`vsbench.abid.units.question_ids`):
    what two runs over the same task file are paired on. ``task``: counting, verification, quantity."""
    from vsbench.abid.units import question_ids

    return question_ids(read_task_entries(path, task), task)


@names_memory_errors
def read_task_entries(path: str | Path, task: str) -> list[list[Any]]:
    """A task file's questions as its JSON lists, each checked to hold the fields ``task`` (counting,
    verification, quantity) needs; the field values are the file's (the failure sheets check the image
    index they show)."""
    path = Path(path)
    least = {"counting": 2, "verification": 3, "quantity": 5}.get(task, 0)
    return _entries(path, least, f"an ABID {task} question")


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
    if (row := first_true(bad)) is not None:
        if strict:
            raise InputError(path, f"{values[row]} is not {allowed}", row + 1)
        notes.append(f"{path}:{row + 1}: {int(np.count_nonzero(bad))} answer(s) are not {allowed} (e.g. {values[row]}); "
                     f"the challenge script scores them as wrong answers, and so does this score; {STRICT_HINT}")
    return AbidResult(values, tuple(notes))


def read_abid_predictions(path: str | Path, expected: int, truth_path: str | Path, *, binary: bool) -> np.ndarray:
    """A result file that must answer every entry with 0/1 or a count >= 0 (vsbench's own pipelines
    write these files, so anything else is a bug there): :func:`read_abid_result` with ``strict``."""
    return read_abid_result(path, expected, truth_path, binary=binary, strict=True).values
