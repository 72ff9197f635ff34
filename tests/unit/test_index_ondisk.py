"""IVF reference shards merged into one on-disk index (issue 31): the merged index answers in the
same global ids as the sharded search, its files are keyed and verified like the shards, a killed
merge leaves nothing a search reads, and codecs without inverted lists are one line.

The encode block is 64 rows (as in test_index_fill.py) and 1,000 references in 3 shards are 334,
333 and 333 rows: unequal shards, where FAISS's own ``shift_ids`` would give wrong ids.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import faiss
import numpy as np
import pytest

from tests.unit.test_index_fill import _cli, _data, _disc_run, _raw_faiss, _request
from vsbench.index import codec as codec_module
from vsbench.index import ondisk
from vsbench.index.results import collect, search_merged, search_shard, shard_tasks
from vsbench.index.settings import SearchError
from vsbench.index.store import INDEX_JSON, build_index, finish_index, load_index_info

IVF = ["IVF8,Flat", "IVF8,PQ8", "IVF8,SQ8", "PCA16,IVF8,Flat"]
SHARDS = 3


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec_module, "ENCODE_BLOCK", 64)


def _both(request, folder: Path, query_shards: int = 2):
    """The index built with the merged files, then the sharded search (N x M tasks) and the merged
    one (N tasks) of the same index, each merged by collect."""
    build_index(request, folder / "index", reference_shards=SHARDS, merge_ondisk=True)
    for query_shard, reference_shard in shard_tasks(query_shards, SHARDS):
        search_shard(request, folder / "index", folder / "search", query_shard=query_shard, query_shards=query_shards,
                     reference_shard=reference_shard)
    for query_shard in range(query_shards):
        search_merged(request, folder / "index", folder / "search", query_shard=query_shard, query_shards=query_shards)
    return (collect(request, folder / "index", folder / "search", query_shards=query_shards),
            collect(request, folder / "index", folder / "search", query_shards=query_shards, merged=True))


def _recall(ids: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids.tolist(), exact.tolist())]))


@pytest.mark.parametrize("codec", IVF)
def test_the_merged_index_gives_the_sharded_searchs_ids_scores_and_recall(tmp_path: Path, codec: str) -> None:
    q, r, t = _data()
    request = _request(codec, r, q, t, params="nprobe=3")
    sharded, merged = _both(request, tmp_path)
    (scores, ids), (merged_scores, merged_ids) = sharded[(codec, "none")], merged[(codec, "none")]
    exact = _raw_faiss("Flat", q, r, t, 10)
    assert abs(_recall(merged_ids, exact) - _recall(ids, exact)) <= 0.005
    assert _recall(merged_ids, exact) > 0.5  # a search that finds neighbours, so a wrong id would show
    # The shards are one trained codec's lists cut by rows: concatenated they are one index's lists,
    # probed in the same order, so the very ids and scores come back (ties included, _data has some).
    np.testing.assert_array_equal(merged_ids, ids)
    np.testing.assert_array_equal(merged_scores, scores)


def test_the_merged_lists_hold_every_global_id_once_and_a_reference_finds_itself(tmp_path: Path) -> None:
    """Unequal shards (334, 333, 333 rows): each shard's ids are shifted by its own first row."""
    _, r, t = _data(ties=False)
    queries = r[[0, 333, 334, 666, 667, 999]]  # the first and last row of every shard
    request = _request("IVF8,Flat", r, queries, t, params="nprobe=8")
    build_index(request, tmp_path / "index", reference_shards=SHARDS, merge_ondisk=True)
    info = load_index_info(request, tmp_path / "index", "IVF8,Flat")
    assert [b[1] - b[0] for b in info.reference_shards] == [334, 333, 333]
    index = info.read_merged()
    lists = faiss.extract_index_ivf(index).invlists
    ids = np.concatenate([faiss.rev_swig_ptr(lists.get_ids(n), lists.list_size(n)).copy() for n in range(lists.nlist)])
    np.testing.assert_array_equal(np.sort(ids), np.arange(1000))
    search_merged(request, tmp_path / "index", tmp_path / "search", query_shard=0, query_shards=1)
    found = collect(request, tmp_path / "index", tmp_path / "search", query_shards=1, merged=True)
    np.testing.assert_array_equal(found[("IVF8,Flat", "none")][1][:, 0], [0, 333, 334, 666, 667, 999])


