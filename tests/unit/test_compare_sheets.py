"""The compare sheet (issue 47, "what changed between two runs"): per family, two hand-made runs whose
differing units are known; the sheet lists exactly those, both ways, nothing else; ids are escaped;
images come only from under the root; ``vsbench compare --runs`` writes it and the report links it;
a night compared with its baseline logs it under ``failures/``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from vsbench.abid.units import answer_units, counting_units
from vsbench.benchmarks.copydays.units import copydays_units
from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.benchmarks.patch_pairs.units import patch_pair_units
from vsbench.benchmarks.product_search.units import product_search_units
from vsbench.benchmarks.vsd.units import vsd_units
from vsbench.io.features import ImageSet
from vsbench.reporting.changes import Comparison, NoImages, _share, change_sheet
from vsbench.reporting.sheets import render_html
from vsbench.stats.units import Units
from vsbench.steps.compare import AbidImages, BenchmarkImages, images_for, outcomes_of

GT_QUERY, GT_REF = ["Q0", "Q1", "Q2", "Q3"], ["R0", "R1", "R2", ""]  # Q3 has no copy


def _disc() -> tuple[Units, Units, set[str], set[str]]:
    # first: Q0, Q1 right (top is the copy), Q2 wrong; second: Q0, Q2 right, Q1 wrong. Q3 (no copy)
    # changes its top prediction but is not judged.
    first = copy_detection_units(["Q0", "Q0", "Q1", "Q2", "Q3"], ["R0", "R1", "R1", "R0", "R2"], [.9, .5, .8, .7, .6],
                                 GT_QUERY, GT_REF, queries=GT_QUERY)
    second = copy_detection_units(["Q0", "Q1", "Q1", "Q2", "Q3"], ["R0", "R0", "R1", "R2", "R1"], [.9, .8, .4, .7, .3],
                                  GT_QUERY, GT_REF, queries=GT_QUERY)
    return first, second, {"Q1"}, {"Q2"}


def _copydays() -> tuple[Units, Units, set[str], set[str]]:
    ids, blocks = ["c0", "c1", "c2", "c3"], ["strong"] * 4
    distances = [[0.1, 0.2]] * 4
    refs = [["o0", "o9"], ["o1", "o9"], ["o2", "o9"], ["o3", "o9"]]
    first = copydays_units(ids, [[1, 0], [1, 0], [0, 1], [0, 0]], distances, [1, 1, 1, 1], blocks, result_ids=refs)
    second = copydays_units(ids, [[1, 0], [0, 1], [1, 0], [0, 0]], distances, [1, 1, 1, 1], blocks, result_ids=refs)
    return first, second, {"c1"}, {"c2"}


def _vsd() -> tuple[Units, Units, set[str], set[str]]:
    seeds = ["s0", "s0", "s1", "s1", "s2", "s2", "s3", "s3"]
    labels = [1, 0, 1, 0, 1, 0, 0, 0]  # s3 has no positive: not judged
    first = vsd_units(seeds, labels, [1, 2, 1, 2, 2, 1, 1, 2], np.linspace(0.9, 0.2, 8))
    second = vsd_units(seeds, labels, [1, 2, 3, 1, 1, 2, 2, 1], np.linspace(0.9, 0.2, 8))
    return first, second, {"s1"}, {"s2"}


def _product_search() -> tuple[Units, Units, set[str], set[str]]:
    gallery = np.array([[1.0, 0.0], [0.0, 1.0]])
    rows, labels = [[0, 1]] * 4, [[1, 0], [1, 0], [1, 0], [0, 0]]  # candidate g0 fulfils; query 3: none does
    first = product_search_units([[1, 0], [1, 0], [0, 1], [0, 1]], gallery, rows, labels, ids=["0", "1", "2", "3"])
    second = product_search_units([[1, 0], [0, 1], [1, 0], [1, 0]], gallery, rows, labels, ids=["0", "1", "2", "3"])
    return first, second, {"1"}, {"2"}


def _patch_pairs() -> tuple[Units, Units, set[str], set[str]]:
    # Three positives, so the break-even threshold is the 3rd smallest distance: 0.5 in both runs.
    first = patch_pair_units({"easy": [0.1, 0.2, 0.9]}, {"diffseq": [0.5, 1.0, 1.1]})["mean"]
    second = patch_pair_units({"easy": [0.1, 0.9, 0.2]}, {"diffseq": [1.0, 0.5, 1.1]})["mean"]
    return first, second, {"easy:2", "diffseq:2"}, {"easy:3", "diffseq:1"}


def _abid_counting() -> tuple[Units, Units, set[str], set[str]]:
    ids = ["0", "1", "2", "3"]
    return (counting_units([1, 2, 3, 0], [1, 2, 4, 5], ids), counting_units([1, 5, 4, 1], [1, 2, 4, 5], ids),
            {"1"}, {"2"})


def _abid_verification() -> tuple[Units, Units, set[str], set[str]]:
    ids = ["0:A", "1:B", "2:C"]
    return (answer_units([1, 0, 0], [1, 0, 1], ids, task="verification"),
            answer_units([0, 0, 1], [1, 0, 1], ids, task="verification"), {"0:A"}, {"2:C"})


def _correct_column() -> tuple[Units, Units, set[str], set[str]]:
    def units(correct: list[float]) -> Units:
        return Units("query", "plugin", np.array(["a", "b", "c", "d"]), {"correct": np.array(correct)},
                     {"accuracy": {"statistic": "ratio", "num": "correct"}})

    return units([1, 1, 0, 0]), units([1, 0, 1, 0]), {"b"}, {"c"}


CASES = {"disc": _disc, "copydays": _copydays, "vsd": _vsd, "product_search": _product_search,
         "patch_pairs": _patch_pairs, "abid_counting": _abid_counting, "abid_verification": _abid_verification,
         "correct_column": _correct_column}


def _listed(first: Units, second: Units, rows: int = 200):
    a, b = outcomes_of(first), outcomes_of(second)
    assert a is not None and b is not None
    sheet, counts = change_sheet([Comparison("t", a, b, NoImages(), NoImages())], rows)
    units = [row.tiles[0].caption[0] for row in sheet.rows]  # the unit's own tile names it
    return sheet, counts, units


def _ranks_move() -> tuple[Units, Units]:
    """Two DISC runs on one query set where no query turns right or wrong at rank 1 but copies move:
    Q0's copy R0 climbs from rank 3 to 2, Q1's from rank 4 to 2 (both wrong at rank 1 in both runs);
    Q2 right in both; Q3 has no copy. uAP moves (one global ranking), accuracy at 1 does not."""
    queries = ["Q0"] * 3 + ["Q1"] * 4 + ["Q2", "Q3"]
    refs = ["R9", "R8", "R0", "R9", "R8", "R7", "R1", "R2", "R5"]
    first = copy_detection_units(queries, refs, [.9, .8, .7, .9, .85, .8, .75, .95, .4], GT_QUERY, GT_REF,
                                 queries=GT_QUERY)
    second = copy_detection_units(queries, refs, [.9, .6, .8, .9, .5, .4, .85, .95, .4], GT_QUERY, GT_REF,
                                  queries=GT_QUERY)
    return first, second


def test_a_ranking_metric_lists_the_queries_whose_copy_moved_both_ways():
    """Issue 55 item 8: for uap / recall_at_p90 the sheet was empty ("0 ... 0") when copies moved up the
    ranking without any query turning right at rank 1; compared by rank it lists each query under the run
    that ranked its copy higher, the largest move of 1/rank first; accuracy at 1 keeps right/wrong."""
    from vsbench.stats.ranking import micro_ap
    from vsbench.steps.compare import by_rank

    first, second = _ranks_move()
    uap = [float(micro_ap(units, np.ones((1, len(units))))[0]) for units in (first, second)]
    assert uap[1] > uap[0]  # the metric did move: the copies climbed
    a, b = outcomes_of(first), outcomes_of(second)
    plain, counts = change_sheet([Comparison("disc", a, b, NoImages(), NoImages(), by_rank(first, ["accuracy_at_1"]))],
                                 20)
    assert (counts["first_only"], counts["second_only"]) == (0, 0) and plain.rows == ()
    for metric in ("uap", "recall_at_p90", None):
        sheet, counts = change_sheet([Comparison("disc", a, b, NoImages(), NoImages(),
                                                 by_rank(first, None if metric is None else [metric]))], 20,
                                     labels=("resnet34-random · Flat", "resnet34 · Flat"), runs=("aaaa", "bbbb"))
        assert (counts["first_only"], counts["second_only"], counts["by_rank"]) == (0, 2, 1), metric
        assert [row.tiles[0].caption[0] for row in sheet.rows] == ["Q1", "Q0"]  # 1/4 -> 1/2 before 1/3 -> 1/2
        assert "true copy at rank 4" in sheet.rows[0].title and "true copy at rank 2" in sheet.rows[0].title
        assert sheet.title.startswith("resnet34-random · Flat (run aaaa) vs resnet34 · Flat (run bbbb): 0 ranked")
    # The other way round the sections swap.
    _, back = change_sheet([Comparison("disc", b, a, NoImages(), NoImages(), True)], 20)
    assert (back["first_only"], back["second_only"]) == (2, 0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_sheet_lists_exactly_the_units_whose_outcome_differs_both_ways(case):
    first, second, first_only, second_only = CASES[case]()
    sheet, counts, units = _listed(first, second)
    assert (counts["first_only"], counts["second_only"]) == (len(first_only), len(second_only))
    assert set(units[:len(first_only)]) == first_only and set(units[len(first_only):]) == second_only
    assert len(units) == sheet.total == len(first_only) + len(second_only)
    assert all(row.title.split(" · first ")[1].startswith("right: ") for row in sheet.rows[:len(first_only)])
    # The other way round: the sections swap.
    _, swapped, back = _listed(second, first)
    assert (swapped["first_only"], swapped["second_only"]) == (len(second_only), len(first_only))
    assert set(back[:len(second_only)]) == second_only and set(back[len(second_only):]) == first_only
    # A run against itself: nothing changed.
    assert _listed(first, first)[0].rows == ()


def test_units_one_run_lacks_and_unjudged_ones_are_counted_not_listed():
    first, second, _, _ = _disc()
    _, counts, units = _listed(first, second.take(np.array([1, 2, 3])))  # second lost Q0
    assert counts["unmatched"] == 1 and counts["unjudged"] == 1 and set(units) == {"Q1", "Q2"}


def test_the_rows_are_shared_between_the_two_sections_and_capped():
    assert _share(30, 2, 10) == (8, 2) and _share(2, 30, 10) == (2, 8) and _share(30, 30, 9) == (5, 4)
    assert _share(0, 0, 24) == (0, 0)
    ids = np.array([f"u{i}" for i in range(40)])
    a = np.r_[np.ones(30), np.zeros(10)]
    b = np.r_[np.zeros(30), np.ones(10)]
    make = lambda c: Units("query", "x", ids, {"correct": c}, {"acc": {"statistic": "ratio", "num": "correct"}})  # noqa: E731
    sheet, counts, units = _listed(make(a), make(b), rows=12)
    assert sheet.total == 40 and len(units) == 12 and (counts["first_only"], counts["second_only"]) == (30, 10)
    assert set(units[:6]) <= {f"u{i}" for i in range(30)} and set(units[6:]) <= {f"u{i}" for i in range(30, 40)}


def test_worst_first_within_a_section():
    ids = ["0", "1", "2"]
    first = counting_units([1, 2, 3], [1, 2, 3], ids)
    second = counting_units([2, 9, 4], [1, 2, 3], ids)  # off by 1, 7, 1
    assert _listed(first, second)[2] == ["1", "0", "2"]


def test_worst_first_in_both_sections_by_the_wrong_runs_severity():
    """Each section is ordered by the severity of the run that got the unit wrong: the first section
    (right in the first run) by the second run's, the other by the first run's (issue 56: the second
    section sorted by the wrong run's severity survived)."""
    ids = ["0", "1", "2", "3", "4", "5"]
    truth = [1, 2, 3, 1, 2, 3]
    first = counting_units([1, 2, 3, 4, 9, 5], truth, ids)   # wrong on 3, 4, 5: off by 3, 7, 2
    second = counting_units([3, 8, 4, 1, 2, 3], truth, ids)  # wrong on 0, 1, 2: off by 2, 6, 1
    _, counts, units = _listed(first, second)
    assert (counts["first_only"], counts["second_only"]) == (3, 3)
    assert units == ["1", "0", "2", "4", "3", "5"]
    assert _listed(second, first)[2] == ["4", "3", "5", "1", "0", "2"]


def test_an_id_with_a_script_tag_is_escaped():
    evil = '<script>alert("x")</script>'
    first = counting_units([1, 2], [1, 2], [evil, "ok"])
    second = counting_units([3, 2], [1, 2], [evil, "ok"])
    sheet, _, units = _listed(first, second)
    assert units == [evil]
    page, _ = render_html(sheet)
    assert "<script" not in page.lower() and "&lt;script&gt;" in page


def _jpeg(path: Path, colour: tuple[int, int, int]) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (40, 30), colour).save(path)
    return path


