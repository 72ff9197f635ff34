"""What issue 54's memory work on ``score copy-detection`` must leave alone: the bits and the bytes.

* micro AP is evaluated one replicate at a time (half the (positives x replicates) arrays of a
  block of two), and each replicate's precisions are summed as numpy summed them when the whole
  block was one array: one after another in a block of two or more replicates (numpy adds a
  ``(P, B > 1)`` array's rows in turn), pairwise in a block of one (a contiguous column). The
  expected sums here are the plain loop and ``np.sum`` of the same terms, so either way of
  summing the other way round is caught (the two differ in the last bits for a few hundred terms).
* the unit file is streamed to disk: its bytes and its SHA-256 are those of the file made in
  memory, and a writer that fails leaves no file.
* reference ids kept as Arrow categories write and read back the same file.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.io.ids import Ids
from vsbench.io.storage import atomic_writer
from vsbench.stats.ranking import micro_ap
from vsbench.stats.units import ListColumn, units_from_bytes


def _one_positive_each(n: int = 400) -> tuple[list, list, list, list, list]:
    """``n`` queries, each with one true copy and two negatives, scores all distinct (no ties), so
    that under 0/1 weights each drawn positive's precision is ``t / (t + negatives above it)``."""
    rng = np.random.default_rng(4)
    scores = rng.permutation(3 * n) / (3 * n) + 0.01
    pq, pr, ps, gq, gr = [], [], [], [], []
    for q in range(n):
        for k in range(3):
            pq.append(f"q{q}")
            pr.append(f"r{q}-{k}")
            ps.append(float(scores[3 * q + k]))
        gq.append(f"q{q}")
        gr.append(f"r{q}-0")
    return pq, pr, ps, gq, gr


def _terms(case: tuple, ids: list[str], drawn: np.ndarray) -> list[float]:
    """The precision of each positive in rank order (the plain definition), 0 for one not drawn."""
    pq, pr, ps, gq, gr = case
    truth = set(zip(gq, gr))
    weight = dict(zip(ids, drawn.tolist()))
    ranked = sorted(((s, (q, r) in truth, weight[q]) for q, r, s in zip(pq, pr, ps)), key=lambda x: -x[0])
    terms, found, negatives = [], 0, 0
    for _, positive, taken in ranked:
        if positive:
            found += taken
            terms.append(found / (found + negatives) if taken else 0.0)
        else:
            negatives += taken
    return terms


@pytest.mark.parametrize("one_at_a_time", [False, True])
def test_each_replicate_of_a_block_sums_as_the_block_did(one_at_a_time: bool, monkeypatch) -> None:
    """Both paths: a block evaluated whole (small units: many rows a block) and one replicate at a
    time (what 1M units get: fewer than ``FEW_ROWS`` rows a block), forced here on 400 units."""
    if one_at_a_time:
        monkeypatch.setattr("vsbench.stats.ranking.FEW_ROWS", 1 << 40)
    case = _one_positive_each()
    units = copy_detection_units(*case)
    ids = units.ids.tolist()
    rng = np.random.default_rng(2)
    block = rng.integers(0, 2, (2, len(units)))
    found = micro_ap(units, block)
    for row in range(2):
        terms = _terms(case, ids, block[row])
        in_turn = 0.0
        for term in terms:
            in_turn += term
        assert in_turn != float(np.sum(np.asarray(terms)))  # these draws tell the two ways of summing apart
        n_gt = int(block[row].sum())
        assert found[row] == in_turn / n_gt  # exactly: the bits of the (P, 2) array's sum
    single = micro_ap(units, block[:1])
    terms = _terms(case, ids, block[0])
    assert single[0] == float(np.sum(np.asarray(terms))) / int(block[0].sum())  # a block of one: pairwise
    assert math.isclose(single[0], found[0], rel_tol=1e-12)


def test_the_streamed_unit_file_is_the_file_made_in_memory(tmp_path: Path) -> None:
    case = _one_positive_each(50)
    units = copy_detection_units(*(Ids.from_strings(c) if k != 2 else np.asarray(c) for k, c in enumerate(case)))
    path = tmp_path / "m.units.parquet"
    sha256 = units.write(path)
    data = units.to_parquet_bytes()
    assert path.read_bytes() == data
    assert sha256 == hashlib.sha256(data).hexdigest()
    references = units.columns["references"]
    assert not isinstance(references.categories, np.ndarray)  # the reader's Arrow ids, kept as they are
    as_numpy = ListColumn(references.values, references.offsets, references.category_texts())
    assert replace(units, columns={**units.columns, "references": as_numpy}).to_parquet_bytes() == data
    back = units_from_bytes(data)
    assert back.to_parquet_bytes() == data  # the Arrow categories read back write the same file
    assert back.columns["references"][0].tolist() == units.columns["references"][0].tolist() == ["r0-0", "r0-1", "r0-2"]


def test_a_failing_writer_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    with pytest.raises(RuntimeError), atomic_writer(path) as out:
        out.write(b"half")
        raise RuntimeError("the writer failed")
    assert list(tmp_path.iterdir()) == []
    with atomic_writer(path) as out:
        out.write(b"ab")
        out.write(memoryview(b"cd"))
    assert path.read_bytes() == b"abcd" and out.hexdigest() == hashlib.sha256(b"abcd").hexdigest()
    assert out.tell() == 4
