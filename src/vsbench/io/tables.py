"""CSV helpers shared by the result-file readers: a text table read whole as strings (so that ids
are never parsed as numbers), its header checked by name, fields checked non-empty, finite and unique;
every problem an :class:`~vsbench.io.inputs.InputError` naming the file and line.

Id columns of big tables are :class:`~vsbench.io.ids.Ids` (codes, no Python object a row)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pandas (~0.4-1.4 s) is imported by the readers that parse: a check never loads it
    import pandas as pd

from vsbench.io.ids import Ids
from vsbench.io.inputs import (
    InputError,
    check_text,
    quote,
)

# ------------------------------------------------------------------------------- CSV helpers


def read_text_csv(path: Path) -> pd.DataFrame:
    """Every field as text ("" when empty or missing), no header handling: row i is line i + 1.

    Reading without a header makes pandas refuse a line with more fields than the first one
    (with a header it may instead silently turn the first column into an index). The file passes
    the bounded checks first (size, line length, UTF-8), so pandas never sees a 2 GB line.
    """
    import pandas as pd

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


def read_headed_csv(path: Path, required: list[str]) -> pd.DataFrame:
    """A CSV whose first line names the columns; ``required`` must be among them, once each (the
    others are ignored and left out of the frame)."""
    frame = read_text_csv(path)
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


def read_headerless_csv(path: Path, names: list[str]) -> pd.DataFrame:
    """A CSV without header whose lines must all have exactly ``len(names)`` fields."""
    frame = read_text_csv(path)
    if frame.shape[1] != len(names):
        raise InputError(path, f"expected {len(names)} fields ({','.join(names)}), found {frame.shape[1]}", 1)
    frame.columns = names
    return frame


def first_true(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def check_nonempty_fields(path: Path, frame: pd.DataFrame, columns: list[str], first_line: int) -> None:
    blank = np.logical_and.reduce([frame[c].str.strip().to_numpy() == "" for c in frame.columns])
    if (row := first_true(blank)) is not None:
        raise InputError(path, "blank line", row + first_line)
    for column in columns:
        if (row := first_true(frame[column].str.strip().to_numpy() == "")) is not None:
            raise InputError(path, f"empty {column}", row + first_line)


def parse_finite(path: Path, text: pd.Series, what: str, first_line: int) -> np.ndarray:
    import pandas as pd

    values = pd.to_numeric(text.str.strip(), errors="coerce").to_numpy(dtype=np.float64)
    if (row := first_true(~np.isfinite(values))) is not None:
        raw = text.iloc[row].strip()
        if raw == "":
            problem = f"empty {what}"
        elif np.isnan(values[row]):
            problem = f"{what} is NaN" if raw.lower().lstrip("+-") == "nan" else f"{what} {quote(raw)} is not a number"
        else:
            problem = f"{what} {quote(raw)} is not finite"
        raise InputError(path, problem, row + first_line)
    return values


def check_unique_pairs(path: Path, first: Ids, second: Ids, what: str, line_numbers: Any) -> None:
    """No (first, second) pair twice; ``line_numbers[i]`` is the file line of row i (an array or
    :class:`~vsbench.benchmarks.disc.readers.RowLines`). The first
    repeat in file order is named, with the line of the pair's first occurrence. Works on the
    codes alone (one int64 key a row, sorted in place)."""
    def keys() -> np.ndarray:
        return first.codes.astype(np.int64) * max(len(second.values), 1) + second.codes

    ordered = keys()
    ordered.sort()  # in place: one int64 a row while checking; the row is looked for only if one repeats
    if (ordered[1:] == ordered[:-1]).any():
        del ordered
        pairs = keys()
        order = np.argsort(pairs, kind="stable")  # stable: each run of equal keys starts at its first occurrence
        runs = pairs[order]
        row = int(order[np.flatnonzero(runs[1:] == runs[:-1]) + 1].min())
        earlier = first_true(pairs == pairs[row])
        raise InputError(path, f"duplicate {what} (query {quote(first[row])}, reference {quote(second[row])}); "
                               f"first given on line {line_numbers[earlier]} (isc2021 refuses duplicates too)",
                         int(line_numbers[row]))

