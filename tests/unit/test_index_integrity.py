"""Issue 26, items 4 and 5: persisted index files and search results are verified when read.

Each case as the issue found it on main: swapped reference shards reused (a wrong uAP, exit 0), a
shard of another dimension (a bare AssertionError), a garbage shard never repaired, edited shard
bounds blamed on the user's predictions; search results with NaN scores, an id of -5 (wrapped to
another reference), an id of 10^9 (IndexError) or a wrong shape (a broadcast error naming no file).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import faiss
import numpy as np
import pytest

from vsbench.index.plan import SearchRequest, search_inline
from vsbench.index.results import collect, search_shard, shard_tasks
from vsbench.index.settings import SearchError
from vsbench.index.store import INDEX_JSON, build_index

QUERY_SHARDS, REFERENCE_SHARDS = 2, 2


def _request(codecs: str = "Flat", score_norm: str = "") -> SearchRequest:
    rng = np.random.default_rng(26)
    queries, gallery, train = rng.standard_normal((20, 8)), rng.standard_normal((101, 8)), rng.standard_normal((50, 8))
    return SearchRequest("x", queries, gallery, train, codecs, "ip", 10, score_norm, True,
                         reference_ids=tuple(f"r{i}" for i in range(101)))


def _search_all(request: SearchRequest, folder: Path) -> None:
    for query_shard, reference_shard in shard_tasks(QUERY_SHARDS, REFERENCE_SHARDS):
        search_shard(request, folder / "index", folder / "search", query_shard=query_shard, query_shards=QUERY_SHARDS,
                     reference_shard=reference_shard)


def _run(request: SearchRequest, folder: Path):
    """The index step, every search task, the merge: what `similarity run` does with shards."""
    build_index(request, folder / "index", reference_shards=REFERENCE_SHARDS)
    _search_all(request, folder)
    return collect(request, folder / "index", folder / "search", query_shards=QUERY_SHARDS)


def _same(got, expected) -> None:
    assert list(got) == list(expected)
    for variant, (similarity, ids) in expected.items():
        np.testing.assert_array_equal(got[variant][1], ids)
        np.testing.assert_allclose(got[variant][0], similarity, rtol=1e-6, atol=1e-6)


@pytest.fixture
def finished(tmp_path: Path):
    request = _request()
    return request, _run(request, tmp_path), tmp_path / "index" / "x" / "Flat"


def test_swapped_reference_shards_are_refilled_not_reused(tmp_path: Path, finished, caplog) -> None:
    """Swapped shards plus deleted search results once gave DISC uAP 0.0019 instead of 0.345, exit 0."""
    request, expected, folder = finished
    first, second = folder / "reference-0-of-2.faiss", folder / "reference-1-of-2.faiss"
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)
    second.write_bytes(a)
    shutil.rmtree(tmp_path / "search")
    with caplog.at_level(logging.WARNING):
        _same(_run(request, tmp_path), expected)
    lines = sorted(r.getMessage() for r in caplog.records if "filled again" in r.getMessage())
    assert len(lines) == 2 and "reference-0-of-2.faiss" in lines[0] and "reference-1-of-2.faiss" in lines[1]
    assert not any("trained again" in r.getMessage() for r in caplog.records)  # only the shards are redone


def test_a_search_refuses_a_swapped_shard_naming_it(tmp_path: Path, finished) -> None:
    """A search task on its own (another pod) cannot rebuild: one line naming the file and the fix."""
    request, _, folder = finished
    shutil.copy(folder / "reference-1-of-2.faiss", folder / "reference-0-of-2.faiss")
    shutil.rmtree(tmp_path / "search")
    with pytest.raises(SearchError, match=r"reference-0-of-2\.faiss: .*re-run the index step") as caught:
        search_shard(request, tmp_path / "index", tmp_path / "search", query_shard=0, query_shards=2,
                     reference_shard=0)
    assert "\n" not in str(caught.value)


def test_a_shard_of_another_dimension_is_a_line_and_is_repaired(tmp_path: Path, finished) -> None:
    """It once gave a bare AssertionError."""
    request, expected, folder = finished
    other = faiss.IndexFlatIP(5)
    other.add(np.ones((50, 5), dtype=np.float32))
    faiss.write_index(other, str(folder / "reference-1-of-2.faiss"))
    shutil.rmtree(tmp_path / "search")
    with pytest.raises(SearchError, match=r"reference-1-of-2\.faiss"):
        search_shard(request, tmp_path / "index", tmp_path / "search", query_shard=0, query_shards=2,
                     reference_shard=1)
    _same(_run(request, tmp_path), expected)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "missing"])
def test_a_damaged_shard_is_repaired_by_the_index_step(tmp_path: Path, finished, damage: str) -> None:
    """A garbage shard was never repaired by re-running the index step."""
    request, expected, folder = finished
    shard = folder / "reference-0-of-2.faiss"
    data = shard.read_bytes()
    if damage == "missing":
        shard.unlink()
    else:
        shard.write_bytes({"garbage": np.random.default_rng(0).bytes(len(data)), "truncated": data[:len(data) // 2],
                           "empty": b""}[damage])
    shutil.rmtree(tmp_path / "search")
    _same(_run(request, tmp_path), expected)


def test_edited_shard_bounds_are_named_not_blamed_on_the_predictions(tmp_path: Path, finished) -> None:
    """Edited bounds once gave "duplicate prediction pair ... isc2021 refuses duplicates too"."""
    request, expected, folder = finished
    meta = json.loads((folder / INDEX_JSON).read_text())
    meta["reference_shards"] = [[0, 60], [40, 101]]
    (folder / INDEX_JSON).write_text(json.dumps(meta))
    with pytest.raises(SearchError, match=r"index\.json: .*shard bounds \[\[0, 60\], \[40, 101\]\]"):
        search_shard(request, tmp_path / "index", tmp_path / "search", query_shard=0, query_shards=2,
                     reference_shard=0)
    with pytest.raises(SearchError, match=r"index\.json: .*shard bounds"):
        collect(request, tmp_path / "index", tmp_path / "search", query_shards=2)
    _same(_run(request, tmp_path), expected)  # the index step rebuilds it


def test_index_json_records_every_files_digest(finished) -> None:
    _, _, folder = finished
    meta = json.loads((folder / INDEX_JSON).read_text())
    assert set(meta["files"]) == {"reference-0-of-2.faiss", "reference-1-of-2.faiss", "trained.faiss"}
    assert all(len(entry["sha256"]) == 64 and entry["bytes"] > 0 for entry in meta["files"].values())
    assert meta["train_digest"] and len(meta["key"]["shard_rows"]) == 2  # training input and each shard's rows


def _rewrite_result(path: Path, change) -> None:
    """Rewrite a result file with ``change`` applied to its arrays, the content digest made right
    again: the checks of the arrays themselves, not only the digest, must refuse it."""
    from vsbench.index import results

    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    key = json.loads(str(arrays.pop("key")))
    arrays.pop("content_sha256")
    change(arrays)
    results._write_npz(path, key, arrays)


def _set(name: str, value: float) -> Callable[[dict], None]:
    def change(arrays: dict) -> None:
        arrays[name] = arrays[name].copy()
        arrays[name][0, 0] = value
    return change


@pytest.mark.parametrize(("case", "change", "reason"), [
    ("NaN similarity", _set("similarity_0", np.nan), "NaN or infinite scores"),
    ("id -5", _set("ids_0", -5), "ids outside -1 and this shard's 0..50"),
    ("id 10^9", _set("ids_0", 10**9), "ids outside -1 and this shard's 0..50"),
    ("wrong shape", lambda a: a.update(similarity_0=a["similarity_0"][:, :3], ids_0=a["ids_0"][:, :3]),
     r"shape \(10, 3\)"),
    ("float64 scores", lambda a: a.update(similarity_0=a["similarity_0"].astype(np.float64)), "float64 scores"),
])
def test_a_bad_search_result_is_named_by_the_merge_and_searched_again(tmp_path: Path, finished, case: str, change,
                                                                      reason: str, caplog) -> None:
    """NaN once gave exit 0 and a wrong uAP; -5 wrapped to another reference; 10^9 an IndexError;
    a wrong shape a numpy broadcast error naming no file."""
    request, expected, _ = finished
    path = tmp_path / "search" / "x" / "Flat" / "q0-of-2.r0-of-2.npz"
    _rewrite_result(path, change)
    with pytest.raises(SearchError, match=rf"q0-of-2\.r0-of-2\.npz of codec 'Flat': variant 0: .*{reason}"):
        collect(request, tmp_path / "index", tmp_path / "search", query_shards=2)
    with caplog.at_level(logging.WARNING):
        _search_all(request, tmp_path)  # the search step re-run repairs it
    assert any("searched again" in r.getMessage() and "q0-of-2.r0-of-2.npz" in r.getMessage() for r in caplog.records)
    _same(collect(request, tmp_path / "index", tmp_path / "search", query_shards=2), expected)


@pytest.mark.parametrize("damage", ["flip", "truncate", "swap"])
def test_a_damaged_result_file_is_searched_again(tmp_path: Path, finished, damage: str) -> None:
    request, expected, _ = finished
    folder = tmp_path / "search" / "x" / "Flat"
    path, other = folder / "q0-of-2.r0-of-2.npz", folder / "q1-of-2.r1-of-2.npz"
    data = path.read_bytes()
    if damage == "flip":
        path.write_bytes(data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0x40]) + data[len(data) // 2 + 1:])
    elif damage == "truncate":
        path.write_bytes(data[:len(data) - 10])
    else:
        path.write_bytes(other.read_bytes())
        other.write_bytes(data)
    with pytest.raises(SearchError, match=r"q0-of-2\.r0-of-2\.npz"):
        collect(request, tmp_path / "index", tmp_path / "search", query_shards=2)
    _search_all(request, tmp_path)
    _same(collect(request, tmp_path / "index", tmp_path / "search", query_shards=2), expected)


def test_results_record_the_index_files_and_queries_they_came_from(tmp_path: Path, finished) -> None:
    request, _, folder = finished
    with np.load(tmp_path / "search" / "x" / "Flat" / "q1-of-2.r1-of-2.npz") as data:
        key = json.loads(str(data["key"]))
    meta = json.loads((folder / INDEX_JSON).read_text())
    assert key["index_files"] == {"reference-1-of-2.faiss": meta["files"]["reference-1-of-2.faiss"]["sha256"]}
    assert len(key["queries_digest"]) == 64


def test_score_normalization_and_transforms_are_verified_too(tmp_path: Path) -> None:
    """train.faiss and the PCA transform are read by every search: damaged, they are rebuilt."""
    request = _request(codecs="PCA4,Flat", score_norm="1.00[0,2]")
    expected = search_inline(request)
    _run(request, tmp_path)
    folder = tmp_path / "index" / "x" / "PCA4_Flat"
    for name in ("train.faiss", "transform-0.faiss"):
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[:-8] + bytes(8))
    with pytest.raises(SearchError, match=r"(train|transform-0)\.faiss"):
        search_shard(request, tmp_path / "index", tmp_path / "other-search", query_shard=0, query_shards=2,
                     reference_shard=0)
    shutil.rmtree(tmp_path / "search")
    _same(_run(request, tmp_path), expected)


# --- a whole benchmark: index -> search -> score, as `vsbench similarity run` drives it ---

def _disc(tmp_path: Path):
    from vsbench.benchmarks.disc.synth import generate_disc
    from vsbench.benchmarks.registry import load_benchmark
    from vsbench.io.features import FeatureSet, save_features
    from vsbench.retrieval.engine import Engine
    from vsbench.runspec.run import BenchmarkRun

    root, out = tmp_path / "data", tmp_path / "run"
    generate_disc(root, references=30, queries=20, train=24, seed=1)
    bench = load_benchmark("disc", root)
    ids = sorted({i for images in bench.image_sets().values() for i in images.ids})
    values = np.random.default_rng(7).standard_normal((len(ids), 16)).astype(np.float32)
    row = {name: number for number, name in enumerate(ids)}
    for query, reference in zip(bench.gt_query, bench.gt_reference):  # copies near their originals: uAP well above 0
        if query in row and reference in row:
            values[row[query]] = values[row[reference]] + np.float32(0.125)
    save_features(tmp_path / "features.npz", FeatureSet(np.asarray(ids), values))
    run = BenchmarkRun(benchmark="disc", root=str(root), codecs="Flat", k=5, global_cap=40, score_norm="",
                       reference_shards=2)
    Engine(run, out).embed_shard("precomputed", model_options={"path": str(tmp_path / "features.npz")}, progress=False)
    Engine(run, out).open_features()
    return root, out, run


def _steps(root: Path, out: Path, run) -> list[dict]:
    from vsbench.retrieval.engine import Engine

    Engine(run, out).index()
    for task in range(2):
        Engine(run, out).search(task)
    return Engine(run, out).score().records


def test_swapped_shards_in_a_benchmark_run_are_rebuilt_to_the_same_numbers(tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    """The issue's case: swap the two shard files, delete the search results, run again."""
    import shutil

    root, out, settings = _disc(tmp_path)
    expected = _steps(root, out, settings)
    assert expected[0]["uap"] > 0.5, expected
    folder = next((out / "index").rglob("reference-0-of-2.faiss")).parent
    a, b = folder / "reference-0-of-2.faiss", folder / "reference-1-of-2.faiss"
    data_a = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(data_a)
    shutil.rmtree(out / "search")
    with caplog.at_level(logging.INFO, logger="vsbench.index"):
        assert _steps(root, out, settings) == expected
    refilled = sorted(r.getMessage() for r in caplog.records if "filled again" in r.getMessage())
    assert len(refilled) == 2 and all("sha256" in line for line in refilled)
    assert "reference-0-of-2.faiss" in refilled[0] and "reference-1-of-2.faiss" in refilled[1]


def test_the_search_command_refuses_a_damaged_shard_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from vsbench.cli.app import app

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    root, out, settings = _disc(tmp_path)
    _steps(root, out, settings)
    shard = next((out / "index").rglob("reference-1-of-2.faiss"))
    shard.write_bytes(b"garbage")
    result = CliRunner().invoke(app, ["similarity", "search", "--benchmark", "disc", "--root", str(root),
                                      "--out", str(out), "--codecs", "Flat", "--k", "5", "--score-norm", "",
                                      "--reference-shards", "2", "--task", "1"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert str(shard) in result.output and "re-run the index step" in result.output, result.output