def _disc_root(root: Path) -> Path:
    for i in range(4):
        _jpeg(root / "val_query" / f"Q{i}.jpg", (60 * i, 100, 50))
        _jpeg(root / "val_ref" / f"R{i}.jpg", (100, 60 * i, 50))
    (root / "val_groundtruth_matches.csv").write_text("query_id,reference_id\nQ0,R0\nQ1,R1\nQ2,R2\nQ3,\n")
    return root


def test_photos_come_from_the_benchmarks_lists_under_its_root(tmp_path):
    root = _disc_root(tmp_path / "disc")
    first, second, _, _ = _disc()
    images = images_for(first, "disc", str(root), {"train_dir": None})
    a, b = outcomes_of(first), outcomes_of(second)
    sheet, _ = change_sheet([Comparison("disc", a, b, images, images)], 24)
    row = sheet.rows[0]  # Q1: the query, the first run's top (R1, a true copy), the second's (R0, false)
    assert [(t.image.name if t.image else None, t.mark) for t in row.tiles] == [
        ("Q1.jpg", "query"), ("R1.jpg", "true"), ("R0.jpg", "false")]
    page, shown = render_html(sheet)
    assert shown == 2 and page.count("data:image/jpeg;base64,") == 6  # Q1, R1, R0; Q2, R0, R2
    assert isinstance(images_for(first, "disc", "", {}), NoImages)
    assert isinstance(images_for(first, "disc", "s3://bucket/disc", {}), NoImages)
    assert isinstance(images_for(first, "no_such_benchmark", str(root), {}), NoImages)