def test_index_json_records_the_merged_files_and_a_rerun_keeps_them(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    q, r, t = _data()
    request = _request("IVF8,PQ8", r, q, t)
    build_index(request, tmp_path, reference_shards=SHARDS, merge_ondisk=True)
    folder = tmp_path / "g" / "IVF8_PQ8"
    meta = json.loads((folder / INDEX_JSON).read_text())
    record = json.loads((folder / "merged-of-3.json").read_text())
    for name in ("merged-of-3.faiss", "merged-of-3.ivfdata"):
        assert meta["files"][name] == record["files"][name] and len(record["files"][name]["sha256"]) == 64
    assert meta["merged"]["count"] == 1000
    assert record["shards"] == {f"reference-{j}-of-3.faiss": meta["files"][f"reference-{j}-of-3.faiss"]["sha256"]
                                for j in range(SHARDS)}
    assert not list(folder.glob(".*.tmp"))
    with caplog.at_level(logging.INFO, logger="vsbench.index"):
        build_index(request, tmp_path, reference_shards=SHARDS, merge_ondisk=True)
    assert any("merged-of-3.faiss kept (merged from the same shards)" in m.getMessage() for m in caplog.records)
    # Without the option the index is the shards alone again; the merged files are not recorded.
    finish_index(request, tmp_path, "IVF8,PQ8", reference_shards=SHARDS)
    assert "merged" not in json.loads((folder / INDEX_JSON).read_text())
    with pytest.raises(SearchError, match=r"index\.json: records no merged index; run vsbench similarity index "
                                          r"--finish --merge-ondisk"):
        search_merged(request, tmp_path, tmp_path / "search", query_shard=0, query_shards=1)


@pytest.mark.parametrize("name", ["merged-of-3.ivfdata", "merged-of-3.faiss"])
@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_merged_file_is_refused_naming_it_and_the_rerun_repairs_it(
        tmp_path: Path, name: str, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    q, r, t = _data()
    request = _request("IVF8,SQ8", r, q, t, params="nprobe=3")
    _, expected = _both(request, tmp_path, query_shards=1)
    target = tmp_path / "index" / "g" / "IVF8_SQ8" / name
    data = bytearray(target.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 1
    else:
        data = data[:-8]
    target.write_bytes(bytes(data))
    shutil.rmtree(tmp_path / "search")
    with pytest.raises(SearchError, match=re.escape(name) + r": .*re-run the index step") as refused:
        search_merged(request, tmp_path / "index", tmp_path / "search", query_shard=0, query_shards=1)
    assert len(str(refused.value).splitlines()) == 1
    with caplog.at_level(logging.INFO, logger="vsbench.index"):
        build_index(request, tmp_path / "index", reference_shards=SHARDS, merge_ondisk=True)
    again = [m.getMessage() for m in caplog.records if "merged again" in m.getMessage()]
    assert len(again) == 1 and name in again[0]
    assert not any("filled again" in m.getMessage() for m in caplog.records)  # the shards were sound
    search_merged(request, tmp_path / "index", tmp_path / "search", query_shard=0, query_shards=1)
    got = collect(request, tmp_path / "index", tmp_path / "search", query_shards=1, merged=True)
    np.testing.assert_array_equal(got[("IVF8,SQ8", "none")][1], expected[("IVF8,SQ8", "none")][1])


def test_a_merge_killed_mid_write_leaves_nothing_a_search_reads_and_the_rerun_merges(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q, r, t = _data()
    request = _request("IVF8,Flat", r, q, t, params="nprobe=3")
    _, expected = _both(request, tmp_path, query_shards=1)
    folder = tmp_path / "index" / "g" / "IVF8_Flat"
    (folder / "merged-of-3.json").unlink()  # a merge that must run again
    real = ondisk._fill_lists

    def killed(merged, shard_lists, starts):  # the lists are half written when the process dies
        real(merged, shard_lists[:1], starts[:1])
        raise KeyboardInterrupt

    monkeypatch.setattr(ondisk, "_fill_lists", killed)
    with pytest.raises(KeyboardInterrupt):
        finish_index(request, tmp_path / "index", "IVF8,Flat", reference_shards=SHARDS, merge_ondisk=True)
    monkeypatch.undo()
    assert not (folder / INDEX_JSON).exists() and not (folder / "merged-of-3.json").exists()
    assert not list(folder.glob(".merged-of-3.*"))  # the temporary files are gone (a SIGKILL's are ignored)
    for search in (lambda: search_merged(request, tmp_path / "index", tmp_path / "other", query_shard=0,
                                         query_shards=1),
                   lambda: search_shard(request, tmp_path / "index", tmp_path / "other", query_shard=0,
                                        query_shards=1, reference_shard=0)):
        with pytest.raises(SearchError, match=r"no index for codec 'IVF8,Flat'"):
            search()
    finish_index(request, tmp_path / "index", "IVF8,Flat", reference_shards=SHARDS, merge_ondisk=True)
    search_merged(request, tmp_path / "index", tmp_path / "again", query_shard=0, query_shards=1)
    got = collect(request, tmp_path / "index", tmp_path / "again", query_shards=1, merged=True)
    np.testing.assert_array_equal(got[("IVF8,Flat", "none")][1], expected[("IVF8,Flat", "none")][1])


def test_a_merge_killed_between_its_files_is_never_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The data file renamed into place, the process dies before the .faiss file is: no index.json,
    and after a re-run both files are the ones it records."""
    q, r, t = _data()
    request = _request("IVF8,PQ8", r, q, t)
    build_index(request, tmp_path, reference_shards=SHARDS, merge_ondisk=True)
    folder = tmp_path / "g" / "IVF8_PQ8"
    (folder / "merged-of-3.json").unlink()

    def dies_before_writing(index, path):
        raise KeyboardInterrupt

    monkeypatch.setattr(ondisk.faiss, "write_index", dies_before_writing)
    with pytest.raises(KeyboardInterrupt):
        finish_index(request, tmp_path, "IVF8,PQ8", reference_shards=SHARDS, merge_ondisk=True)
    monkeypatch.undo()
    assert not (folder / INDEX_JSON).exists()
    finish_index(request, tmp_path, "IVF8,PQ8", reference_shards=SHARDS, merge_ondisk=True)
    info = load_index_info(request, tmp_path, "IVF8,PQ8")
    assert info.read_merged().ntotal == 1000


def test_codecs_without_inverted_lists_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q, r, t = _data()
    for codec in ("Flat", "PQ4", "HNSW16"):
        request = _request(codec, r, q, t)
        with pytest.raises(SearchError, match=rf"--merge-ondisk applies to IVF codecs only: codec '{codec}' is not "
                                              r"one \(its final index is a Index\w+, not an IVF index\)"):
            build_index(request, tmp_path, reference_shards=2, merge_ondisk=True)
    root = _disc_run(tmp_path, monkeypatch, "Flat")
    for command in ("index", "search", "score", "run"):
        code, text = _cli(command, "--benchmark", "disc", "--root", str(root), "--out", str(tmp_path / "tasks"),
                          "--codecs", "Flat;IVF4,Flat", "--merge-ondisk")
        assert code == 2 and "Traceback" not in text and len(text.strip().splitlines()) == 1, text
        assert "applies to IVF codecs only: 'Flat' is not one" in text, text


def test_the_commands_with_merge_ondisk_give_the_sharded_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    codecs = "IVF4,Flat;PCA16,IVF4,PQ4x4"
    root = _disc_run(tmp_path, monkeypatch, codecs)
    common = ["--benchmark", "disc", "--root", str(root), "--codecs", codecs, "--k", "5", "--score-norm", "1.00[0,2]",
              "--out", str(tmp_path / "tasks"), "--reference-shards", "3"]
    assert _cli("index", *common, "--train")[0] == 0
    for shard in range(3):
        assert _cli("index", *common, "--fill", "--shard", str(shard))[0] == 0
    assert _cli("index", *common, "--finish")[0] == 0
    code, text = _cli("search", *common, "--merge-ondisk")
    assert code == 2 and "built without --merge-ondisk" in text and "Traceback" not in text, text
    code, text = _cli("index", *common, "--finish", "--merge-ondisk")
    assert code == 0 and "3 shard(s), merged on disk" in text and "resizing" not in text, text
    tables = {}
    for merged in ([], ["--merge-ondisk"]):
        code, text = _cli("search", *common, "--search-shards", "2", *merged)
        assert code == 0, text
        assert text.count("result file(s)") == (2 if merged else 6), text  # N tasks, not N x M
        code, text = _cli("score", *common[:-2], "--search-shards", "2", *merged)
        assert code == 0, text
        tables[bool(merged)] = (tmp_path / "tasks" / "disc_metrics.csv").read_text()
    assert tables[True] == tables[False]
    assert len(tables[True].strip().splitlines()) == 5  # 2 codecs, raw and normalized
