"""Group labels kept as numbers (issue 54): :class:`vsbench.stats.units.Labels`.

A million copy-detection queries' group labels were 56 MiB of numpy text held to the end of the
scoring, and ~220 MiB more while they were made. Now the groups are numbered from the reference
codes the readers give, and spelled only where the unit file is written. These tests hold the
numbers and the file to what the text labels gave: each unit's label (the group's smallest source
after the prefix, or ``unit:`` and the unit's id), the clusters' numbering (the labels' sorted
order: the bootstrap's draws follow it), the unit file's bytes, and the labels read back.
"""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.io.ids import Ids
from vsbench.stats.units import CLUSTER, Labels, ListColumn, Units, coded_groups, groups_of, units_from_bytes


def _spelled(n_units: int, rows: list[int], sources: list[str], ids: list[str], prefix: str) -> list[str]:
    """The labels as issue 55 defined them, by a plain union-find: prefix + the smallest source of a
    unit's component, or ``unit:`` + its id when it has no source."""
    parent = list(range(n_units + len(sources)))

    def find(node: int) -> int:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    node_of = {}
    for row, source in zip(rows, sources):
        node = node_of.setdefault(source, n_units + len(node_of))
        parent[find(row)] = find(node)
    smallest: dict[int, str] = {}
    for source, node in node_of.items():
        root = find(node)
        smallest[root] = min(smallest.get(root, source), source)
    return [prefix + smallest[find(u)] if find(u) in smallest else "unit:" + ids[u] for u in range(n_units)]


