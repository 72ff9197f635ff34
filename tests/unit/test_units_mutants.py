"""`vsbench.stats.units`' containers pinned value for value (issue 56: `make mutate` found `concat`,
`take`, `ListColumn`'s constructors and `Labels` reached only through whole benchmarks, whose
statistics did not notice a lost category, a shifted offset or a label out of order).

Each test was seen failing with its mutant planted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vsbench.stats.units import (
    Labels,
    ListColumn,
    Units,
    UnitsError,
    digest_of,
    parse_metadata,
    read_units,
    sorted_codes,
    units_from_bytes,
)

METRICS = {"m": {"statistic": "ratio", "num": "x"}}


def _lists(column: ListColumn) -> list[list[object]]:
    return [column[i].tolist() for i in range(len(column))]


def test_list_columns_from_lists_owners_and_texts() -> None:
    column = ListColumn.from_lists([[1, 2], [], [3]])
    assert column.values.dtype == np.float64 and column.values.tolist() == [1.0, 2.0, 3.0]
    assert column.offsets.dtype == np.int64 and column.offsets.tolist() == [0, 2, 2, 3]
    assert _lists(column) == [[1.0, 2.0], [], [3.0]] and len(column) == 3
    assert column.owner().tolist() == [0, 0, 2] and column.owner().dtype == np.int32
    ints = ListColumn.from_lists([[1], [2, 3]], dtype=np.int64)
    assert ints.values.dtype == np.int64 and ints.offsets.tolist() == [0, 1, 3]
    empty = ListColumn.from_lists([], dtype=np.int8)
    assert empty.values.dtype == np.int8 and empty.values.size == 0 and empty.offsets.tolist() == [0]
    owned = ListColumn.from_owner(np.array([10, 20, 30, 40]), np.array([2, 0, 2, 0]), 4)
    assert owned.offsets.dtype == np.int64 and owned.offsets.tolist() == [0, 2, 2, 4, 4]
    assert _lists(owned) == [[20, 40], [], [10, 30], []]  # stable within a unit
    coded = ListColumn.coded(np.array(["b", "a", "b", "c"]), np.array([0, 3, 4]))
    assert coded.categories.tolist() == ["a", "b", "c"] and coded.values.tolist() == [1, 0, 1, 2]
    assert coded.values.dtype == np.int32 and _lists(coded) == [["b", "a", "b"], ["c"]]
    assert coded.texts().tolist() == ["b", "a", "b", "c"] and coded.category_texts().tolist() == ["a", "b", "c"]
    assert ListColumn.from_lists([[1.5]]).texts().tolist() == [1.5]
    arrow = ListColumn(np.array([1, 1, 0], dtype=np.int32), np.array([0, 2, 3]), pa.array(["x", "y"]))
    assert arrow.category_texts().tolist() == ["x", "y"] and _lists(arrow) == [["y", "y"], ["x"]]
    with pytest.raises(ValueError, match="^a list column without categories$"):
        column.category_texts()


def test_taking_rows_keeps_each_units_list_and_its_categories() -> None:
    coded = ListColumn.coded(np.array(["b", "a", "b", "c", "d"]), np.array([0, 3, 3, 5]))
    taken = coded.take(np.array([2, 0, 1]))
    assert taken.offsets.tolist() == [0, 2, 5, 5] and _lists(taken) == [["c", "d"], ["b", "a", "b"], []]
    assert taken.categories is coded.categories


def _pair() -> tuple[Units, Units]:
    first = Units("query", "toy", np.array(["q1", "q2"]),
                  {"x": np.array([0.5, 1.0]), "scores": ListColumn.from_lists([[0.9, 0.1], [0.4]]),
                   "refs": ListColumn.coded(np.array(["r2", "r1", "r1"]), np.array([0, 2, 3]))},
                  METRICS, np.array(["g1", "g2"]), "Flat")
    second = Units("query", "toy", np.array([7, 8]),
                   {"x": np.array([0.0, 0.25]), "scores": ListColumn.from_lists([[], [0.7, 0.6]]),
                    "refs": ListColumn.coded(np.array(["r3", "r1"]), np.array([0, 0, 2]))},
                   METRICS, np.array(["g1", "g3"]), "PCA")
    return first, second


def test_units_pooled_keep_every_column_list_category_cluster_and_id() -> None:
    first, second = _pair()
    pool = first.concat(second)
    assert pool.kind == "query" and pool.benchmark == "toy" and pool.variant == "Flat" and pool.metrics == METRICS
    assert pool.ids.tolist() == ["q1", "q2", "7", "8"]
    assert pool.columns["x"].tolist() == [0.5, 1.0, 0.0, 0.25]
    assert pool.columns["scores"].offsets.tolist() == [0, 2, 3, 3, 5]
    assert _lists(pool.columns["scores"]) == [[0.9, 0.1], [0.4], [], [0.7, 0.6]]
    assert _lists(pool.columns["refs"]) == [["r2", "r1"], ["r1"], [], ["r3", "r1"]]
    assert pool.clusters.tolist() == ["g1", "g2", "g1", "g3"]
    plain = Units("query", "toy", np.array(["a"]), {"x": np.array([1.0])}, METRICS)
    assert plain.concat(plain).clusters is None
    assert first.concat(replace_clusters(second, None)).clusters is None


def replace_clusters(units: Units, clusters: object) -> Units:
    return Units(units.kind, units.benchmark, units.ids, units.columns, units.metrics, clusters, units.variant)


def test_units_that_cannot_be_pooled_say_why() -> None:
    first, second = _pair()
    other = Units("query", "toy", np.array(["a"]), {"x": np.array([1.0])}, METRICS)
    with pytest.raises(UnitsError) as caught:
        first.concat(other)
    assert str(caught.value) == "units with other columns cannot be pooled: ['refs', 'scores', 'x'] vs ['x']"
    flat = Units("query", "toy", second.ids, {**second.columns, "scores": np.array([1.0, 2.0])}, METRICS)
    with pytest.raises(UnitsError) as caught:
        first.concat(flat)
    assert str(caught.value) == "column 'scores' is a list in one unit file and not in the other"


def test_taking_units_takes_every_column_and_cluster() -> None:
    first, _ = _pair()
    taken = first.take(np.array([1, 0]))
    assert taken.ids.tolist() == ["q2", "q1"] and taken.variant == "Flat" and taken.metrics == METRICS
    assert taken.columns["x"].tolist() == [1.0, 0.5] and _lists(taken.columns["refs"]) == [["r1"], ["r2", "r1"]]
    assert taken.clusters.tolist() == ["g2", "g1"]
    labels = Labels.from_texts(np.array(["b", "a", "b", "c"]))
    grouped = Units("query", "toy", np.array(list("wxyz")), {"x": np.arange(4.0)}, METRICS, labels)
    part = grouped.take(np.array([3, 0, 2]))
    assert isinstance(part.clusters, Labels) and part.clusters.tolist() == ["c", "b", "b"]
    assert part.clusters.codes.tolist() == [1, 0, 0] and part.clusters.count == 2
    assert part.cluster_index()[1] == 2


def test_labels_read_as_the_text_array_they_stand_for() -> None:
    labels = Labels.from_texts(np.array(["b", "a", "b", "c"]))
    assert labels.codes.tolist() == [1, 0, 1, 2] and labels.codes.dtype == np.int32 and labels.count == 3
    assert labels.tolist() == ["b", "a", "b", "c"] and len(labels) == 4
    assert np.asarray(labels).tolist() == ["b", "a", "b", "c"] and np.asarray(labels, dtype=object).dtype == object
    assert labels[2] == "b" and labels[np.int64(1)] == "a" and labels[1:3].tolist() == ["a", "b"]
    assert labels.categories().to_pylist() == ["a", "b", "c"]
    prefixed = Labels(np.array([0, 1, 1], dtype=np.int32), 2, (("source:", np.array(["x"])), ("unit:", pa.array(["q"]))))
    assert prefixed.tolist() == ["source:x", "unit:q", "unit:q"] and prefixed.arrow().type == pa.string()
    none = Labels(np.zeros(0, dtype=np.int32), 0, ())
    assert np.asarray(none).size == 0 and none.categories().to_pylist() == []


def test_sorted_codes_are_numpy_uniques_inverse() -> None:
    labels = np.array(["b", "a", "b", "c", "a"])
    codes, count = sorted_codes(labels)
    _, inverse = np.unique(labels, return_inverse=True)
    assert codes.tolist() == inverse.tolist() and count == 3 and codes.dtype == np.int64
    assert sorted_codes(np.array([], dtype=str))[1] == 0
    assert sorted_codes(np.array(["z"]))[0].tolist() == [0] and sorted_codes(np.array(["z"]))[1] == 1


def _refusal(call: object) -> str:
    with pytest.raises(UnitsError) as caught:
        call()  # type: ignore[operator]
    return str(caught.value)


def test_units_refuse_in_one_line_naming_what(tmp_path: Path) -> None:
    ids = np.array(["a", "b"])
    assert _refusal(lambda: Units("thing", "toy", ids, {}, {})) == (
        "unit kind 'thing': expected one of query, question, pair, seed")
    assert _refusal(lambda: Units("query", "toy", ids, {"unit": np.zeros(2)}, {})) == "column name 'unit' is reserved"
    assert _refusal(lambda: Units("query", "toy", ids, {"x": np.zeros(3)}, {})) == "column 'x' has 3 rows for 2 units"
    assert _refusal(lambda: Units("query", "toy", ids, {}, {}, np.array(["g"]))) == "1 cluster labels for 2 units"
    assert _refusal(lambda: Units("query", "toy", ids, {}, {"m": {"num": "x"}})) == (
        "metric 'm': its spec names no statistic")
    units = Units("query", "toy", ids, {"x": np.zeros(2), "y": np.ones(2)}, {})
    assert _refusal(lambda: units.values("z")) == "toy units have no column 'z' (columns: x, y)"
    assert _refusal(lambda: units.lists("x")) == "toy units: column 'x' is not a list column"
    missing = tmp_path / "gone.parquet"
    assert _refusal(lambda: read_units(missing)) == f"{missing}: cannot read the unit file (No such file or directory)"
    path = tmp_path / "u.parquet"
    units.write(path)
    assert read_units(path).ids.tolist() == ["a", "b"]
    wrong = "0" * 64
    assert _refusal(lambda: read_units(path, wrong)) == (
        f"{path}: its bytes are not those the evaluation wrote (sha256 {digest_of(path.read_bytes())[:12]}..., "
        "recorded 000000000000...); score the run again to write them anew")
    assert _refusal(lambda: units_from_bytes(b"not parquet")).startswith("unit file: not a Parquet file (")
    plain = pa.BufferOutputStream()
    pq.write_table(pa.table({"unit": ["a"]}), plain)
    assert _refusal(lambda: units_from_bytes(plain.getvalue().to_pybytes(), "run r / f")) == (
        "run r / f: no vsbench.units metadata; not a vsbench unit file")
    no_unit = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": [1.0]}).replace_schema_metadata({b"vsbench.units": json.dumps(units.metadata())}),
                   no_unit)
    assert _refusal(lambda: units_from_bytes(no_unit.getvalue().to_pybytes(), "f")) == (
        "f: no 'unit' column; not a vsbench unit file")
    short = pa.BufferOutputStream()
    pq.write_table(pa.table({"unit": ["a", "b"], "cluster": ["g", "g"]}).replace_schema_metadata(
        {b"vsbench.units": json.dumps({**units.metadata(), "kind": "query", "metrics": {"m": {"num": 1}}})}), short)
    assert _refusal(lambda: units_from_bytes(short.getvalue().to_pybytes(), "f")).startswith(
        "f: its vsbench.units metadata is broken: metrics.m.statistic: Field required")
    assert _refusal(lambda: parse_metadata(json.dumps({"version": 7}).encode(), "f")) == (
        "f: unit file version '7', this vsbench reads 1")
    assert _refusal(lambda: parse_metadata(json.dumps({"version": 1}).encode(), "f")).startswith(
        "f: its vsbench.units metadata is broken: kind: Field required")


def test_statistic_params_are_plain_json_two_lists_deep() -> None:
    base = {"kind": "query", "benchmark": "toy", "metrics": {}, "version": 1}
    for value in (1, 1.5, "a", True, None, [1, "a"], [[1, 2], [3]]):
        parse_metadata(json.dumps({**base, "metrics": {"m": {"statistic": "ratio", "p": value}}}).encode(), "f")
    for value in ([[[1]]], {"a": 1}, [{"a": 1}]):
        message = _refusal(lambda value=value: parse_metadata(
            json.dumps({**base, "metrics": {"m": {"statistic": "ratio", "p": value}}}).encode(), "f"))
        assert "param 'p' is not a number, text, boolean or list of them" in message


def test_the_file_holds_text_ids_text_clusters_int64_offsets_and_text_dictionaries(tmp_path: Path) -> None:
    units = Units("query", "toy", np.array([3, 1]), {
        "x": np.array([0.5, 1.0]), "s": ListColumn.from_lists([[0.1], [0.2, 0.3]]),
        "r": ListColumn.coded(np.array(["b", "a", "b"]), np.array([0, 1, 3]))}, {"m": {"statistic": "ratio", "num": "x"}},
        np.array([7, 7]), "Flat")
    path = tmp_path / "u.parquet"
    sha = units.write(path)
    assert sha == digest_of(path.read_bytes()) and units.to_parquet_bytes() == path.read_bytes()
    table = pq.read_table(path)
    assert table.schema.field("unit").type == pa.string() and table.column("unit").to_pylist() == ["3", "1"]
    assert table.schema.field("cluster").type == pa.string() and table.column("cluster").to_pylist() == ["7", "7"]
    assert table.schema.field("s").type == pa.large_list(pa.float64())
    assert pa.types.is_dictionary(table.schema.field("r").type.value_type)
    meta = pq.read_metadata(path)
    columns = {meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i) for i in range(meta.num_columns)}
    assert all(c.compression == "ZSTD" for c in columns.values())
    assert not columns["x"].is_stats_set
    back = read_units(path, sha)
    assert back.ids.tolist() == ["3", "1"] and back.variant == "Flat" and back.clusters.tolist() == ["7", "7"]
    assert [back.columns["s"][i].tolist() for i in range(2)] == [[0.1], [0.2, 0.3]]
    assert back.columns["s"].offsets.dtype == np.int64
    assert [back.columns["r"][i].tolist() for i in range(2)] == [["b"], ["a", "b"]]
    labelled = Units("query", "toy", np.array(["a", "b", "c"]), {}, {}, Labels.from_texts(np.array(["y", "x", "y"])))
    assert read_units(tmp_path / "l.parquet", labelled.write(tmp_path / "l.parquet")).clusters.tolist() == ["y", "x", "y"]


def test_pooling_a_coded_list_with_a_plain_text_one_and_numeric_with_text_clusters() -> None:
    offsets = np.array([0, 2, 3])
    coded = Units("query", "toy", np.array(["a", "b"]), {"r": ListColumn.coded(np.array(["y", "x", "y"]), offsets)},
                  METRICS, np.array([1, 2]))
    plain = Units("query", "toy", np.array(["c", "d"]), {"r": ListColumn(np.array(["z", "x", "w"]), offsets)},
                  METRICS, np.array(["g", "h"]))
    for first, second, texts, clusters in ((coded, plain, [["y", "x"], ["y"], ["z", "x"], ["w"]], ["1", "2", "g", "h"]),
                                           (plain, coded, [["z", "x"], ["w"], ["y", "x"], ["y"]], ["g", "h", "1", "2"])):
        pool = first.concat(second)
        assert _lists(pool.columns["r"]) == texts and pool.clusters.tolist() == clusters
    both_plain = plain.concat(plain).columns["r"]
    assert both_plain.categories is None and both_plain.values.tolist() == ["z", "x", "w", "z", "x", "w"]


def test_each_list_column_gets_the_owner_of_its_own_offsets() -> None:
    units = Units("query", "toy", np.array(["a", "b"]), {"s": ListColumn.from_lists([[1, 2, 3], [4]]),
                                                         "t": ListColumn.from_lists([[5], [6, 7, 8]]),
                                                         "u": ListColumn.from_lists([[9, 9, 9], [9]])}, METRICS)
    assert units.lists("s")[1].tolist() == [0, 0, 0, 1]
    assert units.lists("t")[1].tolist() == [0, 1, 1, 1]
    assert units.lists("t", np.int64)[0].dtype == np.int64 and units.lists("t")[0].dtype == np.float64
    assert units.take(np.array([1])).benchmark == "toy"


def test_groups_refuse_links_that_do_not_fit_in_one_line() -> None:
    from vsbench.stats.units import coded_groups, groups_of

    with pytest.raises(ValueError) as caught:
        groups_of(3, [0, 1], ["a"])
    assert str(caught.value) == "2 linked units for 1 sources"
    with pytest.raises(ValueError) as caught:
        coded_groups(3, [0, 1], np.array([0]), np.array(["a"]))
    assert str(caught.value) == "2 linked units for 1 sources"
    with pytest.raises(ValueError) as caught:
        coded_groups(3, [0, 3], np.array([0, 0]), np.array(["a"]))
    assert str(caught.value) == "a linked unit row is outside 0..2"
    assert groups_of(3, [0, 1], ["a", "b"]) is None  # every unit its own group
    grouped = groups_of(3, [0, 1], ["a", "a"], unit_ids=["x", "y", "z"], prefix="source:")
    assert grouped is not None and grouped.tolist() == ["source:a", "source:a", "unit:z"]
    assert groups_of(3, [0, 1], ["a", "a"]).tolist() == ["a", "a", "unit:2"]


def test_a_unit_file_without_units_reads_back(tmp_path: Path) -> None:
    empty = Units("query", "toy", np.array([], dtype=str), {"x": np.zeros(0)}, METRICS, np.array([], dtype=str))
    back = read_units(tmp_path / "e.parquet", empty.write(tmp_path / "e.parquet"))
    assert len(back) == 0 and back.clusters is not None and len(back.clusters) == 0


def _pages(data: bytes) -> dict[str, bool]:
    """Each Parquet leaf column of a file: whether it has a dictionary page."""
    import io

    meta = pq.read_metadata(io.BytesIO(data)).row_group(0)
    return {meta.column(i).path_in_schema: meta.column(i).has_dictionary_page for i in range(meta.num_columns)}


def test_text_columns_and_coded_lists_get_dictionary_pages_numbers_do_not() -> None:
    # The coded list's values were written without their dictionary until issue 56 (its leaf path
    # is "r.list.element", and the writer named it "r"): this test failed on that writer.
    units = Units("query", "toy", np.array(["a", "b", "c"]), {
        "x": np.array([0.5, 1.0, 2.0]), "s": ListColumn.from_lists([[1.0], [2.0], [3.0]]),
        "r": ListColumn.coded(np.array(["b", "a", "b"]), np.array([0, 1, 2, 3]))}, METRICS, np.array(["p", "q", "p"]))
    assert _pages(units.to_parquet_bytes()) == {"unit": True, "cluster": True, "x": False, "s.list.element": False,
                                                 "r.list.element": True}
    assert _pages(Units("query", "toy", np.array([1, 2]), {"x": np.zeros(2)}, METRICS).to_parquet_bytes()) == {
        "unit": True, "x": False}


def test_the_same_units_give_the_same_bytes_whatever_order_their_metrics_were_given() -> None:
    ids, x = np.array(["a", "b"]), {"x": np.array([0.5, 1.0])}
    one = Units("query", "toy", ids, x, {"m": {"statistic": "ratio", "num": "x"}, "n": {"num": "x", "statistic": "ratio"}})
    two = Units("query", "toy", ids, x, {"n": {"statistic": "ratio", "num": "x"}, "m": {"num": "x", "statistic": "ratio"}})
    assert one.to_parquet_bytes() == two.to_parquet_bytes()
    raw = pq.read_schema(pa.BufferReader(one.to_parquet_bytes())).metadata[b"vsbench.units"]
    assert raw == json.dumps(json.loads(raw), sort_keys=True).encode()


def _with_clusters(tmp_path: Path, clusters: pa.Array, name: str) -> Units:
    """A unit file written by hand with this ``cluster`` column, read back."""
    units = Units("query", "toy", np.array([str(i) for i in range(len(clusters))]), {"x": np.zeros(len(clusters))},
                  METRICS)
    table = pq.read_table(pa.BufferReader(units.to_parquet_bytes()))
    table = table.append_column("cluster", clusters)
    path = tmp_path / name
    pq.write_table(table, path)
    return read_units(path)


def test_cluster_labels_read_back_as_labels_when_arrow_text_else_as_numpy(tmp_path: Path) -> None:
    # Text (string or large_string): coded labels, numbered as sorted_codes numbers them.
    for kind in (pa.string(), pa.large_string()):
        back = _with_clusters(tmp_path, pa.array(["q", "p", "q", "r"], type=kind), f"{kind}.parquet")
        assert isinstance(back.clusters, Labels), kind
        assert back.clusters.codes.tolist() == [1, 0, 1, 2] and back.clusters.count == 3
        assert back.clusters.tolist() == ["q", "p", "q", "r"]
    one = _with_clusters(tmp_path, pa.array(["only"]), "one.parquet")
    assert isinstance(one.clusters, Labels) and one.cluster_index()[1] == 1 and one.clusters.tolist() == ["only"]
    # A null label keeps the numpy way (Arrow would rank the null as one more label).
    nulls = _with_clusters(tmp_path, pa.array(["p", None, "p"]), "nulls.parquet")
    assert not isinstance(nulls.clusters, Labels) and nulls.clusters.tolist() == ["p", None, "p"]
    # Numbers are not text: kept as they are.
    numbers = _with_clusters(tmp_path, pa.array([7, 3, 7]), "numbers.parquet")
    assert not isinstance(numbers.clusters, Labels) and numbers.clusters.tolist() == [7, 3, 7]
    assert numbers.cluster_index()[1] == 2


def test_labels_with_a_nul_are_clustered_as_the_units_written_were(tmp_path: Path) -> None:
    # numpy drops a trailing NUL: in memory "a" and "a\x00" are one cluster; read back they must be too.
    units = Units("query", "toy", np.array(["1", "2", "3"]), {"x": np.zeros(3)}, METRICS,
                  np.array(["a", "a\x00", "b"], dtype=object))
    assert units.cluster_index()[1] == 2
    back = read_units(tmp_path / "nul.parquet", units.write(tmp_path / "nul.parquet"))
    assert not isinstance(back.clusters, Labels) and back.clusters.tolist() == ["a", "a\x00", "b"]
    index, count = back.cluster_index()
    assert count == 2 and index.tolist() == [0, 0, 1]
    inside = _with_clusters(tmp_path, pa.array(["a\x00b", "a", "a\x00b"]), "inside.parquet")
    assert not isinstance(inside.clusters, Labels)


def test_labels_of_an_arrow_array_not_chunked() -> None:
    from vsbench.stats.units import _read_labels

    labels = _read_labels(pa.array(["y", "x", "y"]))
    assert isinstance(labels, Labels) and labels.codes.tolist() == [1, 0, 1] and labels.tolist() == ["y", "x", "y"]
    chunked = _read_labels(pa.chunked_array([["y"], ["x", "y"]]))
    assert isinstance(chunked, Labels) and chunked.codes.tolist() == [1, 0, 1] and chunked.tolist() == ["y", "x", "y"]


# --- the second run's survivors (issue 56): other inputs than numpy text, empty inputs, the caches ---


def test_ids_and_clusters_that_are_not_numpy_text_are_written_as_text(tmp_path: Path) -> None:
    for ids, clusters in ((np.array([], dtype=object), np.array([], dtype=object)),
                          (np.array([5, 300], dtype=np.uint16), np.array([7, 7], dtype=np.uint8)),
                          (["a", "b"], ["c", "d"])):
        units = Units("query", "toy", ids, {"x": np.zeros(len(ids))}, METRICS, clusters)
        table = pq.read_table(pa.BufferReader(units.to_parquet_bytes()))
        assert table.schema.field("unit").type == pa.string() and table.schema.field("cluster").type == pa.string()
        assert table.column("unit").to_pylist() == [str(i) for i in ids]
        assert table.column("cluster").to_pylist() == [str(c) for c in clusters]


def test_a_unit_file_that_cannot_be_read_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "u.parquet"
    path.write_bytes(b"PAR1 but not parquet")
    with pytest.raises(UnitsError) as caught:
        read_units(path)
    assert str(caught.value).startswith(f"{path}: not a Parquet file (ArrowInvalid: ")
    meta = {"kind": "query", "benchmark": "toy", "metrics": {}, "version": 2}
    with pytest.raises(UnitsError) as caught:
        parse_metadata(json.dumps({**meta, "version": "v" * 30}).encode(), "f")
    assert str(caught.value) == f"f: unit file version {'v' * 20!r}, this vsbench reads 1"


def test_a_list_column_written_with_32_bit_offsets_reads_back_with_64_bit_ones(tmp_path: Path) -> None:
    units = Units("query", "toy", np.array(["a", "b"]), {"x": np.zeros(2)}, METRICS)
    table = pq.read_table(pa.BufferReader(units.to_parquet_bytes()))
    table = table.append_column("s", pa.array([[1.0, 2.0], [3.0]], type=pa.list_(pa.float64())))
    pq.write_table(table, tmp_path / "u.parquet")
    back = read_units(tmp_path / "u.parquet")
    assert back.columns["s"].offsets.dtype == np.int64 and back.columns["s"].offsets.tolist() == [0, 2, 3]
    assert back.lists("s")[0].tolist() == [1.0, 2.0, 3.0]


def test_labels_of_numbers_are_numbered_as_their_texts_sort() -> None:
    labels = Labels.from_texts(np.array([9, 10, 9]))  # as text "10" sorts before "9"
    assert labels.codes.tolist() == [1, 0, 1] and labels.tolist() == ["9", "10", "9"]
    assert labels.codes.tolist() == sorted_codes(np.array(["9", "10", "9"]))[0].tolist()


def test_labels_from_chunked_arrow_pieces_and_no_pieces() -> None:
    labels = Labels(np.array([1, 0], dtype=np.int32), 2, (("", pa.chunked_array([["a"], ["b"]])),))
    assert labels.categories().type == pa.large_string() and labels.tolist() == ["b", "a"]
    nothing = Labels(np.zeros(0, dtype=np.int32), 0, ())
    assert nothing.categories().type == pa.large_string() and len(nothing.categories()) == 0
    as_array = np.asarray(nothing)
    assert as_array.dtype == np.dtype("U1") and as_array.shape == (0,)
    assert np.asarray(Labels.from_texts(np.array(["x", "y"])), dtype=object).dtype == object
    assert np.asarray(Labels.from_texts(np.array(["x", "y"])), dtype=object).tolist() == ["x", "y"]


def test_columns_as_statistics_read_them_have_the_dtype_asked_and_share_owners() -> None:
    offsets = np.array([0, 2, 3])
    units = Units("query", "toy", np.array(["a", "b"]), {
        "k": np.array([1, 2]), "s": ListColumn(np.array([0.5, 0.25, 1.0]), offsets),
        "t": ListColumn(np.array([1, 0, 1]), offsets)}, METRICS)
    assert units.values("k").dtype == np.float64 and units.values("k").tolist() == [1.0, 2.0]
    assert units.values("k", np.int64).dtype == np.int64  # its own cache entry, not the float one
    assert units.lists("s")[1] is units.lists("t", np.int64)[1]  # one owner array for one offsets array


def test_values_grouped_by_owner_keep_their_order_within_a_unit() -> None:
    rng = np.random.default_rng(0)
    owner = rng.integers(0, 3, 2000)
    values = np.arange(2000)
    column = ListColumn.from_owner(values, owner, 4)
    assert np.diff(column.offsets).tolist() == [*np.bincount(owner, minlength=3).tolist(), 0]
    for unit in range(3):
        assert column[unit].tolist() == np.flatnonzero(owner == unit).tolist()  # in the order given


def test_arrow_categories_give_numpy_text() -> None:
    column = ListColumn(np.array([1, 0, 1]), np.array([0, 2, 3]), pa.array(["p", "q"]))
    assert column[0].dtype.kind == "U" and column[0].tolist() == ["q", "p"]
    assert column.category_texts().dtype.kind == "U" and column.category_texts().tolist() == ["p", "q"]
    assert column.texts().tolist() == ["q", "p", "q"]


def test_groups_of_numeric_sources_and_of_arrow_names_spelled_under_a_prefix_unit_starts() -> None:
    from vsbench.stats.units import coded_groups, groups_of

    grouped = groups_of(4, [0, 1, 2], [10, 10, 9], prefix="source:")  # sources 10 and 9 as text: "10" < "9"
    assert grouped is not None and grouped.tolist() == ["source:10", "source:10", "source:9", "unit:3"]
    assert grouped.codes.tolist() == sorted_codes(np.asarray(grouped, dtype=str))[0].tolist()
    spelled = coded_groups(3, [0, 1], np.array([1, 1]), pa.array(["a", "b"]), prefix="u")
    assert spelled is not None and spelled.tolist() == ["ub", "ub", "unit:2"]
    plain = coded_groups(3, [0, 1], np.array([0, 0]), np.array(["s"]))
    assert plain is not None and plain.tolist() == ["s", "s", "unit:2"]


def test_codes_are_int32_below_2_to_the_31_labels_and_int64_from_there_kept_in_place_when_they_fit() -> None:
    from vsbench.stats.units import _narrow, code_type

    assert code_type(0) is np.int32 and code_type(2**31 - 1) is np.int32 and code_type(2**31) is np.int64
    wide = np.array([0, 5, 2], dtype=np.int64)
    assert _narrow(wide, 2**31 - 1).dtype == np.int32 and _narrow(wide, 2**31 - 1).tolist() == [0, 5, 2]
    assert _narrow(wide, 2**31).dtype == np.int64 and _narrow(wide, 2**31 + 1).dtype == np.int64
    assert _narrow(wide, 2**31) is wide  # no copy of a million codes that already fit
    narrow = wide.astype(np.int32)
    assert _narrow(narrow, 6) is narrow
