"""The runner's side of per-unit outcomes (vsbench.stats.records): intervals into records, unit files
beside them, a plugin's own statistic (registered through its ``vsbench.statistics`` entry point),
and a benchmark that declares none."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vsbench.stats.records import add_intervals, interval_lines, unit_file_name
from vsbench.stats.resample import Resampling
from vsbench.stats.units import Units, read_units


def median_rank(units: Units, weights: np.ndarray) -> np.ndarray:
    """A plugin's own statistic: the weighted median of ``rank`` (the lower one on an even count)."""
    rank = units.values("rank")
    order = np.argsort(rank, kind="stable")
    cumulative = np.cumsum(weights[:, order], axis=1)
    half = (cumulative[:, -1] + 1) // 2
    return rank[order][np.argmax(cumulative >= half[:, None], axis=1)]


def _units() -> Units:
    ranks = np.array([1, 1, 2, 5, 1, 3, 1, 8, 1, 2], dtype=np.float64)
    return Units("query", "colour_match", np.array([f"q{i}" for i in range(10)]),
                 {"hit": (ranks == 1).astype(np.int8), "rank": ranks},
                 {"top1_accuracy": {"statistic": "ratio", "num": "hit"},
                  "median_rank": {"statistic": "colour_match.median_rank"}})


@pytest.fixture
def plugin_statistic(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """``colour_match.median_rank`` registered as an installed plugin registers it: a distribution on
    sys.path whose ``vsbench.statistics`` entry point names :func:`median_rank`."""
    site = tmp_path_factory.mktemp("site")
    info = site / "colour_match_stats-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: colour-match-stats\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[vsbench.statistics]\ncolour_match.median_rank = {__name__}:median_rank\n")
    monkeypatch.syspath_prepend(str(site))


@pytest.mark.usefixtures("plugin_statistic")
def test_intervals_go_into_the_records_and_the_units_beside_them(tmp_path: Path) -> None:
    record = {"distance": "l2", "top1_accuracy": 0.5, "median_rank": 1.0, "n": 10}
    entries = add_intervals("colour_match", [record], [_units()], tmp_path, Resampling(200, 3))
    assert record["top1_accuracy"] == 0.5 and record["median_rank"] == 1.0  # the values are never touched
    assert record["top1_accuracy_ci95_low"] < 0.5 < record["top1_accuracy_ci95_high"]
    assert record["median_rank_ci95_low"] <= 1.0 <= record["median_rank_ci95_high"]
    assert "n_ci95_low" not in record  # only the metrics the units recompute
    entry = entries[0]
    assert entry is not None and entry["kind"] == "query" and entry["units"] == 10
    assert entry["ci"] == {"ci_method": "expanded percentile bootstrap", "ci_resamples": "200", "ci_seed": "3", "ci_level": "0.95",
                           "ci_proportions": "Clopper-Pearson"}
    assert entry["exact"] == ["top1_accuracy"]  # a mean of 0/1 hits: Clopper-Pearson's interval
    assert record["top1_accuracy_ci95_low"] == pytest.approx(0.1871, abs=5e-5)  # scipy binomtest(5, 10), exact
    back = read_units(tmp_path / entry["file"], entry["sha256"])  # verified by its digest
    assert back.metrics == _units().metrics and list(back.ids) == list(_units().ids)
    lines = interval_lines([record], entries)
    assert lines[0] == "95% intervals: expanded percentile bootstrap over 10 queries, 200 resamples, seed 3"
    assert any("top1_accuracy" in line and "0.5000 [" in line for line in lines)


def test_the_heading_says_how_many_groups_were_drawn_whole(tmp_path: Path) -> None:
    units = _units()
    grouped = Units(units.kind, units.benchmark, units.ids, units.columns, {"top1_accuracy": units.metrics["top1_accuracy"]},
                    clusters=np.array([f"photo{i // 2}" for i in range(10)]))
    record = {"distance": "l2", "top1_accuracy": 0.5}
    entries = add_intervals("colour_match", [record], [grouped], tmp_path, Resampling(200, 3))
    assert entries[0] is not None and entries[0]["groups"] == 5
    assert interval_lines([record], entries)[0] == (
        "95% intervals: expanded percentile bootstrap over 10 queries in 5 groups, each drawn whole, 200 resamples, seed 3")


def test_a_benchmark_without_units_gets_plain_numbers_and_one_line(tmp_path: Path) -> None:
    record = {"distance": "l2", "top1_accuracy": 0.5}
    entries = add_intervals("colour_match", [record], [], tmp_path, Resampling(200, 0))
    assert entries == [None] and record == {"distance": "l2", "top1_accuracy": 0.5}
    assert interval_lines([record], entries) == [
        "no intervals: this benchmark declares no per-unit outcomes (docs/intervals.md)"]
    assert not (tmp_path / "units").exists()


def test_intervals_off_still_keeps_the_units(tmp_path: Path) -> None:
    record = {"top1_accuracy": 0.5}
    entries = add_intervals("colour_match", [record], [_units()], tmp_path, Resampling(0, 0))
    assert record == {"top1_accuracy": 0.5} and entries[0] is not None
    assert (tmp_path / entries[0]["file"]).is_file()
    assert interval_lines([record], entries)[0].startswith("intervals off")


