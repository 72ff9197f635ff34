"""The report links each model's failure sheet (issue 47) in MLflow's artifact view: the links, which
run's ``failures/`` is read, and that nothing is linked where no sheet was logged."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from mlflow.entities import FileInfo

from vsbench.reporting.html_report import write_report
from vsbench.reporting.runs import FailureSheets, RunRecord, sheet_run_id
from vsbench.tracking.failures import FAILURES_DIR, SheetFiles, sheets_on_run
from vsbench.tracking.views import artifact_page

UI = "http://mlflow.test:5000"
T0 = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


class _Client:
    """``list_artifacts`` of a few runs; counts the requests."""

    def __init__(self, files: dict[str, list[str]], broken: frozenset[str] = frozenset()) -> None:
        self.files = files
        self.broken = broken
        self.calls: list[tuple[str, str]] = []

    def list_artifacts(self, run_id: str, path: str) -> list[FileInfo]:
        self.calls.append((run_id, path))
        if run_id in self.broken:
            raise OSError("connection refused")
        return [FileInfo(name, name.endswith("/"), 10) for name in self.files.get(run_id, [])
                if name.startswith(path + "/")]


def _record(run_id: str, model: str, *, start: datetime = T0, parent: str = "parent", units: str = "",
            benchmark: str = "disc") -> RunRecord:
    return RunRecord(run_id, start, "vsbench-similarity", model, benchmark, {"uap": 0.5, "accuracy_at_1": 0.6},
                     {}, experiment_id="7", parent_run_id=parent, units_run_id=units)


def test_artifact_page_is_mlflow_3s_route_with_the_file_selected(monkeypatch):
    monkeypatch.setenv("VSBENCH_MLFLOW_UI", UI)
    assert (artifact_page("abc", "7", "failures/disc Flat#1.html")
            == f"{UI}/#/experiments/7/runs/abc/artifacts/failures/disc%20Flat%231.html?workflowType=machine_learning")


def test_sheets_are_paired_by_stem_from_one_listing():
    client = _Client({"r1": [f"{FAILURES_DIR}/b.png", f"{FAILURES_DIR}/a.html", f"{FAILURES_DIR}/a.png",
                             f"{FAILURES_DIR}/notes.txt", f"{FAILURES_DIR}/sub/"]})
    assert sheets_on_run(client, "r1") == [SheetFiles("r1", "a", "failures/a.html", "failures/a.png"),
                                           SheetFiles("r1", "b", "", "failures/b.png")]
    assert sheets_on_run(client, "r2") == []
    assert client.calls == [("r1", "failures"), ("r2", "failures")]


def test_the_sheet_is_on_the_evaluation_or_its_unit_files_run_never_on_a_shared_parent():
    assert sheet_run_id(_record("ev", "m", parent="p")) == "ev"  # an evaluation run
    assert sheet_run_id(_record("p", "baselines", parent="", units="score-step")) == "score-step"  # ABID
    assert sheet_run_id(_record("p", "m", parent="")) == ""  # a parent's own pairs: whose sheet?


def test_each_run_is_listed_once_and_a_failed_listing_shows_no_sheet():
    client = _Client({"ev": ["failures/x.html"]}, broken=frozenset({"down"}))
    finder = FailureSheets(client)
    for _ in range(3):
        assert [s.stem for s in finder(_record("ev", "m"))] == ["x"]
        assert finder(_record("down", "n")) == []
    assert sorted(client.calls) == [("down", "failures"), ("ev", "failures")]
    assert "run down: its failure sheets cannot be listed (OSError: connection refused)" == finder.refused["down"]


def _failure_cells(page: str) -> dict[str, str]:
    """model -> the failure row's cell of that model's column, from one leaderboard table."""
    head = re.search(r'<table class="leaderboard".*?<thead><tr>(.*?)</tr>', page, re.S).group(1)
    models = [m.replace("<wbr>", "") for m in re.findall(r"<th[^>]*>(.*?)</th>", head)[2:]]
    row = re.search(r'<tr class="failures">(.*?)</tr>', page, re.S)
    if row is None:
        return {}
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)[2:]
    return dict(zip(models, cells))


def test_the_report_links_each_models_newest_sheet_and_nothing_where_none(tmp_path, monkeypatch):
    monkeypatch.setenv("VSBENCH_MLFLOW_UI", UI)
    records = [_record("old-a", "model-a", start=T0 - timedelta(days=1)), _record("new-a", "model-a"),
               _record("ev-b", "model-b"), _record("ev-c", "<script>c</script>")]
    client = _Client({"old-a": ["failures/old.html", "failures/old.png"],
                      "new-a": ["failures/disc-Flat.html", "failures/disc-Flat.png"],
                      "ev-c": ["failures/<script>x</script>.png"]})
    page = write_report(records, tmp_path / "r.html", title="t", sheets=FailureSheets(client)).read_text()

    cells = _failure_cells(page)
    assert set(cells) == {"model-a", "model-b", "&lt;script&gt;c&lt;/script&gt;"}
    html_link = artifact_page("new-a", "7", "failures/disc-Flat.html").replace("&", "&amp;")
    png_link = artifact_page("new-a", "7", "failures/disc-Flat.png").replace("&", "&amp;")
    assert f'class="failure-link" href="{html_link}"' in cells["model-a"]  # the newest run's, not old-a's
    assert f'class="failure-png" href="{png_link}"' in cells["model-a"]
    assert "old" not in cells["model-a"]
    assert cells["model-b"] == ""  # no sheet logged: nothing shown
    assert page.count("<script") == 1  # the report's own; every id and file name escaped
    assert "%3Cscript%3Ex%3C/script%3E.png" in cells["&lt;script&gt;c&lt;/script&gt;"]
    assert ("old-a", "failures") not in client.calls  # only the runs whose values the table shows


def test_no_finder_or_no_sheet_anywhere_adds_no_row(tmp_path):
    records = [_record("ev-b", "model-b")]
    assert _failure_cells(write_report(records, tmp_path / "a.html", title="t").read_text()) == {}
    empty = FailureSheets(_Client({}))
    assert _failure_cells(write_report(records, tmp_path / "b.html", title="t", sheets=empty).read_text()) == {}
