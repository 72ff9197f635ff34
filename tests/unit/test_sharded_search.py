"""Index, search and score as separate steps: sharded results equal one search, float for float.

The single-process search (``search_inline``, what ``evaluate`` runs) is the reference. The
persisted, sharded path (``vsbench.index.store``) trains each codec once and gives every
reference shard a copy of the trained index, so even approximate codecs (IVF, PQ) return what one
index returns; HNSW builds a graph per shard and is only as good as a stated recall.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from vsbench.index.codec import merge_found
from vsbench.index.plan import SearchRequest, search_inline
from vsbench.index.results import collect, search_shard, shard_tasks
from vsbench.index.settings import SearchError
from vsbench.index.store import build_index, query_bounds, reference_bounds, shard_bounds
from vsbench.io.features import FeatureSet, save_features
from vsbench.retrieval.engine import Engine
from vsbench.runspec.run import BenchmarkRun


def _request(rng: np.random.Generator, *, codecs: str, metric: str = "ip", score_norm: str = "",
             unnormalized: bool = True, references: int = 1001, dim: int = 32, k: int = 10) -> SearchRequest:
    queries = rng.standard_normal((53, dim))
    gallery = rng.standard_normal((references, dim))
    tied = references // 2
    gallery[7] = gallery[tied]  # an exact tie across reference shards (see merge_found)
    queries[3] = gallery[tied]
    train = rng.standard_normal((400, dim))
    return SearchRequest("x", queries, gallery, train, codecs, metric, k, score_norm, unnormalized,
                         reference_ids=tuple(f"r{i}" for i in range(references)))


def _sharded(request: SearchRequest, folder: Path, query_shards: int, reference_shards: int):
    build_index(request, folder / "index", reference_shards=reference_shards)
    for query_shard, reference_shard in shard_tasks(query_shards, reference_shards):
        search_shard(request, folder / "index", folder / "search", query_shard=query_shard,
                     query_shards=query_shards, reference_shard=reference_shard)
    return collect(request, folder / "index", folder / "search", query_shards=query_shards)


@pytest.mark.parametrize(("codecs", "metric", "score_norm"), [
    ("Flat", "l2", ""),
    ("Flat;PCAW16,L2norm,Flat", "ip", "1.00[0,2];0.50[1,3]"),
    ("PCA16,Flat", "l2", "1.00[0,2]"),
    ("IVF8,Flat;IVF8,PQ8x4", "ip", ""),
    ("PQ8x4", "l2", ""),
])
@pytest.mark.parametrize(("query_shards", "reference_shards"), [(1, 1), (3, 4), (7, 2)])
def test_sharded_search_equals_one_search(tmp_path: Path, codecs: str, metric: str, score_norm: str,
                                          query_shards: int, reference_shards: int) -> None:
    request = _request(np.random.default_rng(0), codecs=codecs, metric=metric, score_norm=score_norm)
    expected = search_inline(request)
    got = _sharded(request, tmp_path, query_shards, reference_shards)
    assert list(got) == list(expected)
    for variant, (similarity, ids) in expected.items():
        np.testing.assert_array_equal(got[variant][1], ids, err_msg=str(variant))
        np.testing.assert_array_equal(got[variant][0], similarity, err_msg=str(variant))


@pytest.mark.parametrize(("codecs", "metric", "score_norm"), [
    ("Flat;PCAW16,L2norm,Flat", "ip", "1.00[0,2]"),
    ("IVF8,Flat;IVF8,PQ8x4", "l2", "1.00[0,2]"),
    ("PQ8x4", "ip", ""),
])
def test_memory_mapped_shards_search_as_read_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codecs: str,
                                                   metric: str, score_norm: str) -> None:
    """Files above VSBENCH_MMAP_MIN_BYTES are mapped (IVF lists or flat/PQ codes): same answers."""
    request = _request(np.random.default_rng(1), codecs=codecs, metric=metric, score_norm=score_norm)
    expected = search_inline(request)
    monkeypatch.setenv("VSBENCH_MMAP_MIN_BYTES", "0")
    got = _sharded(request, tmp_path, 2, 3)
    for variant, (similarity, ids) in expected.items():
        np.testing.assert_array_equal(got[variant][1], ids, err_msg=str(variant))
        np.testing.assert_array_equal(got[variant][0], similarity, err_msg=str(variant))


def test_a_bad_mmap_threshold_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    request = _request(np.random.default_rng(1), codecs="Flat")
    build_index(request, tmp_path / "index", reference_shards=1)
    monkeypatch.setenv("VSBENCH_MMAP_MIN_BYTES", "1GB")
    with pytest.raises(SearchError, match="VSBENCH_MMAP_MIN_BYTES='1GB'"):
        search_shard(request, tmp_path / "index", tmp_path / "search", query_shard=0, query_shards=1,
                     reference_shard=0)


def test_k_larger_than_a_reference_shard_pads_and_merges(tmp_path: Path) -> None:
    """Shards of 10 references, k = 25. Scores are identical; ids too, except which of references
    tied exactly at the k-th score stay: FAISS's own choice there depends on the order it meets them
    (a later, better result evicts the lower id first), which no merge of shard results can replay."""
    request = _request(np.random.default_rng(1), codecs="Flat", references=30, k=25)
    expected_similarity, expected_ids = search_inline(request)[("Flat", "none")]
    similarity, ids = _sharded(request, tmp_path, 2, 3)[("Flat", "none")]
    assert ids.shape == (53, 25)
    np.testing.assert_array_equal(similarity, expected_similarity)
    above_last = similarity > similarity[:, -1:]
    np.testing.assert_array_equal(ids[above_last], expected_ids[above_last])
    every_similarity, every_id = search_inline(SearchRequest("x", request.queries, request.references, None, "Flat",
                                                             "ip", 30))[("Flat", "none")]
    for row in range(len(ids)):
        last = similarity[row] == similarity[row, -1]
        tied_at_last = set(every_id[row][every_similarity[row] == similarity[row, -1]].tolist())
        assert set(ids[row, last].tolist()) <= tied_at_last


def test_hnsw_shards_keep_a_stated_recall(tmp_path: Path) -> None:
    """HNSW builds one graph per shard, so shards change what is found: recall@10 against exact
    search stays at least 0.9 here (the bound docs/scale.md states)."""
    request = _request(np.random.default_rng(2), codecs="HNSW16", metric="l2", references=3000)
    exact = search_inline(SearchRequest("x", request.queries, request.references, None, "Flat", "l2", 10))
    got = _sharded(request, tmp_path, 2, 3)[("HNSW16", "none")][1]
    truth = exact[("Flat", "none")][1]
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth)])
    assert recall >= 0.9


def test_merge_keeps_faiss_ties() -> None:
    """At the k-th place the lower ids stay (FAISS scans ids upward); equal scores come out higher id
    first for inner products and lower id first for L2 (FAISS's min- and max-heaps)."""
    first = (np.array([[0.9, 0.9]], np.float32), np.array([[4, 6]]))
    second = (np.array([[0.9, 0.7]], np.float32), np.array([[2, 9]]))
    assert merge_found([first, second], 2, "l2")[1].tolist() == [[2, 4]]
    assert merge_found([first, second], 2, "ip")[1].tolist() == [[4, 2]]
    similarity, ids = merge_found([first, second], 4, "ip")
    assert ids.tolist() == [[6, 4, 2, 9]] and similarity[0].tolist() == pytest.approx([0.9, 0.9, 0.9, 0.7])
    padded = (np.array([[0.1, -np.inf]], np.float32), np.array([[1, -1]]))
    assert merge_found([padded, (np.array([[0.2]], np.float32), np.array([[3]]))], 3, "ip")[1].tolist() == [[3, 1, -1]]


def test_shard_bounds() -> None:
    assert shard_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    # on FAISS's tiles where the rows allow: 1 M references in 4 shards, 50,000 queries in 8
    assert reference_bounds(1_000_000, 4) == [(0, 262_144), (262_144, 524_288), (524_288, 720_896),
                                              (720_896, 1_000_000)]
    assert reference_bounds(10_000, 3) == [(0, 3_072), (3_072, 7_168), (7_168, 10_000)]
    assert reference_bounds(3_000, 3) == shard_bounds(3_000, 3)  # under 1,024 a shard: sizes differ by at most one
    assert query_bounds(50_000, 8) == shard_bounds(50_000, 8)
    for count, shards in ((65_536 * 3, 3), (65_536 * 3 + 1, 3), (2_048 * 7 - 1, 7), (1_000_001, 13)):
        bounds = reference_bounds(count, shards)
        assert bounds[0][0] == 0 and bounds[-1][1] == count and all(a < b for a, b in bounds)
        assert all(bounds[j][1] == bounds[j + 1][0] for j in range(shards - 1))
    with pytest.raises(SearchError, match="every shard needs at least one row"):
        shard_bounds(2, 3)


def test_an_index_is_reused_for_the_same_inputs_and_rebuilt_for_others(tmp_path: Path) -> None:
    request = _request(np.random.default_rng(3), codecs="PCA16,Flat")
    (first,) = build_index(request, tmp_path, reference_shards=2)
    stamp = first.shard_path(0).stat().st_mtime_ns
    (again,) = build_index(request, tmp_path, reference_shards=2)
    assert again.meta["reused"] and again.shard_path(0).stat().st_mtime_ns == stamp
    assert {"codec", "dim", "count", "ids_digest", "faiss_version"} <= set(again.meta)
    changed = SearchRequest("x", request.queries, request.references * 2, request.train, "PCA16,Flat", "ip", 10,
                            reference_ids=request.reference_ids)
    (rebuilt,) = build_index(changed, tmp_path, reference_shards=2)
    assert not rebuilt.meta["reused"]


def test_a_search_refuses_an_index_built_for_other_features(tmp_path: Path) -> None:
    request = _request(np.random.default_rng(4), codecs="Flat")
    build_index(request, tmp_path / "index")
    narrower = SearchRequest("x", request.queries[:, :16], request.references[:, :16], None, "Flat", "ip", 10,
                             reference_ids=request.reference_ids)
    with pytest.raises(SearchError, match=r"dim: index has 32, these descriptors need 16"):
        search_shard(narrower, tmp_path / "index", tmp_path / "search", query_shard=0, query_shards=1,
                     reference_shard=0)
    renamed = SearchRequest("x", request.queries, request.references, None, "Flat", "ip", 10,
                            reference_ids=tuple(reversed(request.reference_ids)))
    with pytest.raises(SearchError, match="ids_digest"):
        search_shard(renamed, tmp_path / "index", tmp_path / "search", query_shard=0, query_shards=1,
                     reference_shard=0)


def test_a_missing_shard_is_named_and_a_rerun_redoes_only_it(tmp_path: Path) -> None:
    request = _request(np.random.default_rng(5), codecs="Flat")
    expected = search_inline(request)
    build_index(request, tmp_path / "index", reference_shards=2)
    files = {}
    for query_shard, reference_shard in shard_tasks(2, 2):
        if (query_shard, reference_shard) != (1, 0):  # this task "failed"
            (path,) = search_shard(request, tmp_path / "index", tmp_path / "search", query_shard=query_shard,
                                   query_shards=2, reference_shard=reference_shard)
            files[path] = path.stat().st_mtime_ns
    with pytest.raises(SearchError, match=r"q1-of-2\.r0-of-2\.npz of codec 'Flat': missing"):
        collect(request, tmp_path / "index", tmp_path / "search", query_shards=2)
    for query_shard, reference_shard in shard_tasks(2, 2):  # the re-run of every task
        search_shard(request, tmp_path / "index", tmp_path / "search", query_shard=query_shard, query_shards=2,
                     reference_shard=reference_shard)
    assert all(path.stat().st_mtime_ns == stamp for path, stamp in files.items())  # finished ones kept
    got = collect(request, tmp_path / "index", tmp_path / "search", query_shards=2)
    np.testing.assert_array_equal(got[("Flat", "none")][1], expected[("Flat", "none")][1])


def test_a_stale_shard_result_is_refused(tmp_path: Path) -> None:
    request = _request(np.random.default_rng(6), codecs="Flat")
    _sharded(request, tmp_path, 1, 1)
    longer = SearchRequest("x", request.queries, request.references, None, "Flat", "ip", 5,
                           reference_ids=request.reference_ids)
    with pytest.raises(SearchError, match="for other inputs"):
        collect(longer, tmp_path / "index", tmp_path / "search", query_shards=1)


# --- whole benchmarks: index -> search -> score with shards gives evaluate's records ---

def _embed_precomputed(benchmark: str, root: Path, out: Path, rng: np.random.Generator, dim: int = 16,
                       options: dict | None = None) -> None:
    """Features for every image of the benchmark (with duplicated rows: ties), through the real embed step."""
    from vsbench.benchmarks.registry import load_benchmark
    bench = load_benchmark(benchmark, root, **(options or {}))
    ids = sorted({i for images in bench.image_sets().values() for i in images.ids})
    values = rng.standard_normal((len(ids), dim)).astype(np.float32)
    values[1::5] = values[0::5][: len(values[1::5])]
    save_features(out.parent / f"{benchmark}-features.npz", FeatureSet(np.asarray(ids), values))
    run = BenchmarkRun(benchmark=benchmark, root=str(root), benchmark_options=options or {})
    Engine(run, out).embed_shard("precomputed", model_options={"path": str(out.parent / f"{benchmark}-features.npz")},
                                 progress=False)


@pytest.mark.parametrize("benchmark", ["disc", "copydays"])
def test_benchmark_records_equal_with_and_without_shards(tmp_path: Path, benchmark: str) -> None:
    from vsbench.benchmarks.copydays.synth import generate_copydays
    from vsbench.benchmarks.disc.synth import generate_disc

    if benchmark == "disc":
        generate_disc(tmp_path / "data", references=30, queries=20, train=24, seed=1)
        root, options = tmp_path / "data", {}
        search = {"codecs": "Flat;PCAW8,L2norm,Flat", "k": 5, "global_cap": 40, "score_norm": "1.00[0,2]"}
    else:
        generate_copydays(tmp_path / "data", originals=6, distractors=12, train=20, seed=1)
        root = tmp_path / "data" / "copydays"
        options = {"distractors": str(tmp_path / "data" / "distractors"),
                   "codec_train": str(tmp_path / "data" / "codec_train")}
        search = {"codecs": "Flat;PCA8,Flat", "k": 10, "score_norm": ""}
    out = tmp_path / "run"
    _embed_precomputed(benchmark, root, out, np.random.default_rng(7), options=options)
    one_process = BenchmarkRun(benchmark=benchmark, root=str(root), benchmark_options=options, **search)
    Engine(one_process, out).open_features()
    expected = Engine(one_process, out).evaluate().records
    os.remove(out / "metrics.json")
    sharded = one_process.model_copy(update={"search_shards": 2, "reference_shards": 3})
    manifest = Engine(sharded, out).index()  # each step a fresh engine, as each pipeline task is a process
    assert manifest["indexes"] and all(len(i["reference_shards"]) == 3 for i in manifest["indexes"])
    for task in range(2 * 3):
        Engine(sharded, out).search(task)
    got = Engine(sharded, out).score().records
    # The numbers, not the failure sheets: a sheet draws each query's top k, whose tied scores the
    # sharded merge may list in another order (the metrics are the same on any order of ties).
    assert _numbers(got) == _numbers(expected)
    assert _numbers(json.loads((out / "metrics.json").read_text())["records"]) == _numbers(expected)
    engine = Engine(sharded, out)  # and all in one engine, as the inline runner drives them
    engine.index()
    for task in range(2 * 3):
        engine.search(task)
    assert _numbers(engine.score().records) == _numbers(expected)


def _numbers(records: list[dict]) -> list[dict]:
    return [{key: value for key, value in record.items() if key != "failures"} for record in records]


def test_search_with_another_reference_shard_count_than_the_index_is_refused(tmp_path: Path) -> None:
    from vsbench.benchmarks.disc.synth import generate_disc

    generate_disc(tmp_path / "data", references=12, queries=8, train=10, seed=2)
    out = tmp_path / "run"
    _embed_precomputed("disc", tmp_path / "data", out, np.random.default_rng(8))
    run = BenchmarkRun(benchmark="disc", root=str(tmp_path / "data"), codecs="Flat", k=3, score_norm="",
                       reference_shards=2)
    Engine(run, out).index()
    with pytest.raises(ValueError, match="built with 2 reference shard"):
        Engine(run.model_copy(update={"reference_shards": 3}), out).search(0)


def test_search_params_reach_every_shard_and_key_the_results(tmp_path: Path) -> None:
    """nprobe = nlist makes IVF exhaustive: its results are Flat's; results searched with other
    settings are not merged; a setting the codec lacks names it."""
    rng = np.random.default_rng(9)
    request = _request(rng, codecs="IVF8,Flat", metric="l2")
    probe_all = SearchRequest("x", request.queries, request.references, request.train, "IVF8,Flat", "l2", 10,
                              search_params="nprobe=8", reference_ids=request.reference_ids)
    flat = search_inline(SearchRequest("x", request.queries, request.references, None, "Flat", "l2", 10))
    assert not np.array_equal(search_inline(request)[("IVF8,Flat", "none")][1], flat[("Flat", "none")][1])
    np.testing.assert_array_equal(search_inline(probe_all)[("IVF8,Flat", "none")][1], flat[("Flat", "none")][1])
    np.testing.assert_array_equal(_sharded(probe_all, tmp_path, 2, 2)[("IVF8,Flat", "none")][1],
                                  flat[("Flat", "none")][1])
    with pytest.raises(SearchError, match="for other inputs"):
        collect(request, tmp_path / "index", tmp_path / "search", query_shards=2)
    with pytest.raises(SearchError, match="do not apply to codec 'Flat'"):
        search_inline(SearchRequest("x", request.queries, request.references, None, "Flat", "l2", 10,
                                    search_params="nprobe=4"))
