"""HPatches ``.results`` files (``distance,label`` lines, no header)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vsbench.io.inputs import (
    InputError,
    names_memory_errors,
    quote,
)
from vsbench.io.tables import (
    check_nonempty_fields,
    first_true,
    parse_finite,
    read_headerless_csv,
)

# ---------------------------------------------------------------------------------- HPatches


@names_memory_errors
def read_hpatches_results(path: str | Path, expected_label: int | None = None) -> np.ndarray:
    """Distances of a ``.results`` file (``distance,label`` lines, no header), in file order.

    Labels must be 0 (negative pair) or 1 (positive pair); with ``expected_label`` every line must
    carry it (a positives file holds only 1s), which catches swapped or mixed files.
    """
    path = Path(path)
    frame = read_headerless_csv(path, ["distance", "label"])
    if frame.empty:
        raise InputError(path, "file is empty")
    check_nonempty_fields(path, frame, ["distance", "label"], first_line=1)
    distances = parse_finite(path, frame["distance"], "distance", first_line=1)
    labels = frame["label"].str.strip().to_numpy()
    if (row := first_true(~np.isin(labels, ("0", "1")))) is not None:
        raise InputError(path, f"label {quote(labels[row])} is not 0 or 1", row + 1)
    if expected_label is not None and (row := first_true(labels != str(expected_label))) is not None:
        kind = "positives" if expected_label == 1 else "negatives"
        raise InputError(path, f"label {labels[row]} in a {kind} file", row + 1)
    return distances