def _links(seed: int, n_units: int) -> tuple[list[int], list[str], list[str]]:
    """Random unit-source links (some units linked twice, some sources shared, some units alone) and
    unit ids of uneven lengths, non-ASCII among them."""
    rng = np.random.default_rng(seed)
    names = [f"r{int(k)}" + "é" * int(k % 3) for k in rng.integers(0, 10 ** rng.integers(1, 4), n_units)]
    linked = rng.random(n_units) < 0.7
    rows = [u for u in range(n_units) if linked[u]]
    sources = [names[u] for u in rows]
    extra = rng.integers(0, n_units, n_units // 5).tolist()
    rows += extra
    sources += [names[int(k)] for k in rng.integers(0, n_units, len(extra))]
    ids = [f"q{int(i)}" + ("ß" if i % 7 == 0 else "") for i in rng.permutation(n_units * 3)[:n_units]]
    return rows, sources, ids


@pytest.mark.parametrize("prefix", ["source:", "original:", "zz:", "", "un"])
@pytest.mark.parametrize("seed", range(4))
def test_groups_are_numbered_and_spelled_as_their_texts(seed: int, prefix: str) -> None:
    n_units = 60
    rows, sources, ids = _links(seed, n_units)
    labels = groups_of(n_units, rows, sources, unit_ids=ids, prefix=prefix)
    expected = _spelled(n_units, rows, sources, ids, prefix)
    assert labels is not None
    assert labels.tolist() == expected
    distinct, numbers = np.unique(np.asarray(expected), return_inverse=True)
    assert labels.codes.tolist() == numbers.tolist() and labels.count == distinct.size
    assert np.asarray(labels, dtype=str).tolist() == expected
    assert labels[3] == expected[3]
    # the unit file holds the same text column, byte for byte, as one written from the texts
    columns = {"value": np.arange(n_units, dtype=np.float64)}
    coded = Units("query", "x", np.asarray(ids), columns, {"mean": {"statistic": "ratio", "num": "value"}}, labels)
    spelled = Units("query", "x", np.asarray(ids), columns, coded.metrics, np.asarray(expected))
    assert coded.to_parquet_bytes() == spelled.to_parquet_bytes()
    assert [a.tolist() for a in coded.cluster_index()[:1]] == [spelled.cluster_index()[0].tolist()]
    assert coded.cluster_index()[1] == spelled.cluster_index()[1]


def test_codes_of_arrow_names_give_the_labels_of_their_texts() -> None:
    """A reader's sorted distinct ids (Arrow), some linked to no unit, stand for their texts."""
    n_units = 40
    rows, sources, ids = _links(11, n_units)
    names = Ids.from_strings(sources + ["zzz-unused", "a-unused"])
    codes = names.codes[: len(sources)]
    labels = coded_groups(n_units, np.asarray(rows, dtype=np.int32), codes, names.values, unit_ids=np.asarray(ids),
                          prefix="source:")
    assert labels is not None
    assert labels.tolist() == _spelled(n_units, rows, sources, ids, "source:")
    assert labels.codes.tolist() == np.unique(np.asarray(labels.tolist()), return_inverse=True)[1].tolist()


def test_taken_labels_are_renumbered_among_those_left() -> None:
    rows, sources, ids = _links(3, 50)
    labels = groups_of(50, rows, sources, unit_ids=ids, prefix="source:")
    assert labels is not None
    picked = np.array([7, 3, 3, 41, 0, 19])
    taken = labels.take(picked)
    texts = [labels.tolist()[p] for p in picked]
    assert taken.tolist() == texts
    assert taken.codes.tolist() == np.unique(np.asarray(texts), return_inverse=True)[1].tolist()
    assert taken.count == len(set(texts))


def _file(clusters: list[str]) -> bytes:
    n = len(clusters)
    units = Units("query", "x", np.asarray([f"u{i}" for i in range(n)]), {"value": np.ones(n)},
                  {"mean": {"statistic": "ratio", "num": "value"}}, np.asarray(clusters, dtype=object))
    return units.to_parquet_bytes()


def test_labels_read_back_keep_the_numbering_and_the_bytes() -> None:
    clusters = ["photo10", "photo9", "é", "photo10", "ab", "a", "photo9", "b"]
    data = _file(clusters)
    back = units_from_bytes(data)
    assert isinstance(back.clusters, Labels)
    assert back.clusters.tolist() == clusters
    index, count = back.cluster_index()
    distinct, numbers = np.unique(np.asarray(clusters), return_inverse=True)
    assert index.tolist() == numbers.tolist() and count == distinct.size
    assert back.to_parquet_bytes() == data
    assert pq.read_table(io.BytesIO(data)).column(CLUSTER).to_pylist() == clusters


def test_labels_with_a_nul_read_back_as_numpy_numbers_them() -> None:
    """numpy drops a trailing NUL (``"a\\x00"`` is ``"a"`` to it): such labels keep numpy's numbering."""
    clusters = ["a\x00", "a", "b"]
    back = units_from_bytes(_file(clusters))
    assert not isinstance(back.clusters, Labels)
    assert back.cluster_index()[1] == 2


def test_copy_detection_groups_from_reader_ids_match_the_texts() -> None:
    """The same DISC predictions as Python lists (text labels) and as reader id columns (codes):
    the same groups, numbering and unit file."""
    rng = np.random.default_rng(2)
    queries = [f"Q{i:0{1 + i % 3}d}" for i in range(30)]
    references = [f"R{i}" for i in range(12)]
    truth = {q: ("" if k % 4 == 0 else references[int(rng.integers(0, 12))]) for k, q in enumerate(queries)}
    pq_, pr, ps = [], [], []
    for q in queries:
        for r in rng.choice(references, 3, replace=False).tolist() + ([truth[q]] if truth[q] else []):
            if (q, r) not in zip(pq_, pr):
                pq_.append(q)
                pr.append(r)
                ps.append(float(rng.random()))
    gt_q, gt_r = list(truth), list(truth.values())
    plain = copy_detection_units(pq_, pr, ps, gt_q, gt_r, queries=gt_q)
    coded = copy_detection_units(Ids.from_strings(pq_), Ids.from_strings(pr), np.asarray(ps),
                                 Ids.from_strings(gt_q), Ids.from_strings(gt_r), queries=Ids.from_strings(gt_q))
    assert isinstance(coded.clusters, Labels)
    assert coded.ids.tolist() == plain.ids.tolist()
    assert coded.clusters.tolist() == np.asarray(plain.clusters).tolist()
    assert coded.cluster_index()[0].tolist() == plain.cluster_index()[0].tolist()
    assert coded.to_parquet_bytes() == plain.to_parquet_bytes()


def test_a_list_column_of_labels_units_still_pools() -> None:
    """Two runs' units pooled (the permutation test) spell their labels: the pool's groups are theirs."""
    rows, sources, ids = _links(5, 20)
    labels = groups_of(20, rows, sources, unit_ids=ids, prefix="source:")
    units = Units("query", "x", np.asarray(ids), {"s": ListColumn.from_lists([[1.0]] * 20)},
                  {"m": {"statistic": "ratio", "num": "s"}}, labels)
    pooled = units.concat(units)
    assert np.asarray(pooled.clusters).tolist() == labels.tolist() * 2
    assert pa.array(np.asarray(pooled.clusters)).to_pylist() == labels.tolist() * 2
