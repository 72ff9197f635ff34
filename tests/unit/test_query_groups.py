"""``query_groups.csv`` (issue 55): queries without a copy drawn from one photo are one group.

skimage-copydetect's 18 no-copy queries are 6 edited crops of each of 3 photos; the ground truth
cannot say so (an empty reference), so the generator writes the groups and the ``disc`` adapter draws
the queries of a group together, beside the groups the copies make. A bad file is one line naming it.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from tests.unit.test_bench_copy_detection import _hand_features, disc_root  # noqa: F401
from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.disc.adapter import QUERY_GROUPS_CSV, load_disc
from vsbench.io.inputs import InputError


def test_no_file_no_change(disc_root: Path) -> None:  # noqa: F811
    bench = load_disc(disc_root)
    assert bench.query_groups == ()
    units = bench.evaluate(_hand_features(), EvalSettings(codecs="Flat", k=2)).units[0]
    assert units is not None and units.clusters is None  # every query copies its own reference or none


def test_named_queries_are_drawn_together(disc_root: Path) -> None:  # noqa: F811
    """Q00002 (no copy) named with Q00001 (a copy of R000001): one group; Q00000 stays alone."""
    (disc_root / QUERY_GROUPS_CSV).write_text("query_id,group\nQ00002,photo:brick\nQ00001,photo:brick\n")
    bench = load_disc(disc_root)
    assert bench.query_groups == (("Q00002", "photo:brick"), ("Q00001", "photo:brick"))
    for units in bench.evaluate(_hand_features(), EvalSettings(codecs="Flat", k=2)).units:
        assert units is not None
        label = dict(zip(units.ids.tolist(), units.clusters.tolist()))
        assert label["Q00001"] == label["Q00002"] != label["Q00000"]
        assert units.cluster_index()[1] == 2


@pytest.mark.parametrize(("text", "says"), [
    ("query,group\nQ00002,a\n", ":1: the header must be query_id,group"),
    ("query_id,group\nQ00009,a\n", ":2: 'Q00009' is not a query image of this set"),
    ("query_id,group\nQ00002,a\nQ00002,b\n", ":3: query 'Q00002' is listed twice"),
    ("query_id,group\nQ00002,\n", ":2: the group of 'Q00002' must be 1 to 200 characters"),
    ("query_id,group\nQ00002,a,b\n", ":2: expected two fields"),
])
def test_a_bad_file_is_one_line_naming_it(disc_root: Path, text: str, says: str) -> None:  # noqa: F811
    (disc_root / QUERY_GROUPS_CSV).write_text(text)
    with pytest.raises(InputError) as raised:
        load_disc(disc_root)
    message = str(raised.value)
    assert QUERY_GROUPS_CSV in message and says in message and "\n" not in message, message


def test_skimage_copydetect_groups_its_crops_by_photo(tmp_path: Path) -> None:
    pytest.importorskip("skimage")
    from vsbench.benchmarks.disc.synth import NEGATIVES_PER_PHOTO, SKIMAGE_NEGATIVES, generate_skimage_copydetect

    generate_skimage_copydetect(tmp_path, seed=0)
    with (tmp_path / "val_groundtruth_matches.csv").open() as handle:
        no_copy = {row["query_id"] for row in csv.DictReader(handle) if not row["reference_id"]}
    groups = dict(load_disc(tmp_path).query_groups)
    assert set(groups) == no_copy and len(no_copy) == 18
    sizes = np.unique(list(groups.values()), return_counts=True)
    assert sizes[0].tolist() == sorted(f"photo:{name}" for name in SKIMAGE_NEGATIVES)
    assert set(sizes[1].tolist()) == {NEGATIVES_PER_PHOTO}
