"""Property-based fuzzing of every reader of user files and of the scorers behind them (issue 15).

The only allowed outcomes for any bytes are a valid result or vsbench's own input error
(:class:`vsbench.io.inputs.InputError`, which the CLI prints as one line with exit code 2): never
another exception type, and never more than :data:`MEMORY_LIMIT` of Python allocations (traced
with tracemalloc, which numpy reports to) for a file of at most a few kB. Inputs mix random and
truncated bytes, CSV/JSON-shaped text with huge numbers, NaN/inf, empty files, duplicate keys and
ids, and text in other encodings (latin-1, UTF-16, a byte-order mark). Examples are kept few
(``max_examples``) so the whole module runs in well under a minute within ``make test``.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vsbench.abid import readers as abid_readers
from vsbench.abid.metrics import counting_metrics, verification_metrics
from vsbench.abid.prepare import load_metadata
from vsbench.benchmarks.disc import readers as disc_readers
from vsbench.benchmarks.disc.metrics import copy_detection_metrics
from vsbench.benchmarks.patch_pairs import readers as pairs_readers
from vsbench.benchmarks.patch_pairs.adapter import read_pairs
from vsbench.benchmarks.patch_pairs.metrics import patch_pair_grid
from vsbench.benchmarks.product_search import readers as product_readers
from vsbench.benchmarks.product_search.metrics import product_search_metrics
from vsbench.benchmarks.vsd.adapter import read_metadata as read_vsd_metadata
from vsbench.io import inputs
from vsbench.io import pickles as pickles
from vsbench.io.features import load_features
from vsbench.io.inputs import InputError

MEMORY_LIMIT = 64 << 20  # bytes of traced allocations per example, for inputs of a few kB
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --- input strategies -----------------------------------------------------------------------------

NUMBERS = st.sampled_from(["0", "1", "-1", "0.5", "1e308", "1e309", "-inf", "inf", "nan", "NaN", "+nan", "9" * 400,
                           "1_000", "0x10", "", " ", "1,5", "١", "\u00a0", "3.", ".5e-400"])
WORDS = st.one_of(NUMBERS, st.text(max_size=12), st.sampled_from(
    ["query_id", "reference_id", "score", "Q1", "R1", '"Q1"', " Q1 ", "\ufeffQ1", "Image ID", "ASIN", "label"]))
LINE = st.lists(WORDS, min_size=0, max_size=4).map(",".join)
NEWLINES = st.sampled_from(["\n", "\r\n", "\r", "\n\n", "\u2028", "\x0c"])
CSV_TEXT = st.lists(st.tuples(LINE, NEWLINES), max_size=12).map(lambda rows: "".join(a + b for a, b in rows))
ENCODINGS = st.sampled_from(["utf-8", "utf-8-sig", "latin-1", "utf-16", "cp1252"])


def _encode(text: str, encoding: str) -> bytes:
    return text.encode(encoding, errors="replace")


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8)),
    lambda children: st.one_of(st.lists(children, max_size=6), st.dictionaries(st.text(max_size=6), children,
                                                                                max_size=5)),
    max_leaves=30)


def _json_text(value: Any) -> str:
    return json.dumps(value, allow_nan=True)  # NaN/Infinity tokens: Python parses them, JSON does not


JSON_TEXT = st.one_of(
    JSON_VALUES.map(_json_text),
    st.lists(st.tuples(st.integers(-3, 10**6), st.integers(-3, 12)), max_size=6).map(json.dumps),
    st.lists(st.tuples(st.integers(0, 5), st.text(max_size=4), st.integers(-1, 2), st.integers(0, 4),
                       st.integers(0, 4), st.lists(st.integers(0, 5), max_size=3)), max_size=6).map(json.dumps),
    st.just('{"a": 1, "a": 2}'), st.just("[" * 5000), st.just("1" * 5000), st.just(""),
)
DUPLICATE_KEYS = st.just('{"images": [{"id": "a", "path": "x.jpg", "phase": "q"}], "images": []}')


def _truncate(data: bytes, cut: int) -> bytes:
    return data[: cut % (len(data) + 1)]


def file_bytes(text: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """Shaped text in some encoding, perhaps truncated mid-character, or plain random bytes."""
    shaped = st.builds(_encode, text, ENCODINGS)
    return st.one_of(
        shaped,
        st.builds(_truncate, shaped, st.integers(0, 4000)),
        st.binary(max_size=300),
        st.just(b""),
    )


# --- the property ---------------------------------------------------------------------------------


def outcome(read: Callable[[Path], Any], data: bytes, name: str = "input.txt") -> Any:
    """``read`` of a file holding ``data``: its result, or None after vsbench's own InputError.

    Any other exception fails the test (hypothesis shrinks it to the smallest input), and so does
    a peak of traced memory over MEMORY_LIMIT.
    """
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        tracemalloc.start()
        try:
            return read(path)
        except InputError as exc:
            assert str(path) in str(exc) or str(path.parent) in str(exc) or "entry" in str(exc), str(exc)
            return None
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            assert peak < MEMORY_LIMIT, f"{peak / 2**20:.1f} MiB"


# --- copy detection: readers, then the scorer on whatever they accept -----------------------------

TRUTH_Q = np.asarray(["Q1", "Q2", "Q3"])
TRUTH_R = np.asarray(["R1", "R1", "R2"])


@FUZZ
@given(file_bytes(CSV_TEXT), st.booleans())
def test_copy_detection_predictions_then_scored(data: bytes, normalize: bool) -> None:
    preds = outcome(lambda p: disc_readers.read_copy_detection_predictions(p, normalize_ids=normalize), data)
    if preds is not None:
        m = copy_detection_metrics(preds.query_ids, preds.reference_ids, preds.scores, TRUTH_Q, TRUTH_R)
        assert 0.0 <= m.uap <= 1.0 and 0.0 <= m.accuracy_at_1 <= 1.0


@FUZZ
@given(file_bytes(CSV_TEXT), st.booleans())
def test_copy_detection_ground_truth(data: bytes, normalize: bool) -> None:
    truth = outcome(lambda p: disc_readers.read_copy_detection_ground_truth(p, normalize_ids=normalize), data)
    if truth is not None:
        m = copy_detection_metrics(np.asarray(["Q1"]), np.asarray(["R1"]), np.asarray([0.5]),
                                   truth.query_ids, truth.reference_ids)
        assert 0.0 <= m.uap <= 1.0


# --- HPatches-style pairs and results -------------------------------------------------------------


@FUZZ
@given(file_bytes(CSV_TEXT), st.sampled_from([None, 0, 1]))
def test_hpatches_results_then_scored(data: bytes, label: int | None) -> None:
    distances = outcome(lambda p: pairs_readers.read_hpatches_results(p, label), data, "x.results")
    if distances is not None:
        assert np.isfinite(distances).all()
        grid = patch_pair_grid({"easy": distances}, {"diffseq": distances + 1.0})
        assert all(0.0 <= m.pr.ap <= 1.0 or math.isnan(m.pr.ap) for m in grid.values())


@FUZZ
@given(file_bytes(CSV_TEXT), st.sampled_from([0, 1]))
def test_patch_pair_lists(data: bytes, label: int) -> None:
    outcome(lambda p: read_pairs(p, label), data, "x.pairs")


# --- ABID result files and task JSONs -------------------------------------------------------------


@FUZZ
@given(file_bytes(CSV_TEXT), st.integers(1, 8), st.booleans(), st.booleans())
def test_abid_result_files_then_scored(data: bytes, expected: int, binary: bool, strict: bool) -> None:
    result = outcome(lambda p: abid_readers.read_abid_result(p, expected, "truth.json", binary=binary, strict=strict), data)
    if result is not None:
        truth = np.zeros(result.values.size, dtype=np.int64)
        if binary:
            verification_metrics(result.values, truth)
        else:
            counting_metrics(result.values, truth, None)


@FUZZ
@given(file_bytes(JSON_TEXT))
def test_abid_task_jsons(data: bytes) -> None:
    for read in (abid_readers.read_counting_ground_truth, abid_readers.read_verification_ground_truth,
                 abid_readers.read_quantity_ground_truth, inputs.read_json):
        outcome(read, data, "task.json")


@FUZZ
@given(file_bytes(st.one_of(JSON_TEXT, DUPLICATE_KEYS)))
def test_abid_metadata_files_are_problems_never_errors(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "00001.json"
        path.write_bytes(data)
        raw, problems = load_metadata(path, 1)
        assert (raw is None) == bool(problems)


@FUZZ
@given(file_bytes(CSV_TEXT))
def test_index_lists(data: bytes) -> None:
    indices = outcome(inputs.read_index_list, data, "random_train.txt")
    assert indices is None or all(i >= 0 for i in indices)


# --- product search -------------------------------------------------------------------------------

QUERY_LINES = st.lists(st.one_of(
    JSON_TEXT,
    st.builds(lambda pids, labels: json.dumps({"source_pid": "s", "candidates": [
        {"candidate_pid": p, "label": v} for p, v in zip(pids, labels)]}),
        st.lists(st.sampled_from(["a", "b", "c", ""]), max_size=4),
        st.lists(st.sampled_from([0, 1, 2, 1.0, True, None, "1"]), max_size=4))), max_size=5).map("\n".join)


@FUZZ
@given(file_bytes(QUERY_LINES), file_bytes(CSV_TEXT))
def test_product_queries_gallery_then_scored(query_data: bytes, gallery_data: bytes) -> None:
    queries = outcome(product_readers.read_product_queries, query_data, "q.jsonl")
    gallery = outcome(product_readers.read_gallery_image_ids, gallery_data, "g.csv")
    if queries is None or gallery is None:
        return
    try:
        rows = product_readers.candidate_gallery_rows(queries, gallery, "q.jsonl", "g.csv")
    except InputError:
        return
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(len(queries) + gallery.size, product_readers.FEATURE_DIM)).astype(np.float32)
    feats /= np.linalg.norm(feats, axis=1, keepdims=True)
    m = product_search_metrics(feats[: len(queries)], feats[len(queries):], rows, [q.labels for q in queries])
    assert math.isnan(m.mean_average_precision) or 0.0 <= m.mean_average_precision <= 1.0


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


ARRAYS = st.sampled_from([
    np.zeros((1, 128), np.float32), np.full((1, 128), np.nan, np.float32), np.ones((2, 3)), np.asarray(["x"]),
    np.zeros((0, 128), np.float32), np.full((1, 128), 1 / math.sqrt(128), np.float64), np.asarray(7),
    np.zeros((1, 128), np.int8), np.full((1, 128), np.inf, np.float32),
])
FEATURE_BYTES = st.one_of(
    st.dictionaries(st.sampled_from(["query_feature", "gallery_feature", "ids", "features", "other"]), ARRAYS,
                    max_size=3).map(_npz),
    st.builds(_truncate, st.dictionaries(st.sampled_from(["query_feature", "features"]), ARRAYS,
                                         min_size=1, max_size=2).map(_npz), st.integers(0, 2000)),
    st.dictionaries(st.sampled_from(["query_feature", "gallery_feature"]), ARRAYS, max_size=2).map(pickle.dumps),
    st.binary(max_size=300).map(lambda b: b"PK\x03\x04" + b),
    st.binary(max_size=300).map(lambda b: b"\x93NUMPY" + b),
    st.binary(max_size=300),
)


@FUZZ
@given(FEATURE_BYTES)
def test_feature_files(data: bytes) -> None:
    outcome(lambda p: product_readers.read_product_features(p, 1, 1), data, "features.npz")
    outcome(load_features, data, "features.npz")
    outcome(inputs.load_arrays, data, "features.npz")


# --- metadata of the VSD benchmark and YAML configs -----------------------------------------------


@FUZZ
@given(file_bytes(st.one_of(JSON_TEXT, DUPLICATE_KEYS)))
def test_vsd_metadata(data: bytes) -> None:
    outcome(read_vsd_metadata, data, "metadata.json")


YAML_TEXT = st.one_of(JSON_TEXT, CSV_TEXT, st.just("a: [1, 2\n"), st.just("- " * 3000), st.just("&a [*a]"),
                      st.just("entries:\n  - {model: x, benchmark: y}\n  - {model: x, benchmark: y}\n"))


@FUZZ
@given(file_bytes(YAML_TEXT))
def test_yaml_configs(data: bytes) -> None:
    from vsbench.platform.cluster import ClusterSettings
    from vsbench.runspec.suite import Suite

    outcome(inputs.read_yaml, data, "c.yaml")
    for load in (Suite.load, ClusterSettings.load):
        try:
            outcome(load, data, "c.yaml")
        except AssertionError:
            raise
        except ValueError as exc:  # pydantic's ValidationError: the config's fields, one line in the CLI
            assert "c.yaml" in str(exc) or "validation error" in str(exc)


@pytest.mark.parametrize("size", [0, 1, 4096])
def test_an_empty_or_zero_filled_file_is_an_input_error_for_every_line_reader(size: int) -> None:
    for read in (disc_readers.read_copy_detection_predictions, disc_readers.read_copy_detection_ground_truth,
                 abid_readers.read_int_lines, product_readers.read_product_queries, product_readers.read_gallery_image_ids,
                 lambda p: pairs_readers.read_hpatches_results(p, 1)):
        assert outcome(read, b"\0" * size) is None


# --- issue 28: huge integers, headers by name, the line of a bad byte, pickles that grow -------------

HUGE_INTEGERS = st.one_of(st.integers(-(2**70), 2**70), st.sampled_from(
    [20_000, 10**9, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 3_037_000_500, 10**20]))


@FUZZ
@given(st.lists(HUGE_INTEGERS, min_size=1, max_size=6), st.lists(HUGE_INTEGERS, min_size=1, max_size=6))
def test_counting_with_huge_answers_and_counts_is_scored_or_refused_in_bounded_memory(
        answers: list[int], counts: list[int]) -> None:
    truth_data = json.dumps([[i, c] for i, c in enumerate(counts)]).encode()
    truth = outcome(abid_readers.read_counting_ground_truth, truth_data, "counting_val.json")
    if truth is None:
        return

    def read_and_score(path: Path) -> Any:
        result = abid_readers.read_abid_result(path, truth.size, "counting_val.json", binary=False)
        m = counting_metrics(result.values, truth[: result.values.size], None)
        assert m.confusion_matrix.size <= 1000 * 1000 and m.per_class_count.size <= 1000
        assert 0.0 <= m.accuracy <= 1.0 and m.rmse >= 0.0
        return m

    outcome(read_and_score, "".join(f"{a}\n" for a in answers).encode(), "counting_result.txt")


HEADER_NAMES = st.sampled_from(["query_id", "reference_id", "score", "Image ID", "ASIN", " query_id", "x"])
HEADED_CSV = st.builds(lambda names, body: ",".join(names) + "\n" + body,
                       st.lists(HEADER_NAMES, min_size=1, max_size=4), CSV_TEXT)


@FUZZ
@given(file_bytes(HEADED_CSV), st.booleans())
def test_headers_in_any_order_or_repeated(data: bytes, normalize: bool) -> None:
    outcome(lambda p: disc_readers.read_copy_detection_predictions(p, normalize_ids=normalize), data)
    outcome(lambda p: disc_readers.read_copy_detection_ground_truth(p, normalize_ids=normalize), data)
    outcome(product_readers.read_gallery_image_ids, data, "g.csv")


@FUZZ
@given(st.lists(st.sampled_from(["a", "bb", "", "1,2", "x" * 3000]), min_size=1, max_size=4000),
       st.integers(0, 10**6), st.sampled_from([b"\xff", b"\xe2\x82", b"\xc3"]), st.sampled_from(["\n", "\r\n", "\r"]))
def test_a_bad_byte_is_reported_on_its_own_line(lines: list[str], where: int, bad: bytes, newline: str) -> None:
    line = where % len(lines)
    encoded = [text.encode() for text in lines]
    encoded[line] += bad + (b"x" if bad != b"\xff" else b"")
    data = newline.encode().join(encoded)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "x.txt"
        path.write_bytes(data)
        with pytest.raises(InputError, match=rf"x.txt:{line + 1}: not UTF-8"):
            inputs.read_lines(path)


PICKLED = st.builds(lambda arrays, protocol: pickle.dumps(arrays, protocol=protocol),
                    st.dictionaries(st.sampled_from(["query_feature", "gallery_feature", "n"]), st.one_of(
                        ARRAYS.filter(lambda a: a.dtype.kind != "U"), st.integers(), st.text(max_size=4)),
                        max_size=3),
                    st.integers(0, 5))


def _mutate(data: bytes, at: int, byte: int) -> bytes:
    at %= len(data)
    return data[:at] + bytes([byte]) + data[at + 1:]


def _codec_chain(codec: str, rounds: int) -> bytes:
    out = b"\x80\x02" + b"c_codecs\nencode\n" * rounds + b"X\x40\x00\x00\x00" + b"x" * 64 + b"X\x06\x00\x00\x00latin1\x86R"
    word = codec.encode()
    return out + (b"X" + len(word).to_bytes(4, "little") + word + b"\x86R") * (rounds - 1) + b"."


@FUZZ
@given(st.one_of(PICKLED, st.builds(_mutate, PICKLED, st.integers(0, 10**4), st.integers(0, 255)),
                 st.builds(_codec_chain, st.sampled_from(["hex", "base64", "zlib", "rot13", "latin1", "utf-16"]),
                           st.integers(1, 30))))
def test_restricted_pickles_never_grow_past_their_bytes(data: bytes) -> None:
    outcome(pickles.load_array_pickle, data, "features.pkl")
    outcome(lambda p: product_readers.read_product_features(p, 1, 1), data, "features.pkl")