def test_a_changed_unit_file_is_refused_naming_it(tmp_path: Path) -> None:
    from vsbench.stats.units import UnitsError

    entries = add_intervals("colour_match", [{"top1_accuracy": 0.5}], [_units()], tmp_path, Resampling(0, 0))
    path = tmp_path / entries[0]["file"]
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(UnitsError, match=str(path)):
        read_units(path, entries[0]["sha256"])


def test_unit_file_names_are_safe_and_distinct() -> None:
    a = unit_file_name("disc", {"codec": "PCAW512,L2norm,Flat", "score_norm": "1.00[0,2]"}, 0)
    b = unit_file_name("disc", {"codec": "PCAW512,L2norm,Flat", "score_norm": "1.00_0_2_"}, 1)
    assert a != b and all(c.isalnum() or c in "._-" for c in a) and a.endswith(".parquet")
    assert json.dumps(a)  # plain text


def test_a_list_column_of_many_strings_is_written_and_read_back(tmp_path: Path) -> None:
    """pyarrow turns a numpy string array past ~64 MB into a ChunkedArray, which a list array does not
    take: `vsbench score copy-detection` on 3M predictions stopped with a TypeError (issue 48)."""
    from vsbench.stats.units import ListColumn

    n = 300_000
    references = np.array([f"R{i:06d}" + "x" * 93 for i in range(n)])  # 120 MB as numpy: chunked by pyarrow
    units = Units("query", "copy_detection", np.array([f"Q{i}" for i in range(n // 3)]),
                  {"references": ListColumn(references, np.arange(0, n + 1, 3, dtype=np.int64))}, {})
    path = tmp_path / "u.parquet"
    sha = units.write(path)
    back = read_units(path, sha)
    assert back.columns["references"].values.tolist() == references.tolist()


def test_weak_intervals_say_so_in_the_table_and_on_the_evaluation_run(tmp_path: Path) -> None:
    """Issue 55: 200 DISC queries of which 2 have a copy leave about 13% of the resamples without a
    positive (uAP undefined there): the entry, the printed table and the evaluation run's tag
    ``interval_note.uap`` all say how many were left out; 3 queries say they are under 20."""
    from vsbench.benchmarks.disc.units import copy_detection_units
    from vsbench.tracking.evaluations import Embedder, evaluations_of

    n = 200
    queries = np.array([f"q{i}" for i in range(n)])
    rng = np.random.default_rng(5)
    scores = rng.random(n)
    rare = copy_detection_units(queries, np.array([f"r{i}" for i in range(n)]), scores, queries[:2],
                                np.array(["r0", "r1"]), queries=queries)
    few = copy_detection_units(queries[:3], np.array(["r0", "r1", "r2"]), scores[:3], queries[:3],
                               np.array(["r0", "x", "r2"]), queries=queries[:3])
    records = [{"codec": "Flat", "uap": 1.0, "accuracy_at_1": 1.0, "recall_at_p90": 1.0},
               {"codec": "PCA", "uap": 0.6667, "accuracy_at_1": 0.6667, "recall_at_p90": 0.6667}]
    entries = add_intervals("disc", records, [rare, few], tmp_path, Resampling(1000, 0))
    dropped = entries[0]["notes"]["uap"]
    left_out = int(dropped.split(" of 1000 resamples left out")[0].rsplit(" ", 1)[-1])
    assert 100 < left_out < 170, dropped  # (198/200)^200 = 13.4% of 1000
    assert "no positive drawn" in dropped and f"{left_out} of 1000 resamples left out" in entries[0]["notes"]["recall_at_p90"]
    assert entries[1]["notes"]["uap"].startswith("only 3 queries (under 20): a rough interval")
    lines = interval_lines(records, entries)
    assert any(line.startswith("  Flat") and " uap " in line and line.endswith(f"({dropped})") for line in lines), lines
    assert sum("only 3 queries (under 20)" in line for line in lines) == 3  # each PCA metric's line
    units = [{**entry, "path": str(tmp_path / entry["file"])} for entry in entries]
    first, second = evaluations_of("disc", records, Embedder(model="m"), run_params={}, units=units)
    assert first.tags()["interval_note.uap"] == dropped
    assert second.tags()["interval_note.accuracy_at_1"] == entries[1]["notes"]["accuracy_at_1"]


def test_the_printed_interval_block_fits_100_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 57: the heading (groups drawn whole, the exact interval's words) and a row's edge note
    wrap within 100 columns when `similarity run` prints them, every word whole."""
    from vsbench.benchmarks.disc.units import copy_detection_units
    from vsbench.cli.similarity import _print_similarity_table
    from vsbench.io.terminal import too_wide

    n = 200
    queries = np.array([f"q{i}" for i in range(n)])
    refs = np.array([f"r{i // 5}" for i in range(n)])
    rare = copy_detection_units(queries, refs, np.random.default_rng(5).random(n), queries[:2],
                                np.array(["r0", "r0"]), queries=queries)
    record = {"codec": "PCAW64,L2norm,IVF1024,PQ32x8,RFlat", "uap": 1.0, "accuracy_at_1": 1.0,
              "recall_at_p90": 1.0}
    entries = add_intervals("disc", [record], [rare], tmp_path, Resampling(200, 0))
    _print_similarity_table(tmp_path, {"records": [record], "units": entries})
    printed = capsys.readouterr().out
    block = printed[printed.index("95% intervals"):]
    assert too_wide(block) == [], block
    assert "resamples left out" in " ".join(block.split())
