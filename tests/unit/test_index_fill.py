"""The index step as three tasks (issue 31): train once, fill each reference shard from the embed
step's files, finish with index.json; the same numbers as one index, and the faults a fill can meet.

The encode block (``codec.ENCODE_BLOCK``, 65,536 rows) is set to 64 here so that small galleries
span many blocks and the shard bounds cut through them, which is where a sharded fill could round
differently from one index.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest

from vsbench.index import codec as codec_module
from vsbench.index.plan import SearchRequest
from vsbench.index.results import collect, search_shard, shard_tasks
from vsbench.index.settings import SearchError
from vsbench.index.store import INDEX_JSON, TRAIN_JSON, build_index, fill_shard, finish_index, train_index
from vsbench.io.features import FeatureError, FeatureSet, MappedRows, RowSource, map_npz_member, save_features

EXHAUSTIVE = ["Flat", "PCA16,Flat", "PCAW16,L2norm,Flat", "PQ4", "PQ2", "SQ8", "PCA32,SQ8"]
IVF = ["IVF8,Flat", "IVF8,PQ8x4", "IVF8,SQ8"]  # PQ8x4: 16 centroids per sub-quantizer, trained in a blink


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec_module, "ENCODE_BLOCK", 64)


def _data(seed: int = 31, references: int = 1000, dim: int = 32, ties: bool = True):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((12, dim)).astype(np.float32)
    r = (centres[rng.integers(0, 12, references)] + 0.3 * rng.standard_normal((references, dim))).astype(np.float32)
    if ties:  # exact duplicates across the shard bounds: equal scores at the k-th place
        r[700:720] = r[100:120]
        r[333] = r[334] = r[999]
    q = (r[rng.integers(0, references, 60)] + 0.05 * rng.standard_normal((60, dim))).astype(np.float32)
    t = (centres[rng.integers(0, 12, 600)] + 0.3 * rng.standard_normal((600, dim))).astype(np.float32)
    return q, r, t


def _request(codecs: str, references, queries, train, metric: str = "l2", k: int = 10, **extra) -> SearchRequest:
    return SearchRequest("g", queries, references, train, codecs, metric, k, search_params=extra.pop("params", ""),
                         reference_ids=tuple(f"r{i}" for i in range(len(references))), **extra)


def _sharded(request: SearchRequest, folder: Path, reference_shards: int, query_shards: int = 2):
    """Index, every search task, merge. Different shard counts under one ``folder`` share one
    trained codec (training is not in the comparison: k-means over threads need not repeat to the bit)."""
    build_index(request, folder / "index", reference_shards=reference_shards)
    search = folder / f"search-{reference_shards}x{query_shards}"
    for query_shard, reference_shard in shard_tasks(query_shards, reference_shards):
        search_shard(request, folder / "index", search, query_shard=query_shard, query_shards=query_shards,
                     reference_shard=reference_shard)
    return collect(request, folder / "index", search, query_shards=query_shards)


def _raw_faiss(codec: str, q, r, t, k: int, params: str = "") -> np.ndarray:
    """Today's one-pod index as FAISS itself builds it: factory, train, add every row at once, search."""
    index = faiss.index_factory(r.shape[1], codec, faiss.METRIC_L2)
    index.train(t)
    index.add(r)
    if params:
        faiss.ParameterSpace().set_index_parameters(index, params)
    return index.search(q, k)[1]


@pytest.mark.parametrize("codec", EXHAUSTIVE)
def test_exhaustive_codecs_give_the_same_ids_and_scores_sharded_as_in_one_index(tmp_path: Path, codec: str) -> None:
    q, r, t = _data()
    request = _request(codec, r, q, t)
    one = _sharded(request, tmp_path, 1, 1)
    for shards in (3, 7):
        many = _sharded(request, tmp_path, shards, 1)
        np.testing.assert_array_equal(many[(codec, "none")][1], one[(codec, "none")][1])
        np.testing.assert_array_equal(many[(codec, "none")][0], one[(codec, "none")][0])
    # Query shards too: the same ids; a PQ's distance tables are a BLAS product over the query
    # batch, so its scores may move in the last bits with the batch (as they do in FAISS alone).
    both = _sharded(request, tmp_path, 3, 2)
    np.testing.assert_array_equal(both[(codec, "none")][1], one[(codec, "none")][1])
    np.testing.assert_allclose(both[(codec, "none")][0], one[(codec, "none")][0], rtol=1e-5)


