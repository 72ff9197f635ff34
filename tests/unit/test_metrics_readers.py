"""File readers: valid files parse; every bad file names itself and the line or entry."""

from __future__ import annotations

import collections
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from vsbench.abid import readers as abid_readers
from vsbench.benchmarks.disc import readers as disc_readers
from vsbench.benchmarks.patch_pairs import readers as pairs_readers
from vsbench.benchmarks.product_search import readers as product_readers
from vsbench.io.inputs import InputError


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------- copy detection

GOOD_PREDS = "query_id,reference_id,score\nQ1,R1,0.9\nQ1,R2,0.5\nQ2,R1,-1e-3\n"


def test_predictions_parse(tmp_path: Path) -> None:
    p = disc_readers.read_copy_detection_predictions(_write(tmp_path, "p.csv", GOOD_PREDS))
    assert p.query_ids.tolist() == ["Q1", "Q1", "Q2"] and p.reference_ids.tolist() == ["R1", "R2", "R1"]
    np.testing.assert_allclose(p.scores, [0.9, 0.5, -1e-3])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD_PREDS + "Q1,R2,0.1\n",
         r"p\.csv:5: duplicate prediction \(query 'Q1', reference 'R2'\); first given on line 3"),
        (GOOD_PREDS + "Q3,R3,nan\n", r"p\.csv:5: score is NaN"),
        (GOOD_PREDS + "Q3,R3,high\n", r"p\.csv:5: score 'high' is not a number"),
        (GOOD_PREDS + "Q3,R3,\n", r"p\.csv:5: empty score"),
        (GOOD_PREDS + "Q3,R3\n", r"p\.csv:5: expected 3 comma-separated fields .* found 2"),
        ("query_id,reference_id,score\nQ1,R1,0.9\n\nQ2,R1,0.1\n", r"p\.csv:3: blank line"),
        ("query_id,reference_id,score\nQ1,R1,0.9,7\n", r"p\.csv:2: expected 3 comma-separated fields"),
        ("query_id,score\nQ1,0.9\n", r"p\.csv:1: missing column\(s\) reference_id"),
        ("", r"p\.csv: file is empty"),
        ("query_id,reference_id,score\n", r"p\.csv: no predictions"),
    ],
)
def test_bad_predictions(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        disc_readers.read_copy_detection_predictions(_write(tmp_path, "p.csv", text))


def test_predictions_as_isc2021_reads_them(tmp_path: Path) -> None:
    # No header, inf scores, Python float syntax, CR line ends, the header repeated mid-file.
    text = "Q1,R1,inf\rQ1,R2,-inf\r\nquery_id,reference_id,score\nQ2,R1,1_000\n,R3, 2.5 \n"
    p = disc_readers.read_copy_detection_predictions(_write(tmp_path, "p.csv", text))
    assert p.query_ids.tolist() == ["Q1", "Q1", "Q2", ""] and p.scores.tolist() == [np.inf, -np.inf, 1000.0, 2.5]
    assert not p.notes
    # Columns named in another order, with an extra one (isc2021 fails on this file).
    named = disc_readers.read_copy_detection_predictions(_write(tmp_path, "n.csv", "score,x,reference_id,query_id\n0.5,a,R1,Q1\n"))
    assert (named.query_ids.tolist(), named.reference_ids.tolist(), named.scores.tolist()) == (["Q1"], ["R1"], [0.5])


def test_padded_and_quoted_ids_are_literal_with_a_note(tmp_path: Path) -> None:
    path = _write(tmp_path, "p.csv", 'Q1, R1,0.9\n"Q2",R2,0.5\n')
    literal = disc_readers.read_copy_detection_predictions(path)
    assert literal.query_ids.tolist() == ["Q1", '"Q2"'] and literal.reference_ids.tolist() == [" R1", "R2"]
    assert len(literal.notes) == 2 and all("--normalize-ids" in n for n in literal.notes)
    assert "line 2: '\"Q2\"'" in literal.notes[0] and "line 1: ' R1'" in literal.notes[1]
    clean = disc_readers.read_copy_detection_predictions(path, normalize_ids=True)
    assert clean.query_ids.tolist() == ["Q1", "Q2"] and clean.reference_ids.tolist() == ["R1", "R2"]
    assert not clean.notes


def test_ground_truth_header_optional_and_empty_reference(tmp_path: Path) -> None:
    for text in ("query_id,reference_id\nQ1,R1\nQ2,\nQ3,R3\n", "Q1,R1\nQ2,\nQ3,R3\n"):
        gt = disc_readers.read_copy_detection_ground_truth(_write(tmp_path, "gt.csv", text))
        assert gt.query_ids.tolist() == ["Q1", "Q3"] and gt.reference_ids.tolist() == ["R1", "R3"]
        assert gt.listed_queries.tolist() == ["Q1", "Q2", "Q3"]


def test_ground_truth_duplicate_pairs_are_kept(tmp_path: Path) -> None:
    gt = disc_readers.read_copy_detection_ground_truth(_write(tmp_path, "gt.csv", "query_id,reference_id\nQ1,R1\nQ2,\nQ1,R1\n"))
    assert gt.query_ids.tolist() == ["Q1", "Q1"]  # isc2021 counts the pair twice; the scorer notes it


def test_ground_truth_odd_header_is_a_pair_as_in_isc2021(tmp_path: Path) -> None:
    path = _write(tmp_path, "gt.csv", "query_id, reference_id\nQ1,R1\n")
    gt = disc_readers.read_copy_detection_ground_truth(path)
    assert gt.query_ids.tolist() == ["query_id", "Q1"] and "looks like a header" in gt.notes[0]
    assert disc_readers.read_copy_detection_ground_truth(path, normalize_ids=True).query_ids.tolist() == ["Q1"]


@pytest.mark.parametrize(("text", "message"), [
    ("query_id,reference_id\nQ1,\n", r"gt\.csv: no \(query, reference\) pair"),
    ("Q1,R1\n\nQ2,R2\n", r"gt\.csv:2: blank line"),
    ("Q1,R1,R2\n", r"gt\.csv:1: expected 2 comma-separated fields"),
])
def test_bad_ground_truth(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        disc_readers.read_copy_detection_ground_truth(_write(tmp_path, "gt.csv", text))


def test_unknown_queries_are_counted_not_rejected(tmp_path: Path) -> None:
    preds = disc_readers.read_copy_detection_predictions(_write(tmp_path, "p.csv", GOOD_PREDS + "Q9,R1,0.3\n"))
    gt = disc_readers.read_copy_detection_ground_truth(_write(tmp_path, "gt.csv", "Q1,R1\nQ2,\n"))
    assert disc_readers.count_unknown_queries(preds, gt) == 1


# ------------------------------------------------------------------------------- HPatches


def test_hpatches_results(tmp_path: Path) -> None:
    path = _write(tmp_path, "test_pos_easy.results", "1.2,1\n0.1,1\n")
    np.testing.assert_allclose(pairs_readers.read_hpatches_results(path, expected_label=1), [1.2, 0.1])


@pytest.mark.parametrize(
    ("text", "label", "message"),
    [
        ("1.2,1\n0.1,0\n", 1, r"x\.results:2: label 0 in a positives file"),
        ("1.2,0\n0.1,2\n", None, r"x\.results:2: label '2' is not 0 or 1"),
        ("1.2,0\nnan,0\n", None, r"x\.results:2: distance is NaN"),
        ("1.2,0,5\n", None, r"x\.results:1: expected 2 fields"),
        ("", None, r"x\.results: file is empty"),
    ],
)
def test_bad_hpatches_results(tmp_path: Path, text: str, label: int | None, message: str) -> None:
    with pytest.raises(InputError, match=message):
        pairs_readers.read_hpatches_results(_write(tmp_path, "x.results", text), expected_label=label)


# ------------------------------------------------------------------------------------ ABID


def test_int_lines_tolerate_trailing_blank_lines_only(tmp_path: Path) -> None:
    assert abid_readers.read_int_lines(_write(tmp_path, "r.txt", "1\n 2 \n0\n\n\n")).tolist() == [1, 2, 0]
    with pytest.raises(InputError, match=r"r\.txt:2: blank line"):
        abid_readers.read_int_lines(_write(tmp_path, "r.txt", "1\n\n2\n"))
    with pytest.raises(InputError, match=r"r\.txt:2: '1\.5' is not an integer"):
        abid_readers.read_int_lines(_write(tmp_path, "r.txt", "1\n1.5\n"))


def test_abid_predictions_length_and_values(tmp_path: Path) -> None:
    path = _write(tmp_path, "counting_result.txt", "1\n2\n")
    with pytest.raises(InputError, match=r"counting_result\.txt: 2 lines for 3 entries in counting_val\.json"):
        abid_readers.read_abid_predictions(path, 3, "counting_val.json", binary=False)
    with pytest.raises(InputError, match=r"counting_result\.txt:2: 2 is not 0 or 1"):
        abid_readers.read_abid_predictions(path, 2, "gt.json", binary=True)
    with pytest.raises(InputError, match=r"neg\.txt:1: -1 is not a non-negative count"):
        abid_readers.read_abid_predictions(_write(tmp_path, "neg.txt", "-1\n"), 1, "gt.json", binary=False)


def test_abid_ground_truth_files(tmp_path: Path) -> None:
    counting = _write(tmp_path, "counting_val.json", json.dumps([[4, 4], [5, 0]]))
    assert abid_readers.read_counting_ground_truth(counting).tolist() == [4, 0]
    verification = _write(tmp_path, "v.json", json.dumps([[3, "B0", 1, [1, 2]], [7, "B1", 0, [9]]]))
    assert abid_readers.read_verification_ground_truth(verification).tolist() == [1, 0]
    quantity = _write(tmp_path, "q.json", json.dumps([[74, "B0", 0, 2, 1, [5]], [108, "B1", 1, 2, 2, [109]]]))
    assert abid_readers.read_quantity_ground_truth(quantity).tolist() == [0, 1]


@pytest.mark.parametrize(
    ("reader", "data", "message"),
    [
        (abid_readers.read_counting_ground_truth, [[4, 4], [5, -1]], r"entry 2: quantity must be a non-negative"),
        (abid_readers.read_counting_ground_truth, [[4, 4], [5]], r"entry 2: expected \[image_index, quantity\]"),
        (abid_readers.read_counting_ground_truth, {"a": 1}, r"expected a non-empty JSON list"),
        (abid_readers.read_verification_ground_truth, [[3, "B0", 2, []]], r"entry 1: label must be 0 or 1"),
        (abid_readers.read_verification_ground_truth, [[3, "B0", True, []]], r"entry 1: label must be 0 or 1"),
        (abid_readers.read_quantity_ground_truth, [[74, "B0", 1, 2, 1, []]], r"entry 1: label 1 contradicts"),
    ],
)
def test_bad_abid_ground_truth(tmp_path: Path, reader, data: object, message: str) -> None:
    with pytest.raises(InputError, match=r"gt\.json: " + message):
        reader(_write(tmp_path, "gt.json", json.dumps(data)))


def test_invalid_json_is_reported(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"gt\.json: not valid JSON"):
        abid_readers.read_counting_ground_truth(_write(tmp_path, "gt.json", "[[1, 2],"))


# ---------------------------------------------------------------------------- product search


def _query(pids: list[str], labels: list[int]) -> str:
    return json.dumps({"index": 1, "source_pid": "S", "feedback1": "a", "feedback2": "b", "feedback3": "c",
                       "candidates": [{"candidate_pid": p, "label": lab} for p, lab in zip(pids, labels)]})


def test_product_queries_and_gallery(tmp_path: Path) -> None:
    queries = product_readers.read_product_queries(_write(tmp_path, "q.jsonl", _query(["a", "b"], [1, 0]) + "\n\n"
                                                  + _query(["c"], [0]) + "\n"))
    assert [q.line for q in queries] == [1, 3] and queries[0].labels == (1, 0)
    gallery = product_readers.read_gallery_image_ids(_write(tmp_path, "g.csv", "ASIN, Image ID\nB1, a\nB2,b\nB3,c\n"))
    assert gallery.tolist() == ["a", "b", "c"]
    rows = product_readers.candidate_gallery_rows(queries, gallery, "q.jsonl", "g.csv")
    assert [r.tolist() for r in rows] == [[0, 1], [2]]
    with pytest.raises(InputError, match=r"q\.jsonl:3: candidate 'c' is not in the gallery g\.csv"):
        product_readers.candidate_gallery_rows(queries, gallery[:2], "q.jsonl", "g.csv")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"q\.jsonl:2: not valid JSON"),
        (json.dumps({"candidates": [{"label": 1}]}), r"q\.jsonl:2: candidate 1: missing 'candidate_pid'"),
        (json.dumps({"candidates": [{"candidate_pid": "x", "label": 2}]}),
         r"q\.jsonl:2: candidate 1: 'label' must"),
        (json.dumps({"candidates": [{"candidate_pid": "x"}]}), r"q\.jsonl:2: candidate 1: 'label' must"),
        (json.dumps({"source_pid": "x"}), r"q\.jsonl:2: expected an object with a 'candidates' list"),
    ],
)
def test_bad_product_queries(tmp_path: Path, line: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        product_readers.read_product_queries(_write(tmp_path, "q.jsonl", _query(["a"], [1]) + "\n" + line + "\n"))


def test_gallery_duplicate_image_id(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"g\.csv:4: Image ID 'a' repeats line 2"):
        product_readers.read_gallery_image_ids(_write(tmp_path, "g.csv", "ASIN,Image ID\nB1,a\nB2,b\nB3,a\n"))


def _unit(rows: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(rows, 128)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_features_npz_and_pickle(tmp_path: Path) -> None:
    q, g = _unit(3), _unit(5, seed=1)
    np.savez(tmp_path / "f.npz", query_feature=q, gallery_feature=g)
    got_q, got_g = product_readers.read_product_features(tmp_path / "f.npz", 3, 5)
    np.testing.assert_array_equal(got_q, q)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        path = tmp_path / f"f{protocol}.pkl"
        features = {"query_feature": q, "gallery_feature": g.astype(np.float64)}
        path.write_bytes(pickle.dumps(features, protocol=protocol))
        got_q, got_g = product_readers.read_product_features(path, 3, 5)
        np.testing.assert_array_equal(got_g, g.astype(np.float64))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda q: q[:, :64], r"query_feature must be a 2-D array with 128 columns, got \(3, 64\)"),
        (lambda q: q[:2], r"query_feature has 2 rows for 3 queries"),
        (lambda q: np.where(np.arange(3)[:, None] == 1, np.nan, q), r"query_feature row 1 has a non-finite value"),
        (lambda q: q * np.array([[1.0], [1.0], [1.01]], dtype=np.float32),
         r"query_feature row 2 has L2 norm 1\.01"),
        (lambda q: (q * 100).astype(np.int64), r"query_feature must hold floating-point numbers"),
    ],
)
def test_bad_features(tmp_path: Path, change, message: str) -> None:
    np.savez(tmp_path / "f.npz", query_feature=change(_unit(3)), gallery_feature=_unit(5))
    with pytest.raises(InputError, match=r"f\.npz: " + message):
        product_readers.read_product_features(tmp_path / "f.npz", 3, 5)