def test_a_path_outside_the_root_is_refused(tmp_path):
    root = tmp_path / "root"
    outside = _jpeg(tmp_path / "secret.jpg", (255, 0, 0))
    (root / "q").mkdir(parents=True)
    (root / "q" / "link.jpg").symlink_to(outside)

    class Adapter:
        def image_sets(self):
            return {"query": ImageSet(("Q1", "Q2"), (root / ".." / "secret.jpg", root / "q" / "link.jpg"))}

    images = BenchmarkImages(root, Adapter())
    first, second, _, _ = _disc()
    sheet, _ = change_sheet([Comparison("d", outcomes_of(first), outcomes_of(second), images, images)], 24)
    tiles = [row.tiles[0] for row in sheet.rows]
    assert all(t.image is None and "outside the benchmark's root" in t.missing for t in tiles)
    page, _ = render_html(sheet)
    assert "data:image" not in page


def test_abid_questions_show_their_bin_photo(tmp_path):
    _jpeg(tmp_path / "bin-images" / "00524.jpg", (1, 2, 3))
    first = answer_units([1], [1], ["523:B00X#2"], task="verification")
    [(unit, path, why)] = AbidImages(tmp_path).unit(outcomes_of(first), 0)
    assert unit == "523:B00X#2" and path == (tmp_path / "bin-images" / "00524.jpg").resolve() and not why


