"""``vsbench.io.ids.numpy_texts`` gives exactly the ``U`` array the Python-str way gave (issue 54:
the copy-detection unit ids and reference categories are built with it, and their Parquet bytes
must not change)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from vsbench.io.ids import numpy_texts


@pytest.mark.parametrize("texts", [["Q1", "Q22", ""], ["a\x00"], [""], [], ["é", "x"], ["abc"] * 3, ["a", None]])
@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_same_array_as_through_python_strings(texts: list, kind: pa.DataType) -> None:
    array = pa.array(texts, type=kind)
    for values in (array, array.slice(1), pa.chunked_array([array, array])):
        got, expected = numpy_texts(values), np.asarray(values.to_pylist(), dtype=str)
        assert got.dtype == expected.dtype and np.array_equal(got, expected)