def test_features_missing_key(tmp_path: Path) -> None:
    np.savez(tmp_path / "f.npz", query_feature=_unit(3))
    with pytest.raises(InputError, match="missing gallery_feature"):
        product_readers.read_product_features(tmp_path / "f.npz", 3, 5)


class _RunsShell:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


class _Evaluates:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return eval, (f"open({str(self.marker)!r}, 'w').close()",)


@pytest.mark.parametrize("payload", [_RunsShell, _Evaluates])
@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_malicious_pickle_is_refused_and_never_run(tmp_path: Path, payload, protocol: int) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pkl"
    features = {"query_feature": payload(marker), "gallery_feature": _unit(1)}
    path.write_bytes(pickle.dumps(features, protocol=protocol))
    with pytest.raises(InputError, match=r"evil\.pkl: unreadable or refused pickle: refusing to load"):
        product_readers.read_product_features(path, 1, 1)
    assert not marker.exists()


def test_pickle_with_other_classes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "od.pkl"
    path.write_bytes(pickle.dumps(collections.OrderedDict(query_feature=_unit(1))))
    with pytest.raises(InputError, match=r"refusing to load collections\.OrderedDict"):
        product_readers.read_product_features(path, 1, 1)


def test_npz_with_object_array_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "f.npz", query_feature=np.array([{"a": 1}], dtype=object), gallery_feature=_unit(1))
    with pytest.raises(InputError, match=r"f\.npz: unreadable \.npz"):
        product_readers.read_product_features(tmp_path / "f.npz", 1, 1)