# --- through MLflow: vsbench compare --runs, the report's link, the nightly sheet ----------------------


@pytest.fixture
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("VSBENCH_MLFLOW_ARTIFACT_LOCATION", str(tmp_path / "artifacts"))
    monkeypatch.setenv("VSBENCH_RESAMPLES", "50")
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow.tracking import MlflowClient

    return MlflowClient(uri)


def _night(client, experiment: str, name: str, units: Units, root: Path, folder: Path,
           notes: dict[str, str] | None = None) -> tuple[str, str]:
    """A parent run with one DISC evaluation run holding ``units``: (parent id, evaluation run id)."""
    from vsbench.tracking.evaluations import Embedder, evaluations_of, log_evaluations
    from vsbench.tracking.provenance import DATA_DIGEST_TAG, DATA_ROOT_TAG
    from vsbench.tracking.runs import open_parent_run

    parent = open_parent_run(experiment, f"kfp-{name}", "vsbench-nightly", {})
    path = folder / f"{name}.parquet"
    sha = units.write(path)
    record = {"codec": "Flat", "accuracy_at_1": float(units.values("correct_at_1").sum() / 3)}
    evaluations = evaluations_of("disc", [record], Embedder(model="m"), data_digest="ab" * 32, data_root=str(root),
                                 run_params={"k": 10, "benchmark_options": json.dumps({"train_dir": None})},
                                 units=[{"path": str(path), "sha256": sha, **({"notes": notes} if notes else {})}])
    [run_id] = log_evaluations(client, parent, evaluations, tags={DATA_DIGEST_TAG: "ab" * 32, DATA_ROOT_TAG: str(root)})
    client.set_terminated(parent, "FINISHED")
    return parent, run_id


