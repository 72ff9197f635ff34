"""Issue 28, round two of hostile inputs to the readers and scorers: each case gets one line naming
the file, the line or entry, the field and the fix, in bounded memory and time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vsbench.abid import readers as abid_readers
from vsbench.benchmarks.disc import readers as disc_readers
from vsbench.benchmarks.product_search import readers as product_readers
from vsbench.cli.score import score_app
from vsbench.io import inputs
from vsbench.io import pickles as pickles
from vsbench.io.inputs import InputError

runner = CliRunner()


def _run(*args: str | Path):
    return runner.invoke(score_app, [str(a) for a in args] + ["--no-track"])


def _one_line_error(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------- 5. a swapped ground-truth header


def test_a_ground_truth_header_in_the_other_order_is_read_by_name(tmp_path: Path) -> None:
    gt = tmp_path / "gt.csv"
    gt.write_text("reference_id,query_id\nR1,Q1\nR2,Q2\n,Q3\n")
    truth = disc_readers.read_copy_detection_ground_truth(gt)
    assert truth.query_ids.tolist() == ["Q1", "Q2"] and truth.reference_ids.tolist() == ["R1", "R2"]
    assert truth.listed_queries.tolist() == ["Q1", "Q2", "Q3"] and truth.notes == ()
    preds = tmp_path / "preds.csv"
    preds.write_text("reference_id,score,query_id\nR1,0.9,Q1\nR2,0.8,Q2\n")
    out = tmp_path / "m.json"
    result = _run("copy-detection", "--predictions", preds, "--gt", gt, "--output", out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["uap"] == 1.0
    assert "warning" not in result.stderr


def test_a_swapped_header_past_the_first_line_is_a_pair_with_a_note_that_does_not_suggest_normalizing(
        tmp_path: Path) -> None:
    gt = tmp_path / "gt.csv"
    gt.write_text("Q1,R1\nreference_id,query_id\n")
    (note,) = disc_readers.read_copy_detection_ground_truth(gt).notes
    assert "gt.csv:2:" in note and "other order" in note and "normalize" not in note


# ---------------------------------------------------------------- 6. duplicate column names


def test_a_gallery_with_a_column_named_twice_is_refused_in_one_line(tmp_path: Path) -> None:
    gallery = tmp_path / "gallery.csv"
    gallery.write_text("ASIN,Image ID,Image ID\nA,1,2\n")
    with pytest.raises(InputError, match=r"gallery.csv:1: column 'Image ID' is named 2 times .*columns 2, 3"):
        product_readers.read_gallery_image_ids(gallery)
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"source_pid": "s", "candidates": [{"candidate_pid": "1", "label": 1}]}) + "\n")
    _one_line_error(_run("product-search", "--queries", queries, "--gallery", gallery, "--features",
                         tmp_path / "f.npz", "--output", tmp_path / "m.json"), "gallery.csv:1:", "Image ID")


def test_a_prediction_header_naming_a_column_twice_is_refused(tmp_path: Path) -> None:
    preds = tmp_path / "preds.csv"
    preds.write_text("reference_id,query_id,score,query_id\nR1,Q1,0.5,Q2\n")
    with pytest.raises(InputError, match=r"preds.csv:1: column 'query_id' is named 2 times"):
        disc_readers.read_copy_detection_predictions(preds)


# ---------------------------------------------------------------- 7. the true line of a bad byte


@pytest.mark.parametrize(("data", "line"), [
    (b"a\n" * 5000 + b"\xff\n", 5001),  # past text mode's first 8 KiB chunk: was reported as line 4097
    (b"a\nb\n\xff\n", 3),  # in the first chunk: was reported as line 1
    (b"a\r\nb\rc\n\xe2\x82", 4),  # \r\n and \r end lines too; a character cut off by the end of the file
    (b"a\r" * 600_000 + b"\n\xff", 600_001),  # a \r\n across the 1 MiB chunks of the search
])
def test_a_non_utf8_byte_is_reported_on_its_own_line(tmp_path: Path, data: bytes, line: int) -> None:
    path = tmp_path / "x.txt"
    path.write_bytes(data)
    with pytest.raises(InputError, match=rf"x.txt:{line}: not UTF-8 text"):
        inputs.read_lines(path)


def test_a_non_utf8_byte_in_a_json_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(b'[\n[0, 1],\n[1, "\xff"]\n]')
    with pytest.raises(InputError, match=r"x.json:3: not UTF-8 text"):
        inputs.read_json(path)


def test_a_non_utf8_byte_in_a_result_file_is_one_cli_line_with_its_line(tmp_path: Path) -> None:
    gt = tmp_path / "counting_val.json"
    gt.write_text(json.dumps([[i, 1] for i in range(5001)]))
    pred = tmp_path / "counting_result.txt"
    pred.write_bytes(b"1\n" * 5000 + b"\xff\n")
    _one_line_error(_run("abid-counting", "--pred", pred, "--gt", gt, "--output", tmp_path / "m.json"),
                    "counting_result.txt:5001: not UTF-8")


# ---------------------------------------------------------------- 1. integers past 64 bits


@pytest.mark.parametrize("answer", [str(1 << 63), "99999999999999999999", "-99999999999999999999", "9" * 4300])
def test_an_answer_past_64_bits_is_one_line_naming_the_file_and_line(tmp_path: Path, answer: str) -> None:
    gt = tmp_path / "counting_val.json"
    gt.write_text(json.dumps([[0, 1], [1, 2], [2, 0]]))
    pred = tmp_path / "counting_result.txt"
    pred.write_text(f"1\n{answer}\n0\n")
    line = _one_line_error(_run("abid-counting", "--pred", pred, "--gt", gt, "--output", tmp_path / "m.json"),
                           "counting_result.txt:2:", "64-bit")
    assert len(line) < 400


def test_an_answer_with_more_digits_than_python_reads_says_so(tmp_path: Path) -> None:
    pred = tmp_path / "r.txt"
    pred.write_text("1\n" + "9" * 5000 + "\n")
    with pytest.raises(InputError, match=r"r.txt:2: an integer of 5,000 characters, more than Python's int\(\) reads"):
        abid_readers.read_abid_result(pred, 2, "gt.json", binary=True)


@pytest.mark.parametrize(("quantity", "message"), [
    ("99999999999999999999", "entry 2: quantity '99999999999999999999' is over the largest count scored, 999"),
    ("9" * 5000, r"not valid JSON \(an integer of more than 4,300 digits, Python's limit\)"),
])
def test_a_ground_truth_count_past_64_bits_is_one_line(tmp_path: Path, quantity: str, message: str) -> None:
    gt = tmp_path / "counting_val.json"
    gt.write_text(f"[[0, 1], [1, {quantity}]]")
    with pytest.raises(InputError, match=rf"counting_val.json: {message}"):
        abid_readers.read_counting_ground_truth(gt)
    pred = tmp_path / "r.txt"
    pred.write_text("1\n1\n")
    _one_line_error(_run("abid-counting", "--pred", pred, "--gt", gt, "--output", tmp_path / "m.json"),
                    "counting_val.json")


# ---------------------------------------------------------------- 2. counting answers of 20000 and 10^9


def _traced_peak(call) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("answer", [20_000, 10**9, 3_037_000_499])
def test_a_huge_counting_answer_is_scored_as_upstream_in_bounded_memory_and_few_lines(
        tmp_path: Path, answer: int) -> None:
    gt = tmp_path / "counting_val.json"
    gt.write_text(json.dumps([[0, 1], [1, 2], [2, 0]]))
    pred = tmp_path / "counting_result.txt"
    pred.write_text(f"1\n{answer}\n0\n")
    out = tmp_path / "m.json"
    # The same command once untraced, on a plain answer: the modules it imports lazily (scipy's, for the
    # intervals) are then loaded whatever ran before, so the peak below is the answer's, not the imports'.
    (tmp_path / "plain.txt").write_text("1\n2\n0\n")
    assert _run("abid-counting", "--pred", tmp_path / "plain.txt", "--gt", gt, "--output", tmp_path / "w.json").exit_code == 0
    holder = {}
    peak = _traced_peak(lambda: holder.setdefault("r", _run("abid-counting", "--pred", pred, "--gt", gt,
                                                           "--output", out)))
    result = holder["r"]
    assert result.exit_code == 0, result.output
    assert peak < 16 << 20  # was 4.6 GB for 20000, 7.45 GiB asked for 10^9
    record = json.loads(out.read_text())
    # counting/evaluate.py: correct 2 of 3, RMSE sqrt(sum((pred - gt)^2) / 3) (exact in int64 up to 3,037,000,499)
    assert record["accuracy"] == pytest.approx(2 / 3)
    assert record["rmse"] == pytest.approx(((answer - 2) ** 2 / 3) ** 0.5, rel=1e-12)
    assert len(record["per_class_accuracy"]) == 3 and len(record["confusion_matrix"][0]) == 3
    warnings = [line for line in result.stderr.splitlines() if line.startswith(("warning", "note"))]
    assert len(warnings) == 1 and "counting_result.txt:2: 1 answer(s) are above the classes 0..2" in warnings[0]


def test_an_answer_past_the_wrap_free_range_says_upstream_wraps(tmp_path: Path) -> None:
    gt = tmp_path / "counting_val.json"
    gt.write_text(json.dumps([[0, 1], [1, 2]]))
    pred = tmp_path / "counting_result.txt"
    pred.write_text("1\n10000000002\n")
    out = tmp_path / "m.json"
    result = _run("abid-counting", "--pred", pred, "--gt", gt, "--output", out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["rmse"] == pytest.approx((1e20 / 2) ** 0.5)
    assert "counting_result.txt:2: answer 10000000002 is off by more than 3,037,000,499" in result.stderr


def test_a_ground_truth_count_of_20000_is_refused_in_one_line_and_the_limit_is_configurable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gt = tmp_path / "counting_val.json"
    gt.write_text(json.dumps([[0, 1], [1, 20_000]]))
    pred = tmp_path / "r.txt"
    pred.write_text("1\n1\n")
    _one_line_error(_run("abid-counting", "--pred", pred, "--gt", gt, "--output", tmp_path / "m.json"),
                    "counting_val.json: entry 2: quantity '20000' is over the largest count scored, 999",
                    "VSBENCH_MAX_COUNT_CLASSES")
    monkeypatch.setenv("VSBENCH_MAX_COUNT_CLASSES", "20001")
    assert abid_readers.read_counting_ground_truth(gt).tolist() == [1, 20_000]


def test_num_classes_past_the_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    gt = tmp_path / "counting_val.json"
    gt.write_text(json.dumps([[0, 1], [1, 2]]))
    pred = tmp_path / "r.txt"
    pred.write_text("1\n1\n")
    _one_line_error(_run("abid-counting", "--pred", pred, "--gt", gt, "--output", tmp_path / "m.json",
                         "--num-classes", 10**9), "num_classes 1000000000 is over the 1,000-class limit")


def test_classes_without_examples_are_one_summary_line(tmp_path: Path) -> None:
    gt = tmp_path / "counting_val.json"
    gt.write_text(json.dumps([[0, 1], [1, 2]]))
    pred = tmp_path / "r.txt"
    pred.write_text("1\n1\n")
    out = tmp_path / "m.json"
    result = _run("abid-counting", "--pred", pred, "--gt", gt, "--output", out, "--num-classes", 1000)
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stderr.splitlines() if "ground-truth example" in line]
    assert "998 of the 1000 classes have no ground-truth example (0, 3, 4," in line and "(and 988 more)" in line
    assert json.loads(out.read_text())["per_class_accuracy"][:3] == [None, 1.0, 0.0]


# ---------------------------------------------------------------- 3. feature files: only the named members


def _unit_rows(rows: int):
    import numpy as np

    values = np.random.default_rng(rows).normal(size=(rows, product_readers.FEATURE_DIM)).astype(np.float32)
    return values / np.linalg.norm(values, axis=1, keepdims=True)


def test_an_npz_member_the_features_do_not_use_is_never_read(tmp_path: Path) -> None:
    import zipfile

    import numpy as np

    path = tmp_path / "features.npz"
    np.savez(path, query_feature=_unit_rows(2), gallery_feature=_unit_rows(3))
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive, \
            archive.open("junk.npy", "w", force_zip64=True) as member:  # 256 MiB of zeros, ~250 kB compressed
        np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": (1 << 26,)})
        zeros = bytes(1 << 22)
        for _ in range(64):
            member.write(zeros)
    assert path.stat().st_size < 2 << 20
    holder = {}
    peak = _traced_peak(lambda: holder.setdefault("f", product_readers.read_product_features(path, 2, 3)))
    assert holder["f"][0].shape == (2, product_readers.FEATURE_DIM)
    assert peak < 32 << 20  # was every member: 256 MiB here, 3.3 GB for a 3 GiB member


def test_an_unused_npz_member_with_a_forged_header_is_not_even_opened(tmp_path: Path) -> None:
    import numpy as np

    path = tmp_path / "features.npz"
    np.savez(path, query_feature=_unit_rows(1), gallery_feature=_unit_rows(1), junk=np.zeros(3))
    data = path.read_bytes().replace(b"'shape': (3,)", b"'shape': (9,)")
    path.write_bytes(data)
    assert product_readers.read_product_features(path, 1, 1)[1].shape == (1, product_readers.FEATURE_DIM)


def test_a_forged_npy_as_features_is_named_as_a_npy_not_a_pickle(tmp_path: Path) -> None:
    path = tmp_path / "features.npy"
    path.write_bytes(b"\x93NUMPY\x01\x00garbage")
    with pytest.raises(InputError, match=r"features.npy: not a valid .npy") as caught:
        product_readers.read_product_features(path, 1, 1)
    assert "pickle" not in str(caught.value)
    good = tmp_path / "one.npy"
    import numpy as np

    np.save(good, _unit_rows(1))
    with pytest.raises(InputError, match=r"one.npy: a .npy file holds one array; .*np.savez"):
        product_readers.read_product_features(good, 1, 1)


def test_a_broken_npz_member_is_named(tmp_path: Path) -> None:
    import numpy as np

    path = tmp_path / "features.npz"
    np.savez(path, query_feature=_unit_rows(1), gallery_feature=_unit_rows(1))
    path.write_bytes(path.read_bytes().replace(b"\x93NUMPY", b"\x93NUMPX", 1))
    with pytest.raises(InputError, match=r"features.npz: .npz member 'query_feature.npy' is not a valid .npy"):
        product_readers.read_product_features(path, 1, 1)


# ---------------------------------------------------------------- 4. the restricted unpickler cannot grow memory


def _codec_chain(start: bytes, codec: str, rounds: int) -> bytes:
    """A protocol 2 pickle of ``encode(...encode(encode(start_text, "latin1"), codec)..., codec)``."""
    out = b"\x80\x02" + b"c_codecs\nencode\n" * rounds
    out += b"X" + len(start).to_bytes(4, "little") + start + b"X\x06\x00\x00\x00latin1\x86R"
    word = codec.encode()
    out += (b"X" + len(word).to_bytes(4, "little") + word + b"\x86R") * (rounds - 1)
    return out + b"."


@pytest.mark.parametrize("codec", ["hex", "base64", "zlib"])
def test_a_pickle_chaining_codecs_is_refused_before_it_grows(tmp_path: Path, codec: str) -> None:
    path = tmp_path / "features.pkl"
    path.write_bytes(_codec_chain(b"x" * 1024, codec, 15))  # hex: 1 kB -> 16 MiB (22 rounds of 1.4 kB: 6.45 GB)
    assert path.stat().st_size < 2048
    peak = _traced_peak(lambda: pytest.raises(InputError, pickles.load_array_pickle, path))
    assert peak < 1 << 20


def test_the_unpickler_makes_no_array_larger_than_its_bytes(tmp_path: Path) -> None:
    import pickle

    import numpy as np

    calls = {
        "ndarray": b"\x80\x02cnumpy\nndarray\nJ\x00\xe4\x0bT\x85X\x01\x00\x00\x00b\x86R.",  # ndarray((1.4e9,), "b")
        "_reconstruct": b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nJ\x00\xe4\x0bT\x85C\x01b\x87R.",
    }
    for name, data in calls.items():
        path = tmp_path / f"{name}.pkl"
        path.write_bytes(data)
        with pytest.raises(InputError, match=r"unreadable or refused pickle: refusing"):
            pickles.load_array_pickle(path)
    path = tmp_path / "objects.pkl"
    path.write_bytes(pickle.dumps({"query_feature": np.array([1, "a"], dtype=object)}, protocol=2))
    with pytest.raises(InputError, match=r"refusing dtype"):
        pickles.load_array_pickle(path)


@pytest.mark.parametrize("protocol", range(6))
def test_feature_pickles_of_every_protocol_still_load(tmp_path: Path, protocol: int) -> None:
    import pickle

    import numpy as np

    path = tmp_path / "features.pkl"
    query, gallery = _unit_rows(2).astype(np.float64), _unit_rows(3)
    path.write_bytes(pickle.dumps({"query_feature": query, "gallery_feature": gallery, "epoch": np.float32(3),
                                   "name": "resnet"}, protocol=protocol))
    q, g = product_readers.read_product_features(path, 2, 3)
    assert type(q) is np.ndarray and q.dtype == np.float64 and np.array_equal(q, query)
    assert type(g) is np.ndarray and np.array_equal(g, gallery)
    assert pickles.load_array_pickle(path)["epoch"] == np.float32(3)


# ---------------------------------------------------------------- 11. a metric of 0 for a reason says why


def _pairs_folder(folder: Path, positives: int) -> Path:
    from vsbench.cli.score import HPATCHES_NEGATIVES, HPATCHES_POSITIVES

    folder.mkdir()
    for name in HPATCHES_POSITIVES.values():
        (folder / name).write_text("".join(f"0.{i},1\n" for i in range(1, positives + 1)))
    for name in HPATCHES_NEGATIVES.values():
        (folder / name).write_text("0.95,0\n0.96,0\n0.97,0\n")
    return folder


def test_pairs_with_fewer_than_five_positives_say_why_every_pr_ap_is_zero(tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    result = _run("pairs", "--results", _pairs_folder(tmp_path / "r", 4), "--output", out)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["mean_pr_ap"] == 0.0
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("warning")]
    assert "pr_ap is 0 for easy_diffseq, easy_sameseq, hard_diffseq, hard_sameseq" in line
    assert "test_pos_easy.results holds 4" in line and "at least 5" in line
    quiet = _run("pairs", "--results", _pairs_folder(tmp_path / "ok", 5), "--output", out)
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr
    assert json.loads(out.read_text())["mean_pr_ap"] > 0


def test_copy_detection_with_no_true_pair_or_no_p90_point_says_why(tmp_path: Path) -> None:
    gt = tmp_path / "gt.csv"
    gt.write_text("query_id,reference_id\nQ1,R1\n")
    preds = tmp_path / "p.csv"
    preds.write_text("query_id,reference_id,score\nQ1,R9,0.9\n")
    out = tmp_path / "m.json"
    result = _run("copy-detection", "--predictions", preds, "--gt", gt, "--output", out)
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("warning")]
    assert "are 0: none of the 1 predictions in" in line and "normalize" not in line
    preds.write_text("query_id,reference_id,score\nQ1,R9,0.9\nQ1,R1,0.1\n")
    result = _run("copy-detection", "--predictions", preds, "--gt", gt, "--output", out)
    assert "recall_at_p90 is 0: precision never reaches 0.9" in result.stderr
    assert json.loads(out.read_text())["uap"] == 0.5


def test_verification_precision_and_recall_of_zero_by_zero_say_so(tmp_path: Path) -> None:
    gt = tmp_path / "v.json"
    gt.write_text(json.dumps([[0, "A", 0, []], [1, "B", 0, []]]))
    pred = tmp_path / "r.txt"
    pred.write_text("0\n0\n")
    result = _run("abid-verification", "--pred", pred, "--gt", gt, "--output", tmp_path / "m.json")
    assert result.exit_code == 0, result.output
    assert "precision is 0: no answer in" in result.stderr and "recall is 0: no scored entry of" in result.stderr


def test_a_column_the_gallery_does_not_use_may_be_named_twice(tmp_path: Path) -> None:
    gallery = tmp_path / "gallery.csv"
    gallery.write_text("query_id,query_id,Image ID\nx,y,1\n,,2\n")  # found by the fuzz suite: AttributeError
    assert product_readers.read_gallery_image_ids(gallery).tolist() == ["1", "2"]


def test_python2_style_feature_pickles_with_text_data_still_load(tmp_path: Path) -> None:
    """Python 2 wrote an array's bytes as a str; read with encoding="latin1" it arrives as text."""
    import io
    import pickle

    import numpy as np

    class TextBytesPickler(pickle._Pickler):  # the pure-Python pickler, writing bytes as Python 2 did
        dispatch = dict(pickle._Pickler.dispatch)
        dispatch[bytes] = lambda self, obj: self.save(obj.decode("latin-1"))

    query = _unit_rows(2)
    buffer = io.BytesIO()
    TextBytesPickler(buffer, protocol=2).dump({"query_feature": query, "gallery_feature": query, "s": np.float32(2)})
    assert b"_codecs" not in buffer.getvalue()
    path = tmp_path / "py2.pkl"
    path.write_bytes(buffer.getvalue())
    q, _ = product_readers.read_product_features(path, 2, 2)
    assert np.array_equal(q, query) and pickles.load_array_pickle(path)["s"] == np.float32(2)


def test_weights_files_are_refused_in_one_line_without_unsafe_advice(tmp_path: Path) -> None:
    """A pickle that would call os.system, a forged safetensors header and random bytes: each is one
    WeightsError naming the file; none repeats torch's advice to load the file with weights_only=False."""
    import os

    import torch

    from vsbench.models.weights import WeightsError, read_state_dict

    class Payload:
        def __reduce__(self):  # what a hostile checkpoint holds
            return (os.system, ("true",))

    evil, forged, noise = tmp_path / "evil.pt", tmp_path / "forged.safetensors", tmp_path / "noise.pt"
    torch.save({"weight": Payload()}, evil)
    forged.write_bytes((1 << 40).to_bytes(8, "little") + b'{"w": 1}')
    noise.write_bytes(np.random.default_rng(3).integers(0, 256, 2048, dtype=np.uint8).tobytes())
    for path, words in ((evil, "posix.system"), (forged, "safetensors"), (noise, "weights")):
        with pytest.raises(WeightsError) as caught:
            read_state_dict(path)
        message = str(caught.value)
        assert str(path) in message and words in message and "\n" not in message
        assert "weights_only` set to `False" not in message and "will likely succeed" not in message
