"""Bounded reading (vsbench.io.inputs): the hostile files of issue 15 fail fast, in little memory,
with a message that names the file, the limit and its variable, and quotes at most ~100 characters."""

from __future__ import annotations

import io
import pickle
import struct
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vsbench.abid import readers as abid_readers
from vsbench.benchmarks.disc import readers as disc_readers
from vsbench.benchmarks.patch_pairs import readers as pairs_readers
from vsbench.benchmarks.product_search import readers as product_readers
from vsbench.cli.app import app
from vsbench.io import inputs
from vsbench.io.inputs import InputError

GIB = 1 << 30


def _sparse(path: Path, size: int) -> Path:
    with path.open("wb") as handle:
        handle.truncate(size)  # no disk used: one 2 GB "line" of NUL bytes
    return path


def test_a_2gb_file_without_newline_is_refused_in_a_second_with_a_short_message(tmp_path: Path) -> None:
    """On main: 83 s, 12.7 GB of memory, and the 2 GB "header" echoed back."""
    big = _sparse(tmp_path / "preds.csv", 2 * GIB)
    (tmp_path / "gt.csv").write_text("query_id,reference_id\nQ1,R1\n")
    started = time.perf_counter()
    result = CliRunner().invoke(app, ["score", "copy-detection", "--predictions", str(big), "--gt",
                                      str(tmp_path / "gt.csv"), "--output", str(tmp_path / "m.json")])
    assert time.perf_counter() - started < 10
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert len(result.stderr) < 400
    assert "file is 2.0 GiB, over the 1.0 GiB limit" in result.stderr and "VSBENCH_MAX_TEXT_BYTES" in result.stderr


def test_past_the_size_check_the_line_cap_stops_the_read_in_bounded_memory(tmp_path: Path, monkeypatch) -> None:
    big = _sparse(tmp_path / "preds.csv", 2 * GIB)
    monkeypatch.setenv("VSBENCH_MAX_TEXT_BYTES", str(4 * GIB))
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(InputError) as raised:
            disc_readers.read_copy_detection_predictions(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 10
    assert peak < 32 << 20, f"{peak / 2**20:.0f} MiB"
    message = str(raised.value)
    assert message.startswith(f"{big}:1: line is longer than 1,048,576 characters")
    assert "VSBENCH_MAX_LINE_CHARS" in message and len(message) < 400


def test_the_line_cap_is_configurable_and_counts_every_reader(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("VSBENCH_MAX_LINE_CHARS", "20")
    path = tmp_path / "r.txt"
    path.write_text("1\n0\n" + "1" * 21 + "\n")
    with pytest.raises(InputError, match=r"r\.txt:3: line is longer than 20 characters"):
        abid_readers.read_int_lines(path)
    (tmp_path / "x.results").write_text("0.5,1\n" + "9" * 30 + ",1\n")
    with pytest.raises(InputError, match=r"x\.results:2: line is longer than 20 characters"):
        pairs_readers.read_hpatches_results(tmp_path / "x.results")  # checked before pandas reads it


def test_a_json_over_its_cap_is_refused_before_it_is_read(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("VSBENCH_MAX_JSON_BYTES", "100")
    path = tmp_path / "counting_val.json"
    path.write_text("[" + ",".join(["[1, 2]"] * 40) + "]")
    with pytest.raises(InputError, match=r"file is \d+ bytes, over the 100 bytes limit .*VSBENCH_MAX_JSON_BYTES"):
        abid_readers.read_counting_ground_truth(path)


@pytest.mark.parametrize("text", ["[" * 100_000, "1" * 5000, '{"a": 1' + "}" * 3])
def test_json_that_breaks_pythons_parser_in_other_ways_is_an_input_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(InputError, match=r"t\.json: (JSON nested too deeply|not valid JSON)"):
        inputs.read_json(path)


def test_messages_quote_at_most_100_characters_of_input(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("query_id,reference_id,score\nQ1,R1," + "x" * 5000 + "\n")
    with pytest.raises(InputError) as raised:
        disc_readers.read_copy_detection_predictions(path)
    assert "... (5,000 characters)" in str(raised.value) and len(str(raised.value)) < len(str(path)) + 200


def test_an_npy_header_declaring_a_huge_array_is_refused_before_allocation(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": (10**9, 10**4)})
    path = tmp_path / "f.npy"
    path.write_bytes(buffer.getvalue() + b"\0" * 64)
    with pytest.raises(InputError, match=r"declares \(1000000000, 10000\) float32 .* truncated or forged"):
        inputs.load_arrays(path)


def test_an_npz_member_declaring_more_than_it_holds_is_refused(tmp_path: Path) -> None:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**6, 128)})
    path = tmp_path / "features.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("ids.npy", _npy(np.asarray(["a"])))
        archive.writestr("features.npy", header.getvalue() + b"\0" * 16)
    from vsbench.io.features import FeatureError, load_features

    with pytest.raises(FeatureError, match="features.npy: header declares"):
        load_features(path)
    assert issubclass(FeatureError, InputError)


def test_the_array_cap_is_stated_and_configurable(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "f.npz"
    np.savez(path, ids=np.asarray(["a", "b"]), features=np.ones((2, 64), np.float32))
    monkeypatch.setenv("VSBENCH_MAX_ARRAY_BYTES", "256")
    with pytest.raises(InputError, match=r"arrays of .* over the 256 bytes limit \(set VSBENCH_MAX_ARRAY_BYTES"):
        inputs.load_arrays(path)


def test_a_pickle_declaring_a_terabyte_string_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "features.pkl"
    path.write_bytes(b"\x80\x04" + b"\x8e" + struct.pack("<Q", 1 << 40) + b"abc")  # BINBYTES8 of 1 TB
    with pytest.raises(InputError, match="unreadable (or refused )?pickle"):
        product_readers.read_product_features(path, 1, 1)
    path.write_bytes(pickle.dumps({"query_feature": 1}))
    with pytest.raises(InputError):
        product_readers.read_product_features(path, 1, 1)


def test_a_folder_or_a_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a folder"):
        abid_readers.read_int_lines(tmp_path)
    with pytest.raises(InputError, match="file not found"):
        inputs.read_yaml(tmp_path / "suite.yaml")


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()