@pytest.mark.slow  # an MLflow store (seconds): `make test` runs it, `make mutate` does not
def test_vsbench_compare_runs_writes_the_sheet_and_the_report_links_it(store, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from vsbench.cli.app import app
    from vsbench.steps.compare import night_compare_sheet

    root = _disc_root(tmp_path / "disc")
    first, second, _, _ = _disc()
    baseline, run_a = _night(store, "e", "a", first, root, tmp_path)
    night, run_b = _night(store, "e", "b", second, root, tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["compare", "--runs", run_a, run_b, "--sheet", "changed",
                                      "--report", "report.html"])
    assert result.exit_code == 0, result.output
    # Its unit files name uap: compared by the rank of each query's copy (Q1: 1 -> 2, Q2: none -> 1).
    assert "compare sheet: 1 unit whose true match ranked higher in the first, 1 in the second" in result.output
    page = (tmp_path / "changed" / f"compare-{run_a[:8]}-{run_b[:8]}.html").read_text()
    assert (tmp_path / "changed" / f"compare-{run_a[:8]}-{run_b[:8]}.png").stat().st_size > 0
    assert set(re.findall(r"<h2>disc · (Q\d) ·", page)) == {"Q1", "Q2"}
    # The sheet names both runs (issue 57: it said "first vs second"); one model on two nights: by run id.
    assert f"<h1>m · Flat ({run_a[:8]}) vs m · Flat ({run_b[:8]}): 1 ranked the true match higher" in page
    assert page.count("data:image/jpeg;base64,") == 6
    report = (tmp_path / "report.html").read_text()
    assert f'href="changed/compare-{run_a[:8]}-{run_b[:8]}.html"' in report

    result = CliRunner().invoke(app, ["compare", "--runs", run_b, run_a, "--json"])
    sheet = json.loads(result.output)["sheet"]
    assert (sheet["first_only"], sheet["second_only"]) == (1, 1)
    assert Path(sheet["html"]).parent.name == f"compare-{run_b[:8]}-{run_a[:8]}"  # the default folder

    # Two parents holding no metric of their own share none: refused in one line (issue 54), where
    # this printed an empty table and exit 0.
    parent_only = CliRunner().invoke(app, ["compare", "--runs", baseline, night, "--json"])
    assert parent_only.exit_code == 2 and parent_only.stdout == ""
    assert parent_only.stderr.strip().splitlines() == [
        f"error: runs {baseline} and {night} share no metric: nothing to compare (compare two runs of one benchmark)"]

    monkeypatch.setenv("VSBENCH_FAILURE_ROWS", "0")  # sheets off: none, and no key
    result = CliRunner().invoke(app, ["compare", "--runs", run_a, run_b, "--json", "--sheet", "off"])
    assert "sheet" not in json.loads(result.output) and not (tmp_path / "off").exists()
    monkeypatch.delenv("VSBENCH_FAILURE_ROWS")

    written = night_compare_sheet(store, night, baseline)
    assert written is not None and (written["counts"]["first_only"], written["counts"]["second_only"]) == (1, 1)
    logged = {f.path for f in store.list_artifacts(night, "failures")}
    assert logged == {f"failures/compare-{baseline}.png", f"failures/compare-{baseline}.html"}


@pytest.mark.slow  # an MLflow store (seconds): `make test` runs it, `make mutate` does not
def test_compare_prints_each_runs_interval_note_beside_its_interval(store, tmp_path, monkeypatch):
    """Issue 55: a run whose interval is weak (its tag ``interval_note.<metric>``) says so beside that
    run's value in ``compare --runs``: the terminal, ``--json`` and the report's pair table."""
    from typer.testing import CliRunner

    from vsbench.cli.app import app

    root = _disc_root(tmp_path / "disc")
    first, second, _, _ = _disc()
    note = "only 3 queries (under 20): a rough interval"
    _, run_a = _night(store, "e", "a", first, root, tmp_path, {"accuracy_at_1": note})
    _, run_b = _night(store, "e", "b", second, root, tmp_path)
    assert store.get_run(run_a).data.tags["interval_note.accuracy_at_1"] == note
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["compare", "--runs", run_a, run_b, "--sheet", "off", "--report", "r.html"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("  first ") and line.endswith(f"  ({note})") for line in lines), result.output
    assert not any(line.startswith("  second ") and "(only" in line for line in lines)
    assert f'<span class="ci-note">({note})</span>' in (tmp_path / "r.html").read_text()
    data = json.loads(CliRunner().invoke(app, ["compare", "--runs", run_a, run_b, "--json", "--sheet", "off"]).output)
    [row] = [m for m in data["metrics"] if m["metric"] == "accuracy_at_1"]
    assert row["first_interval_note"] == note and "second_interval_note" not in row


@pytest.mark.slow  # an MLflow store (seconds): `make test` runs it, `make mutate` does not
def test_the_nightly_check_logs_the_sheet_on_the_night(store, tmp_path, capsys):
    from components.nightly import regression_check  # this checkout's (vsbench.components: the installed one)
    from kfp.dsl import Metrics

    root = _disc_root(tmp_path / "disc")
    first, second, _, _ = _disc()
    baseline, _ = _night(store, "e", "a", first, root, tmp_path)
    night, _ = _night(store, "e", "b", second, root, tmp_path)
    out = Metrics(name="metrics", uri="", metadata={})
    regression_check.python_func(experiment="e", parent_run_id=night, threshold=0.5, relative=False,
                                 metrics_json="[]", pipeline="vsbench-nightly", metrics=out)
    # Its unit files name uap: the line says the sheet's rank words (issue 55: it said "right only").
    assert ("compare sheet: 1 unit whose true match ranked higher in the baseline, 1 in tonight's run: failures/"
            in capsys.readouterr().out)
    assert {f.path for f in store.list_artifacts(night, "failures")} == {
        f"failures/compare-{baseline}.png", f"failures/compare-{baseline}.html"}


def test_an_accuracy_unit_wrong_is_worse_than_one_right_and_each_says_which() -> None:
    """``correct_outcomes``, the generic rule: a 0/1 ``correct`` column is the verdict, every unit
    judged, a wrong one more severe than a right one (the sheet's worst-first order), the rule and
    the answer in words (issue 56, make mutate's stats_outcomes survivors: severity of the right
    units, the words, the rule dropped)."""
    from vsbench.stats.outcomes import correct_outcomes

    units = Units("query", "x", np.array(["a", "b", "c"]), {"correct": np.array([1.0, 0.0, 1.0])},
                  {"acc": {"statistic": "ratio", "num": "correct"}})
    outcomes = correct_outcomes(units)
    assert outcomes.right.tolist() == [True, False, True] and outcomes.judged.tolist() == [True] * 3
    assert outcomes.severity.tolist() == [0.0, 1.0, 0.0] and outcomes.severity.dtype == np.float64
    assert outcomes.rule == "right: correct = 1"
    assert [outcomes.answer(row) for row in range(3)] == ["right", "wrong", "right"]


class _OneRun:
    """A units reader over one run ``run-a`` that logged ``params`` and the first disc unit file."""

    def __init__(self, params: dict[str, str], benchmark: str = "disc") -> None:
        from types import SimpleNamespace

        from vsbench.tracking.evaluations import BENCHMARK_TAG

        tags = {BENCHMARK_TAG: benchmark} if benchmark else {}
        self._run = SimpleNamespace(info=SimpleNamespace(run_id="run-a", run_name="a"),
                                    data=SimpleNamespace(tags=tags, params=params))
        self._units = _disc()[0]

    def units_run_id(self, run_id: str) -> str:
        return ""

    def run(self, run_id: str):
        return self._run

    def units(self, run_id: str) -> dict[str, Units]:
        return {"uap": self._units}


@pytest.mark.parametrize("value", ["not json", "[1, 2]", '"x"', '{"nosuch": 1}', '{"query_dir": "q", "exec": "x"}'])
def test_a_runs_benchmark_options_pass_the_command_lines_check_or_are_one_line_naming_the_run(value):
    """A run's ``benchmark_options`` param becomes the loader's keywords: parsed as the command line
    parses ``--benchmark-options`` (a JSON object of names the benchmark's loader takes), else one
    line naming the run (was: broken JSON read as ``{}`` in silence, unknown names handed on)."""
    from vsbench.steps.compare import run_side

    with pytest.raises(ValueError) as refused:
        run_side(_OneRun({"benchmark_options": value}), "run-a")
    said = str(refused.value)
    assert "\n" not in said and said.startswith("run run-a: its benchmark_options param "), said


def test_a_runs_benchmark_options_are_checked_against_its_unit_files_benchmark_when_untagged():
    from vsbench.steps.compare import run_side

    with pytest.raises(ValueError, match=r"run run-a: .*has no option 'nosuch'"):
        run_side(_OneRun({"benchmark_options": '{"nosuch": 1}'}, benchmark=""), "run-a")


def test_a_runs_valid_benchmark_options_reach_the_loader():
    from vsbench.steps.compare import run_side

    side = run_side(_OneRun({"benchmark_options": '{"query_dir": "q"}'}), "run-a")
    assert side.options == {"query_dir": "q"} and side.benchmark == "disc"
    assert run_side(_OneRun({}), "run-a").options == {}


def test_vsbench_compare_says_a_refused_options_param_in_one_warning_line(tmp_path, capsys):
    from vsbench.cli.report import _compare_sheet

    made = _compare_sheet(_OneRun({"benchmark_options": "{broken"}), ("run-a", "run-a"), tmp_path / "sheet", None,
                          None, tmp_path / "report.html")
    err = capsys.readouterr().err.strip().splitlines()
    assert made == {} and len(err) == 1 and err[0].startswith("warning: no compare sheet: ValueError: run run-a: "), err


# Issue 55 item 8, every benchmark whose headline is a ranking: per query, the 1-based ranks of its true
# matches in run A and in run B (four results a query). qa climbs 3 -> 1, qb falls 1 -> 4, qc climbs
# 4 -> 2 (right/wrong at rank 1 sees neither run right), qd stays at 2; qe (AP benchmarks only) keeps
# its first match at 1 while its second climbs 3 -> 2: its AP moves, its first match's rank does not.
MOVES = {"qa": ((3,), (1,)), "qb": ((1,), (4,)), "qc": ((4,), (2,)), "qd": ((2,), (2,))}
MOVES_AP = {**MOVES, "qe": ((1, 3), (1, 2))}


def _order(ranks: tuple[int, ...]) -> list[int]:
    """The four results' truth (1: a true match) in rank order, the true ones at ``ranks``."""
    return [int(r in ranks) for r in range(1, 5)]


def _moved_disc(run: int) -> Units:
    queries = list(MOVES)
    q, refs, scores = [], [], []
    for query, ranks in MOVES.items():
        for place, true in enumerate(_order(ranks[run]), 1):
            q.append(query)
            refs.append(f"R{query}" if true else f"X{place}")
            scores.append(1.0 - place / 10)
    return copy_detection_units(q, refs, scores, queries, [f"R{query}" for query in queries], queries=queries)


def _moved_copydays(run: int) -> Units:
    hits = [_order(ranks[run]) for ranks in MOVES_AP.values()]
    return copydays_units(list(MOVES_AP), hits, [[0.1, 0.2, 0.3, 0.4]] * len(hits),
                          [len(ranks[run]) for ranks in MOVES_AP.values()], ["strong"] * len(hits),
                          result_ids=[[f"o{n}" for n in range(4)]] * len(hits))


def _moved_vsd(run: int) -> Units:
    seeds, labels, ranks, scores = [], [], [], []
    for seed, moves in MOVES.items():
        for place, true in enumerate(_order(moves[run]), 1):
            seeds.append(seed)
            labels.append(true)
            ranks.append(place)
            scores.append(1.0 - place / 10)
    # qf: its positive at rank 2 in run A, out of B's filtered list (rank 0: below every rank)
    seeds += ["qf"] * 4
    labels += [0, 1, 0, 0]
    ranks += [1, 2, 3, 4] if run == 0 else [1, 0, 2, 3]
    scores += [0.9, 0.8, 0.7, 0.6]
    return vsd_units(seeds, labels, ranks, scores)


def _moved_product_search(run: int) -> Units:
    # Candidates 0.. (one per gallery row) fulfil the query, the others do not; the query's feature puts
    # candidate c at its place by cosine (4 - place + 1 on c's own axis).
    features, labels = [], []
    for ranks in MOVES_AP.values():
        places = list(ranks[run]) + [p for p in range(1, 5) if p not in ranks[run]]
        features.append([5.0 - places[c] for c in range(4)])
        labels.append([int(c < len(ranks[run])) for c in range(4)])
    return product_search_units(features, np.eye(4), [[0, 1, 2, 3]] * len(labels), labels, ids=list(MOVES_AP))


# benchmark: (builder, by AP, first section, second section); a section's rows (unit, A's value, B's value)
# largest move first. One true match at 0-based rank r: trapezoidal AP (Copydays) ((1 if r == 0) + 1/(r+1))/2,
# AP (product search) 1/(r+1).
RANK_SHEETS = {
    "disc": (_moved_disc, False, [("qb", 1, 4)], [("qa", 3, 1), ("qc", 4, 2)]),
    "vsd": (_moved_vsd, False, [("qb", 1, 4), ("qf", 2, None)], [("qa", 3, 1), ("qc", 4, 2)]),
    "copydays": (_moved_copydays, True, [("qb", "AP 1", "AP 0.125")],  # qe: (1 + (1/2 + 2/3)/2)/2 -> 1
                 [("qa", "AP 0.1667", "AP 1"), ("qe", "AP 0.7917", "AP 1"), ("qc", "AP 0.125", "AP 0.25")]),
    "product_search": (_moved_product_search, True, [("qb", "AP 1", "AP 0.25")],  # qe: (1 + 2/3)/2 -> 1
                       [("qa", "AP 0.3333", "AP 1"), ("qc", "AP 0.25", "AP 0.5"), ("qe", "AP 0.8333", "AP 1")]),
}


@pytest.mark.parametrize("benchmark", sorted(RANK_SHEETS))
def test_a_ranking_benchmarks_sheet_lists_the_queries_whose_rank_or_ap_moved_most_both_ways(benchmark):
    """Issue 55 item 8: Copydays, VSD and product search kept right/wrong at rank 1, so a query whose true
    match climbed 4 -> 2 (or whose second match climbed) was missing from their sheet. Every metric
    their unit files hold moves with the ranks, so their sheet lists the queries whose own AP (Copydays,
    product search) or best true match's rank (VSD; DISC as before) moved, under the run where it is
    higher, the largest move first, each row with the two runs' values."""
    from vsbench.reporting.changes import count_words
    from vsbench.steps.compare import by_rank

    build, ap, first_rows, second_rows = RANK_SHEETS[benchmark]
    first, second = build(0), build(1)
    if benchmark != "disc":  # every metric of theirs is a ranking one (DISC: accuracy_at_1 is not)
        assert all(by_rank(first, [metric]) for metric in first.metrics), benchmark
    a, b = outcomes_of(first), outcomes_of(second)
    if ap:  # the AP a row shows, recomputed from the lists, is the one the file's metric averaged
        assert a.ap is not None and a.ap.tolist() == first.values("ap").tolist()
    sheet, counts = change_sheet([Comparison(benchmark, a, b, NoImages(), NoImages(), by_rank(first, None))], 20,
                                 labels=("A", "B"))
    assert (counts["first_only"], counts["second_only"], counts["by_rank"], counts["by_ap"]) == (
        len(first_rows), len(second_rows), 1, int(ap))
    assert counts["same"] == 1  # qd
    rows = []
    for row in sheet.rows:
        unit = row.tiles[0].caption[0]
        if ap:
            assert row.tiles[0].caption[1:] == (f"A: {rows_value(first_rows + second_rows, unit, 1)}",
                                                 f"B: {rows_value(first_rows + second_rows, unit, 2)}"), row.tiles[0]
            rows.append((unit, *(c.split(": ", 1)[1] for c in row.tiles[0].caption[1:])))
        else:  # each run's answer names its true match's rank, as DISC's rows did
            left, right = row.title.split(" · B ")
            ranks = [re.findall(r"rank (\d+)", part) for part in (left, right)]  # none: not ranked
            rows.append((unit, *(int(found[-1]) if found else None for found in ranks)))
    assert rows == first_rows + second_rows
    words = "had the higher AP" if ap else "ranked the true match higher"
    rule = "each unit's own AP, largest move first; " if ap else "the rank of each unit's first true match"
    assert sheet.notes[0].startswith(f"{benchmark}: {rule}"), sheet.notes
    assert sheet.title == f"A vs B: {len(first_rows)} {words} only in A, {len(second_rows)} only in B"
    units = "unit" if len(first_rows) == 1 else "units"
    assert count_words(counts).startswith(f"{len(first_rows)} {units} whose {'AP was higher' if ap else 'true match ranked'}")
    # Run B first: the sections swap, each still largest move first.
    _, back = change_sheet([Comparison(benchmark, b, a, NoImages(), NoImages(), True)], 20)
    assert (back["first_only"], back["second_only"]) == (len(second_rows), len(first_rows))


def rows_value(rows: list[tuple], unit: str, at: int) -> object:
    return next(row[at] for row in rows if row[0] == unit)


def test_a_sheet_of_ranks_and_aps_says_ranked_and_one_of_right_and_wrong_says_right():
    """Several unit files on one sheet: a rank comparison beside an AP one is said in the rank's words (a
    higher AP is its true matches ranked higher); a right/wrong one alone in its own."""
    disc = Comparison("disc", outcomes_of(_moved_disc(0)), outcomes_of(_moved_disc(1)), NoImages(), NoImages(), True)
    days = Comparison("copydays", outcomes_of(_moved_copydays(0)), outcomes_of(_moved_copydays(1)), NoImages(),
                      NoImages(), True)
    sheet, counts = change_sheet([disc, days], 20, labels=("A", "B"))
    assert (counts["by_rank"], counts["by_ap"], counts["first_only"], counts["second_only"]) == (1, 0, 2, 5)
    assert sheet.title == "A vs B: 2 ranked the true match higher only in A, 5 only in B"
    assert [note.split(";")[0] for note in sheet.notes[:2]] == [
        "disc: the rank of each unit's first true match, largest move first (its AP with one true match)",
        "copydays: each unit's own AP, largest move first"]
    plain, counts = change_sheet([Comparison("copydays", days.first, days.second, NoImages(), NoImages())], 20,
                                 labels=("A", "B"))
    assert (counts["by_rank"], counts["by_ap"]) == (0, 0) and plain.title.startswith("A vs B: 1 right only in A")
    assert plain.notes[0] == "copydays: right: the nearest result is a positive"  # the rule alone


class _TwoRuns:
    """A units reader over runs ``run-a`` and ``run-b``, Copydays evaluations holding ``units``."""

    def __init__(self, units: dict[str, Units]) -> None:
        from types import SimpleNamespace

        from vsbench.tracking.evaluations import BENCHMARK_TAG

        self._units = units
        self._runs = {run: SimpleNamespace(info=SimpleNamespace(run_id=run, run_name=run),
                                           data=SimpleNamespace(tags={BENCHMARK_TAG: "copydays"}, params={}))
                      for run in units}

    def units_run_id(self, run_id: str) -> str:
        return ""

    def run(self, run_id: str):
        return self._runs[run_id]

    def units(self, run_id: str) -> dict[str, Units]:
        return {"strong_map": self._units[run_id]}


def test_compare_runs_sheet_of_an_ap_benchmark_reaches_the_terminal_and_the_report_in_ap_words(tmp_path):
    """``vsbench compare --runs``'s sheet of two Copydays runs (no ``--metric``: by AP) hands its AP
    words on to the count line and the report's link (``by_ap``), not "ranked higher" or "right"."""
    from vsbench.cli.report import _compare_sheet
    from vsbench.reporting.changes import count_words

    reader = _TwoRuns({"run-a": _moved_copydays(0), "run-b": _moved_copydays(1)})
    made = _compare_sheet(reader, ("run-a", "run-b"), tmp_path / "sheet", None, None, tmp_path / "r.html")
    assert (made["first_only"], made["second_only"], made["by_rank"], made["by_ap"]) == (1, 3, 1, 1)
    assert count_words(made) == "1 unit whose AP was higher in the first, 3 in the second"
    assert "AP 0.1667" in Path(str(made["html"])).read_text()


def test_a_unit_file_whose_ap_cannot_be_recomputed_is_left_out_in_one_note_naming_run_and_query(tmp_path):
    """The AP a product-search row shows is recomputed from the file's scores (issue 55 item 8): a file
    read back with a NaN score (or a query said to have a positive that holds none) is no sheet of that
    pair, said in one line naming the run and the query; never a traceback, never a made-up AP."""
    from vsbench.stats.units import ListColumn
    from vsbench.steps.compare import RunSide, comparisons

    honest = _moved_product_search(0)
    score = honest.columns["score"]
    values = np.asarray(score.values, dtype=np.float64).copy()
    values[5] = np.nan  # query qb's second candidate
    forged = Units(honest.kind, honest.benchmark, honest.ids, {**honest.columns, "score": ListColumn(values, score.offsets)},
                   honest.metrics, None, honest.variant)
    sides = [RunSide(run, [units], "", {}, "") for run, units in (("run-a", honest), ("run-b", forged))]
    found, notes = comparisons(*sides)
    assert found == [] and notes == [
        "product_search: run run-b: product-search query qb: its AP cannot be computed: scores must be finite: "
        "not compared"]
