"""How an ABID run on this machine ends (``vsbench demo``, ``abid run-local``): the store it names
never shows a password, even in a URI that cannot be parsed apart (issue 49, found by the bundles'
mutation run: ``redact_uri`` answers "" for those, and the ending printed the raw URI instead)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vsbench.io.terminal import too_wide
from vsbench.platform.local_run import LocalRunReport, abid_ending


def _report(tmp_path: Path) -> LocalRunReport:
    return LocalRunReport(succeeded=True, seconds=1.0, run_dir=None, data_root=tmp_path, parent_run_id="p")


@pytest.mark.parametrize("uri", ["http://alice:s3cret@mlflow.example:99999/", "http://alice:s3cret@[::1/"])
def test_a_store_uri_with_a_password_that_cannot_be_parsed_is_not_printed(tmp_path: Path, uri: str) -> None:
    ending = abid_ending(_report(tmp_path), uri, "demo")
    assert "s3cret" not in ending and "alice" not in ending
    last = ending[ending.index("  MLflow store:"):]  # wrapped within 100 columns (issue 57)
    assert too_wide(last) == [] and " ".join(last.split()) == (
        "MLflow store: MLFLOW_TRACKING_URI (experiment demo; not shown: it holds a password in a form that cannot "
        "be taken out)")


def test_a_store_uri_with_a_password_is_printed_without_it(tmp_path: Path) -> None:
    ending = abid_ending(_report(tmp_path), "https://alice:s3cret@mlflow.example:8443/", "demo")
    assert "s3cret" not in ending and "  MLflow store:         https://mlflow.example:8443/ (experiment demo)" in ending
    assert ending.splitlines()[-1] == "Open the MLflow UI at: https://mlflow.example:8443/"


def test_the_ending_fits_100_columns_with_long_paths(tmp_path: Path) -> None:
    """Long data roots and a long local store: each path whole on its line after its label, the
    `mlflow ui` command continued with backslashes, read back by a shell as the one command."""
    import shlex
    import sys

    root = tmp_path / ("a-long-folder-name-for-the-abid-data-root-" * 2) / "data"
    store = f"sqlite:///{root}/mlflow.db"
    report = _report(root)
    ending = abid_ending(report, store, "vsbench-abid")
    assert too_wide(ending) == [], ending
    lines = ending.splitlines()
    assert lines[lines.index("  task files:") + 1] == f"    {root / 'tasks'}"
    command = lines[lines.index("Open the MLflow UI with:") + 1:]
    assert shlex.split(" ".join(line.removesuffix(" \\") for line in command)) == [
        str(Path(sys.executable).parent / "mlflow"), "ui", "--backend-store-uri", store, "--host", "127.0.0.1",
        "--port", "5000"]
    short = abid_ending(_report(Path("/data")), "sqlite:////data/m.db", "demo").splitlines()
    assert "  task files:           /data/tasks" in short  # the layout people know, where it fits