@pytest.mark.parametrize("codec", EXHAUSTIVE + IVF)
def test_one_index_equals_faiss_adding_every_row_at_once_below_one_block(tmp_path: Path, codec: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Below one encode block, the fills hold exactly what today's one-pod index (FAISS adding every
    row in one call) holds; IVF searched with the same nprobe."""
    monkeypatch.setattr(codec_module, "ENCODE_BLOCK", 65_536)
    q, r, t = _data(ties=False)
    params = "nprobe=3" if codec.startswith("IVF") else ""
    got = _sharded(_request(codec, r, q, t, params=params), tmp_path, 1, 1)
    np.testing.assert_array_equal(got[(codec, "none")][1], _raw_faiss(codec, q, r, t, 10, params))


@pytest.mark.parametrize("codec", IVF)
def test_ivf_recall_sharded_is_within_0005_of_one_index(tmp_path: Path, codec: str) -> None:
    q, r, t = _data()
    request = _request(codec, r, q, t, params="nprobe=3")
    exact = _raw_faiss("Flat", q, r, t, 10)

    def recall(ids: np.ndarray) -> float:
        return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids.tolist(), exact.tolist())]))

    one = recall(_sharded(request, tmp_path, 1, 1)[(codec, "none")][1])
    many = recall(_sharded(request, tmp_path, 4)[(codec, "none")][1])
    assert abs(one - many) <= 0.005, (one, many)


def test_hnsw_fills_one_graph_per_shard_and_keeps_recall(tmp_path: Path) -> None:
    q, r, t = _data(ties=False)
    got = _sharded(_request("HNSW16", r, q, t, params="efSearch=64"), tmp_path, 3)[("HNSW16", "none")][1]
    exact = _raw_faiss("Flat", q, r, t, 10)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got.tolist(), exact.tolist())]) >= 0.9


def test_score_normalization_sharded_equals_one_index(tmp_path: Path) -> None:
    q, r, t = _data()
    request = _request("PCAW16,L2norm,Flat", r, q, t, metric="ip", score_norm="1.00[0,2]", unnormalized=False)
    one = _sharded(request, tmp_path, 1, 1)
    many = _sharded(request, tmp_path, 3)
    for variant in one:
        np.testing.assert_array_equal(many[variant][1], one[variant][1])
        np.testing.assert_array_equal(many[variant][0], one[variant][0])


# --- the three tasks apart: what a fill reads, what a re-run redoes, what is refused ---

def _mapped(tmp_path: Path, r: np.ndarray, pieces: int = 3) -> MappedRows:
    """``r`` saved as the embed step saves shards, then opened in place as MappedRows."""
    parts, sources = [], []
    for number, rows in enumerate(np.array_split(r, pieces)):
        path = tmp_path / f"reference.shard-{number}-of-{pieces}.npz"
        save_features(path, FeatureSet(np.asarray([f"x{i}" for i in range(len(rows))]), rows))
        parts.append(map_npz_member(path, "features"))
        sources.append(RowSource(path.name, f"digest-{number}"))
    return MappedRows(parts, sources)


def test_a_mapped_npz_member_is_the_array_and_is_not_read_whole(tmp_path: Path) -> None:
    _, r, _ = _data()
    rows = _mapped(tmp_path, r)
    assert isinstance(rows.parts[0], np.memmap)
    np.testing.assert_array_equal(np.asarray(rows), r)
    np.testing.assert_array_equal(rows[330:700], r[330:700])
    np.testing.assert_array_equal(rows[[999, 0, 334, 500]], r[[999, 0, 334, 500]])
    assert [source[0] for source in rows.source_key(300, 400)] == ["reference.shard-0-of-3.npz",
                                                                   "reference.shard-1-of-3.npz"]


def test_a_fill_reads_only_its_own_shards_rows(tmp_path: Path) -> None:
    """Shard 0 of 4 (rows 0..249) lies in the first embed file: the others are never touched."""
    q, r, t = _data()
    rows = _mapped(tmp_path, r)
    touched = []
    rows.sources = [RowSource(s.name, s.sha256, lambda n=s.name: touched.append(n)) for s in rows.sources]
    rows._verified = [False] * len(rows.sources)
    request = _request("PCA16,Flat", rows, q, t)
    train_index(request, tmp_path / "index", "PCA16,Flat", reference_shards=4)
    fill_shard(request, tmp_path / "index", "PCA16,Flat", 0, reference_shards=4)
    assert touched == ["reference.shard-0-of-3.npz"]


def test_mapped_rows_give_the_same_results_as_rows_in_memory(tmp_path: Path) -> None:
    q, r, t = _data()
    (tmp_path / "m").mkdir()
    in_memory = _sharded(_request("PCA16,Flat", r, q, t), tmp_path / "a", 4)
    (tmp_path / "b" / "index").mkdir(parents=True)  # the same trained codec: only the rows' source differs
    shutil.copytree(tmp_path / "a" / "index" / "g", tmp_path / "b" / "index" / "g")
    mapped = _sharded(_request("PCA16,Flat", _mapped(tmp_path / "m", r), q, t), tmp_path / "b", 4)
    np.testing.assert_array_equal(mapped[("PCA16,Flat", "none")][1], in_memory[("PCA16,Flat", "none")][1])
    np.testing.assert_array_equal(mapped[("PCA16,Flat", "none")][0], in_memory[("PCA16,Flat", "none")][0])


def test_a_fill_killed_mid_write_leaves_nothing_a_search_reads_and_the_rerun_fills_only_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    q, r, t = _data()
    request = _request("SQ8", r, q, t)
    expected = _sharded(request, tmp_path, 3)
    folder = tmp_path / "index" / "g" / "SQ8"
    (folder / "reference-1-of-3.json").unlink()  # a fill that must run again
    from vsbench.index import store

    def killed(path: Path, writer) -> None:  # the process dies after writing part of the temporary file
        temporary = path.with_name(f".{path.name}.{12345}.tmp")
        temporary.write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(store, "_write", killed)
    with pytest.raises(KeyboardInterrupt):
        fill_shard(request, tmp_path / "index", "SQ8", 1, reference_shards=3)
    monkeypatch.undo()
    assert not (folder / INDEX_JSON).exists()  # no search reads a half-filled index
    with pytest.raises(SearchError, match=r"no index for codec 'SQ8'"):
        search_shard(request, tmp_path / "index", tmp_path / "other", query_shard=0, query_shards=1, reference_shard=1)
    with pytest.raises(SearchError, match=r"reference-1-of-3\.json: missing .* --fill --shard 1"):
        finish_index(request, tmp_path / "index", "SQ8", reference_shards=3)
    shutil.rmtree(tmp_path / "search-3x2")
    with caplog.at_level(logging.INFO, logger="vsbench.index"):
        got = _sharded(request, tmp_path, 3)
    messages = [record.getMessage() for record in caplog.records]
    assert sum("kept (same trained codec and rows)" in m for m in messages) == 2
    assert any("trained codec reused" in m for m in messages)
    np.testing.assert_array_equal(got[("SQ8", "none")][1], expected[("SQ8", "none")][1])


@pytest.mark.parametrize("damage", ["flip", "truncate", "swap"])
def test_a_damaged_shard_is_the_only_one_filled_again(tmp_path: Path, damage: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    q, r, t = _data()
    request = _request("PQ4", r, q, t)
    expected = _sharded(request, tmp_path, 3)
    folder = tmp_path / "index" / "g" / "PQ4"
    target = folder / "reference-2-of-3.faiss"
    data = bytearray(target.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 1
    elif damage == "truncate":
        data = data[:-10]
    else:
        data = bytearray((folder / "reference-0-of-3.faiss").read_bytes())
    target.write_bytes(bytes(data))
    shutil.rmtree(tmp_path / "search-3x2")
    with caplog.at_level(logging.INFO, logger="vsbench.index"):
        got = _sharded(request, tmp_path, 3)
    refilled = [m.getMessage() for m in caplog.records if "filled again" in m.getMessage()]
    assert len(refilled) == 1 and "reference-2-of-3.faiss" in refilled[0]
    np.testing.assert_array_equal(got[("PQ4", "none")][1], expected[("PQ4", "none")][1])


def test_a_shard_filled_from_other_features_or_another_trained_codec_is_refused_naming_the_field(
        tmp_path: Path) -> None:
    q, r, t = _data()
    request = _request("PCA16,Flat", r, q, t)
    build_index(request, tmp_path / "a", reference_shards=3)
    other_rows = r.copy()
    other_rows[400] += 1  # shard 1 of 3 (rows 334..666) holds other features
    build_index(_request("PCA16,Flat", other_rows, q, t), tmp_path / "b", reference_shards=3)
    build_index(_request("PCA16,Flat", r, q, t[::-1].copy()), tmp_path / "c", reference_shards=3)
    folder = tmp_path / "a" / "g" / "PCA16_Flat"
    for donor, shard, field, why in (("b", 1, "rows", "other features"),
                                     ("c", 2, "trained_digest", "another trained codec")):
        for suffix in (".faiss", ".json"):
            name = f"reference-{shard}-of-3{suffix}"
            shutil.copy(tmp_path / donor / "g" / "PCA16_Flat" / name, folder / name)
        with pytest.raises(SearchError, match=rf"reference-{shard}-of-3\.json: filled from {why} \({field} differ\)"):
            finish_index(request, tmp_path / "a", "PCA16,Flat", reference_shards=3)
        fill_shard(request, tmp_path / "a", "PCA16,Flat", shard, reference_shards=3)  # the fix the line names
    finish_index(request, tmp_path / "a", "PCA16,Flat", reference_shards=3)


def test_a_fill_before_training_or_for_other_descriptors_is_one_line(tmp_path: Path) -> None:
    q, r, t = _data()
    request = _request("Flat", r, q, t)
    with pytest.raises(SearchError, match=r"train\.json: no trained codec 'Flat'.*--train"):
        fill_shard(request, tmp_path, "Flat", 0, reference_shards=2)
    train_index(request, tmp_path, "Flat", reference_shards=2)
    with pytest.raises(SearchError, match=r"train\.json was trained for other inputs.*count"):
        fill_shard(_request("Flat", r[:900], q, t), tmp_path, "Flat", 0, reference_shards=2)
    with pytest.raises(SearchError, match=r"reference shard 2 does not exist"):
        fill_shard(request, tmp_path, "Flat", 2, reference_shards=2)


def test_train_json_and_shard_records_say_what_they_are_for(tmp_path: Path) -> None:
    q, r, t = _data()
    build_index(_request("IVF8,PQ8x4", r, q, t), tmp_path, reference_shards=2)
    folder = tmp_path / "g" / "IVF8_PQ8x4"
    trained = json.loads((folder / TRAIN_JSON).read_text())
    shard = json.loads((folder / "reference-1-of-2.json").read_text())
    assert trained["key"]["train_count"] == 600 and set(trained["files"]) == {"trained.faiss"}
    assert shard["trained_digest"] == trained["trained_digest"] and shard["bounds"] == [500, 1000]
    assert shard["rows"].startswith("rows:") and len(shard["file"]["sha256"]) == 64


def test_a_changed_embed_shard_is_named_when_a_fill_reads_it(tmp_path: Path) -> None:
    """open_shards verifies each embed shard file against its manifest before its rows are read."""
    from vsbench.retrieval.shards import open_shards

    _, r, _ = _data()
    for number, rows in enumerate(np.array_split(r, 2)):
        path = tmp_path / f"reference.shard-{number}-of-2.npz"
        save_features(path, FeatureSet(np.asarray([f"id{number}-{i}" for i in range(len(rows))]), rows))
        from vsbench.io.storage import file_sha256

        (tmp_path / f"reference.shard-{number}-of-2.json").write_text(json.dumps({
            "complete": True, "model": "m", "options": {}, "dim": 32, "features": path.name,
            "features_sha256": file_sha256(path)}))
    opened = open_shards(tmp_path, "reference")
    np.testing.assert_array_equal(opened.features[0:1000], r)
    path = tmp_path / "reference.shard-1-of-2.npz"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40  # inside the features array
    path.write_bytes(bytes(data))
    reopened = open_shards(tmp_path, "reference")
    np.testing.assert_array_equal(reopened.features[0:10], r[0:10])  # shard 0 is untouched and readable
    with pytest.raises(FeatureError, match=r"reference\.shard-1-of-2\.npz: its sha256 is not the one .* re-run the embed"):
        reopened.features[600:610]


# --- the commands: --train, --fill --shard i, --finish, as the pipeline's tasks run them ---

def _disc_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, codecs: str):
    """A synthetic DISC with precomputed features embedded in 3 shards (the pipeline's embed step)."""
    from vsbench.benchmarks.disc.synth import generate_disc
    from vsbench.benchmarks.registry import load_benchmark
    from vsbench.retrieval.engine import Engine
    from vsbench.runspec.run import BenchmarkRun

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    root = tmp_path / "data"
    generate_disc(root, references=300, queries=40, train=200, seed=3)
    bench = load_benchmark("disc", root)
    ids = sorted({i for images in bench.image_sets().values() for i in images.ids})
    values = np.random.default_rng(5).standard_normal((len(ids), 24)).astype(np.float32)
    row = {name: number for number, name in enumerate(ids)}
    for query, reference in zip(bench.gt_query, bench.gt_reference):
        if query in row and reference in row:
            values[row[query]] = values[row[reference]] + np.float32(0.8)
    save_features(tmp_path / "features.npz", FeatureSet(np.asarray(ids), values))
    for out in ("one", "tasks"):
        for shard in range(3):
            run = BenchmarkRun(benchmark="disc", root=str(root), codecs=codecs, k=5, score_norm="1.00[0,2]")
            Engine(run, tmp_path / out).embed_shard("precomputed", shard=shard, num_shards=3, progress=False,
                                                    model_options={"path": str(tmp_path / "features.npz")})
    return root


def _cli(*args: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from vsbench.cli.app import app

    result = CliRunner().invoke(app, ["similarity", *args])
    return result.exit_code, result.output


def test_train_fill_finish_commands_give_the_table_of_one_index_command(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    codecs = "Flat;PCAW16,L2norm,Flat;PQ4x4;IVF4,Flat"
    root = _disc_run(tmp_path, monkeypatch, codecs)
    common = ["--benchmark", "disc", "--root", str(root), "--codecs", codecs, "--k", "5", "--score-norm", "1.00[0,2]"]
    tables = {}
    for out, shards in (("one", "1"), ("tasks", "4")):
        where = ["--out", str(tmp_path / out), "--reference-shards", shards]
        if out == "one":
            code, text = _cli("index", *common, *where)
            assert code == 0, text
        else:
            code, text = _cli("index", *common, *where, "--train")
            assert code == 0 and "l2/Flat: trained" in text, text
            for shard in (3, 1, 0, 2):  # any order, as a ParallelFor finishes them
                code, text = _cli("index", *common, *where, "--fill", "--shard", str(shard))
                assert code == 0 and f"shard {shard}" in text and "filled" in text, text
            code, text = _cli("index", *common, *where, "--finish")
            assert code == 0 and "4 shard(s)" in text, text
        code, text = _cli("search", *common, *where, "--search-shards", "2")
        assert code == 0, text
        code, text = _cli("score", *common, "--out", str(tmp_path / out), "--search-shards", "2")
        assert code == 0, text
        tables[out] = (tmp_path / out / "disc_metrics.csv").read_text()
    import csv
    import io

    rows = {out: {(line[0], line[1]): line for line in list(csv.reader(io.StringIO(table)))[1:]}
            for out, table in tables.items()}
    assert len(rows["one"]) == 8 and set(rows["one"]) == set(rows["tasks"])  # 4 codecs, raw and normalized
    for name, line in rows["one"].items():  # exhaustive codecs: the very table; IVF: the tie rule allows a swap
        assert 0.01 < float(line[2]) < 1.0, line  # a table where a changed neighbour shows
        if not name[0].startswith("IVF"):
            assert rows["tasks"][name] == line
    assert not list((tmp_path / "tasks" / "features").glob("reference.npz"))  # no merged gallery file
    code, text = _cli("index", *common, "--out", str(tmp_path / "tasks"), "--reference-shards", "4", "--fill",
                      "--shard", "1")
    assert code == 0 and "kept" in text, text


@pytest.mark.parametrize("flags", [["--train", "--finish"], ["--fill"], ["--shard", "1"], ["--fill", "--shard", "9"]])
def test_wrong_stage_flags_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]) -> None:
    root = _disc_run(tmp_path, monkeypatch, "Flat")
    code, text = _cli("index", "--benchmark", "disc", "--root", str(root), "--out", str(tmp_path / "tasks"),
                      "--reference-shards", "2", *flags)
    assert code == 2 and "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    assert text.startswith("error:") and ("--fill" in text or "reference shard 9" in text or "--train" in text), text


def test_a_non_finite_row_is_named_when_a_fill_reads_it_not_before(tmp_path: Path) -> None:
    q, r, t = _data()
    r[900, 3] = np.nan
    rows = _mapped(tmp_path, r)
    FeatureSet(np.asarray([f"x{i}" for i in range(len(r))]), rows).check_finite()  # nothing read here
    request = _request("Flat", rows, q, t)
    train_index(request, tmp_path / "index", "Flat", reference_shards=2)
    fill_shard(request, tmp_path / "index", "Flat", 0, reference_shards=2)  # rows 0..499: all finite
    with pytest.raises(FeatureError, match=r"reference\.shard-2-of-3\.npz: row 233 has NaN or infinite values"):
        fill_shard(request, tmp_path / "index", "Flat", 1, reference_shards=2)


@pytest.mark.parametrize("metric", ["l2", "ip"])
def test_flat_shards_on_faiss_tiles_give_one_indexs_floats(tmp_path: Path, metric: str) -> None:
    """Reference shards on 1,024-row tiles: every distance is computed in the tile it has in one
    search, so the floats (and near-ties) are one index's. Query shards keep the ids; a distance's
    last bit also depends on the query batch's size, in FAISS alone as well."""
    rng = np.random.default_rng(7)
    r = rng.standard_normal((7_000, 16)).astype(np.float32)
    q = rng.standard_normal((8_500, 16)).astype(np.float32)
    request = _request("Flat", r, q, None, metric=metric)
    one = _sharded(request, tmp_path, 1, 1)[("Flat", "none")]
    many = _sharded(request, tmp_path, 3, 1)[("Flat", "none")]
    np.testing.assert_array_equal(many[1], one[1])
    np.testing.assert_array_equal(many[0], one[0])
    both = _sharded(request, tmp_path, 3, 2)[("Flat", "none")]
    np.testing.assert_array_equal(both[1], one[1])
    np.testing.assert_allclose(both[0], one[0], rtol=1e-5)
