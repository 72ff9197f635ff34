"""Product-search files: the queries JSONL (each candidate ``{"candidate_pid": <gallery Image ID>,
"label": 0|1}``; ``label`` is our name for the fulfil annotation, which the public file hides),
the gallery CSV, and the 128-d features: ``.npz`` (no pickle; only the two feature members are
opened, each checked from its header first) or the upstream pickle through :mod:`vsbench.io.pickles`."""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.io.inputs import (
    InputError,
    check_array_file,
    is_npy,
    iter_lines,
    load_arrays,
    names_memory_errors,
    parse_json,
    quote,
)
from vsbench.io.pickles import load_array_pickle
from vsbench.io.tables import (
    check_nonempty_fields,
    first_true,
    read_headed_csv,
)

# ---------------------------------------------------------------------------- product search

FEATURE_DIM = 128  # the challenge's submission format
NORM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class ProductQuery:
    line: int
    source_pid: str
    candidate_pids: tuple[str, ...]
    labels: tuple[int, ...]


@names_memory_errors
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
    if len(set(pids)) != len(pids):  # its label would count twice in the query's AP: name it (issue 54)
        repeated = next(pid for i, pid in enumerate(pids) if pid in pids[:i])
        raise InputError(path, f"candidate_pid {quote(repeated)} appears twice in one query (candidates "
                               f"{pids.index(repeated) + 1} and {pids.index(repeated, pids.index(repeated) + 1) + 1}); "
                               "keep one", number)
    return ProductQuery(number, str(record.get("source_pid", "")), tuple(pids), tuple(labels))


@names_memory_errors
def read_gallery_image_ids(path: str | Path) -> np.ndarray:
    """``Image ID`` column of the gallery CSV (header ``ASIN, Image ID``), in file order."""
    path = Path(path)
    frame = read_headed_csv(path, ["Image ID"])
    check_nonempty_fields(path, frame, ["Image ID"], first_line=2)
    import pandas as pd  # here, not at the top: loading the benchmark's module (a check) needs no pandas

    ids = frame["Image ID"].str.strip().to_numpy()
    if (row := first_true(pd.Series(ids).duplicated().to_numpy())) is not None:
        earlier = first_true(ids == ids[row])
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
    if (row := first_true(~np.isfinite(value).all(axis=1))) is not None:
        raise InputError(path, f"{key} row {row} has a non-finite value")
    norms = np.linalg.norm(value.astype(np.float64), axis=1)
    if (row := first_true(np.abs(norms - 1.0) > NORM_TOLERANCE)) is not None:
        raise InputError(path, f"{key} row {row} has L2 norm {norms[row]:.6f}, not 1 (tolerance {NORM_TOLERANCE})")
    return value
